"""The guide's program with 16 ranks, debugged through the real shell in a pseudo-terminal."""

from __future__ import annotations

import re
import signal

import pexpect
import pytest
from programs import (
    EXAMPLES,
    PDB_STOPS_ON_BREAKPOINT,
    Program,
    start_broker,
    stop_broker,
    stop_line,
    stop_text,
    wait_for_sessions,
)
from shell_driver import ShellDriver

from monarch_pdb.ranks import parse_ranks

pytestmark = pytest.mark.each_python

EXAMPLE = EXAMPLES / "debugging.py"
BREAK_LINES = {0: 11, 1: 15, 2: 19, 3: 23}


@pytest.fixture
def shell(env):
    driver = ShellDriver(env)
    driver.wait_prompt()
    yield driver
    driver.kill()


def table_rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and "Actor Name" not in line
    ]


@pytest.mark.timeout(90)
def test_banner_list_attach_step_detach_replay(example, shell):
    assert "************************ MONARCH DEBUGGER ************************" in shell.text
    assert "Enter 'list' to show all active breakpoints." in shell.text
    assert shell.prompt == "monarch_dbg>"

    rows = table_rows(shell.command("list"))
    assert len(rows) == 16
    for rank, row in enumerate(rows):
        actor, rank_text, coords, host, function, line = row
        assert (actor, int(rank_text)) == ("debugee", rank)
        assert coords == f"{{'host': {rank // 4}, 'gpu': {rank % 4}}}"
        assert host and function == "debugging._debugee_actor_internal"
        assert int(line) == stop_line(BREAK_LINES[rank % 4])

    out = shell.command("attach debugee 13")
    assert out.splitlines()[0].startswith("Attached to debug session for debugee 13 (")
    assert f"debugging.py({stop_line(15)})_debugee_actor_internal()" in out and stop_text("rank += 2") in out
    assert shell.prompt == "(Pdb)"
    if PDB_STOPS_ON_BREAKPOINT:
        assert "-> rank += 2" in shell.command("n")
    assert shell.command("p rank").strip() == "13"
    assert "-> return rank" in shell.command("n")
    assert shell.command("p rank").strip() == "15"
    listing = shell.command("l")
    assert "breakpoint()  # noqa" in listing and "->" in listing and "[EOF]" not in listing

    out = shell.command("detach")
    assert re.search(
        r"Detaching from debug session for debugee 13 \(.+\)\nDetached from debug session for debugee 13", out
    )
    assert shell.prompt == "monarch_dbg>"

    out = shell.command("attach debugee 13")
    assert "<last pdb output for debugee 13 follows>" in out
    assert "breakpoint()  # noqa" in out, "the replay holds what the rank printed since the last line"

    out = shell.command("c")
    assert "Detaching from debug session for debugee 13" in out and "Detached from debug session" in out
    assert shell.prompt == "monarch_dbg>"
    ranks = [int(r[1]) for r in table_rows(shell.command("list"))]
    assert 13 not in ranks and len(ranks) == 15


@pytest.mark.timeout(90)
def test_bad_input_gets_one_line_and_the_shell_goes_on(example, shell):
    cases = {
        "attach nosuch 1": "Error processing command: No debug sessions for actor nosuch",
        "attach debugee 99": "Error processing command: No debug session for rank 99 for actor debugee",
        "attach debugee": "Error processing command: usage: attach <actor> <rank> [--force] [--full]",
        "attach debugee x": "Error processing command: rank must be a non-negative whole number, not 'x'",
        "frobnicate": "Error processing command: unknown command 'frobnicate'; enter 'help' for the list",
        "detach": "Error processing command: not attached to any rank (attach <actor> <rank> first)",
        "list extra": "Error processing command: usage: list [--all] [--rows]",
        "list --al": "Error processing command: usage: list [--all] [--rows]",
        "stacks debugee ranks(1,,2)": "Error processing command: ranks(1,,2): empty item at position 9",
        "stacks debugee --thread some": "Error processing command: --thread is main or all, not 'some'",
        "stacks nosuch": "Error processing command: No running rank of actor nosuch is known to the broker",
        "interrupt debugee": "Error processing command: usage: interrupt <actor> ranks(<ranks>) [--timeout S]",
        "interrupt debugee ranks(0) --timeout soon": "Error processing command: --timeout needs a positive number of seconds, not 'soon'",
        "mesh nosuch": "Error processing command: No rank of actor nosuch is known to the broker",
        "cast debugee ranks(1,,2) p 1": "Error processing command: ranks(1,,2): empty item at position 9",
        "cast debugee ranks(1)": "Error processing command: cast needs a pdb command after the selector",
        "cast debugee ranks(gpus=1:3) c": "Error processing command: no dimension 'gpus' in debugee (its dimensions: host, gpu)",
        "cast debugee ranks(40:50) p 1": "Error processing command: ranks(40:50) matches no rank of debugee with a session (those are ranks[0-15])",
        "cast debugee": "Error processing command: usage: cast <actor> ranks(<ranks>) <pdb command>",
    }
    for line, expected in cases.items():
        out = shell.command(line)
        assert out.strip() == expected, line
        assert shell.prompt == "monarch_dbg>"
    assert len(table_rows(shell.command("list"))) == 16


@pytest.mark.timeout(60)
def test_a_cast_sends_its_pdb_command_as_typed(example, shell):
    assert shell.command('cast debugee ranks(0) p "a  b"') == "debugee ranks[0] (1)\n'a  b'\n"
    out = shell.command("cast debugee ranks(host=0, gpu=1:3) p 'a  b' +  \"  c\"")
    assert out == "debugee ranks[1,2] (2)\n'a  b  c'\n"


WAITING = (
    r"Waiting for a debug broker at 127\.0\.0\.1:0 \(looked for .*broker-0\.json\)\. Start your program "
    r"\(its first breakpoint starts a broker\) or run `monarch-pdb broker`\. Ctrl-C, Ctrl-D or quit leaves; "
    r"other lines typed meanwhile run once it answers\."
)


@pytest.mark.timeout(60)
def test_a_shell_started_before_any_broker_waits_for_one_and_opens_when_it_answers(env):
    early = dict(env, MONARCH_PDB_CONNECT_TIMEOUT="0.5")
    driver = ShellDriver(early)
    broker = None
    try:
        driver.expect(WAITING)
        driver.child.sendline("list")
        driver.child.sendline("")
        driver.child.sendline("jobs")
        driver.expect_absent("Waiting", 2)  # said once, not again for each line typed
        broker, _ = start_broker(early)
        assert driver.wait_prompt() == "monarch_dbg>"
        ran = driver.text.split("MONARCH DEBUGGER", 1)[1]
        assert "monarch_dbg> list\nNo active breakpoints.\nmonarch_dbg> jobs\nNo job is connected.\n" in ran, (
            "the lines typed meanwhile ran, in order, once the broker answered"
        )
        assert driver.command("list") == "No active breakpoints.\n"
    finally:
        driver.kill()
        if broker is not None:
            stop_broker(broker)


@pytest.mark.timeout(60)
def test_quit_typed_while_waiting_for_a_broker_leaves_at_once_and_is_recorded(env, tmp_path):
    record = tmp_path / "session.transcript"
    driver = ShellDriver(dict(env, MONARCH_PDB_CONNECT_TIMEOUT="0.5"), "--record", str(record))
    try:
        driver.expect(WAITING)
        driver.child.sendline("list")
        driver.child.sendline("quit")
        driver.expect("Quitting debug session...")
        driver.child.expect(pexpect.EOF)
        driver.child.close()
    finally:
        driver.kill()
    assert driver.child.exitstatus == 0
    assert "No active breakpoints" not in driver.text, "quit leaves at once, without the lines before it"
    text = record.read_text()
    assert (
        text.startswith("# monarch-pdb transcript, started ") and "\nquit\n# out: Quitting debug session...\n" in text
    )


def ignore_ctrl_c() -> None:
    """As a script's background job starts its programs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "key, status, preexec_fn",
    [("d", 0, None), ("c", 130, None), ("c", 130, ignore_ctrl_c)],
    ids=["ctrl-d", "ctrl-c", "ctrl-c-started-ignoring-it"],
)
def test_a_shell_waiting_for_a_broker_quits_on_ctrl_d_and_ctrl_c(env, key, status, preexec_fn):
    driver = ShellDriver(dict(env, MONARCH_PDB_CONNECT_TIMEOUT="0.5"), preexec_fn=preexec_fn)
    driver.expect(WAITING)
    driver.child.sendcontrol(key)
    driver.child.expect(pexpect.EOF)
    driver.child.close()
    assert driver.child.exitstatus == status and "Traceback" not in driver.text + driver.child.before


@pytest.mark.timeout(120)
def test_the_guides_walkthrough(env, broker, shell):
    program = Program(env, EXAMPLE)
    try:
        wait_for_sessions(env, 16)
        announced = []
        while len(set(announced)) < 16:
            line = shell.expect(r"debugee (?:ranks\[([0-9,-]+)\] \(\d+\)|(\d+)) stopped at debugging\.py:[0-9,]+\n")
            announced += parse_ranks(line.group(1) or line.group(2))
        assert sorted(announced) == list(range(16)), "each rank is announced once"

        if PDB_STOPS_ON_BREAKPOINT:
            shell.command("cast debugee ranks(:) n")
        out = shell.command("cast debugee ranks(0,1) n")
        assert "debugee ranks[0] (1)\n> " in out and "debugee ranks[1] (1)\n> " in out
        assert out.count("-> return rank") == 2

        out = shell.command("cast debugee ranks(2:7:2) s")
        assert "debugee ranks[2,6] (2)\n" in out and "-> _bad_rank()" in out
        assert "debugee ranks[4] (1)\n" in out

        out = shell.command("cast debugee ranks(host=2:4, gpu=1:3) c")
        assert "debugee ranks[9,13] (2)\n(its endpoint returned)" in out
        assert re.search(r"debugee ranks\[10,14\] \(2\)\n> .*debugging\.py\(5\)_bad_rank\(\)", out)

        out = shell.command("continue")  # events heard before it come first; those it brings may follow
        assert "Continued 14 ranks: debugee ranks[0-8,10-12,14,15]" in out.splitlines()
        rows = wait_for_sessions(env, 2, state="post-mortem")
        assert sorted(int(r.rank) for r in rows) == [2, 6]
        assert {r.function for r in rows} == {"debugging._bad_rank"}
        post_mortem = r"debugee ranks\[[0-9,-]+\] \(\d+\) entered post-mortem at debugging\.py:5: ValueError: bad rank"
        if not re.search(post_mortem, out):
            shell.expect(post_mortem)

        shell.command("attach debugee 2")
        trace = shell.command("bt")
        assert "to_debug()" in trace and trace.rstrip().endswith('-> raise ValueError("bad rank")')
        assert "monarch_pdb" not in trace, "the runtime's own frames stay out of the user's stack"
        shell.command("detach")

        assert shell.command("continue").strip() == "Continued 2 ranks: debugee ranks[2,6]"
        code, output = program.finish()
        assert code != 0
        assert "4 of 16 ranks of debugee.to_debug raised: ranks 2,6,10,14: ValueError: bad rank" in output
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_cast_grouped_raw_and_a_rank_that_does_not_answer(example, shell):
    out = shell.command("cast debugee ranks(:) p rank % 2")
    assert out == (
        "debugee ranks[0,2,4,6,8,10,12,14] (8)\n0\ndebugee ranks[1,3,5,7,9,11,13,15] (8)\n1\n"
        "numbers: count 16, min 0 (rank 0), max 1 (rank 1), mean 0.5, NaN/Inf 0, beyond 3 sd 0\n"
    )
    shell.command("set cast_output raw")
    assert shell.command("cast debugee ranks(host=1) p rank") == "[4] 4\n[5] 5\n[6] 6\n[7] 7\n"
    shell.command("set cast_output grouped")

    shell.command("set cast_timeout 1")
    shell.command("cast debugee ranks(3) !import threading; threading.Event().wait(60)", timeout=10)
    out = shell.command("cast debugee ranks(0:4) p 'here'", timeout=10)
    assert "debugee ranks[0-2] (3)\n'here'\n" in out
    assert "no answer from debugee ranks[3] (1): running" in out
    shell.command("set cast_timeout 3")
    start = len(shell.text)
    out = shell.command("cast debugee ranks(3,7) !import threading; threading.Event().wait(60)", timeout=15)
    assert "answered 0/2" in shell.text[start:], "progress shows while a cast waits"
    assert out.endswith(
        "no answer from debugee ranks[3] (1): running\nno answer from debugee ranks[7] (1): still running\n"
    )


@pytest.mark.timeout(90)
def test_completion_and_history_at_both_prompts(example, shell):
    shell.child.send("att\t")
    shell.expect("ach")
    shell.child.send("deb\t")
    shell.expect("ugee")
    out = shell.command(" 3", shown="attach debugee  3")
    assert "Attached to debug session for debugee 3" in out
    assert shell.command("p rank").strip() == "3"
    assert shell.command("\x1b[A", shown="p rank").strip() == "3", "up-arrow recalls the last pdb line"
    shell.command("detach")
    out = shell.command("\x1b[A\x1b[A\x1b[A", shown="attach debugee  3")
    assert out.startswith("Attached to debug session for debugee 3")


@pytest.mark.timeout(90)
def test_follow_shows_what_another_shell_makes_ranks_print(env, example, shell):
    assert (
        shell.command("follow debugee ranks(host=0, gpu=(1,2))").strip()
        == "Following debugee ranks[1,2] (2); 'follow off' stops."
    )
    other = ShellDriver(env)
    try:
        other.wait_prompt()
        other.command("cast debugee ranks(0:4) p rank * 7")
        shell.expect(r"(?s)(?=.*\[debugee 1\] 7\n).*\[debugee 2\] 14\n|(?=.*\[debugee 2\] 14\n).*\[debugee 1\] 7\n")
        assert "[debugee 0]" not in shell.text and "[debugee 3]" not in shell.text
        assert shell.command("follow off").strip() == "Not following any rank."
        assert shell.command("follow nosuch").strip() == "Error processing command: No debug sessions for actor nosuch"
    finally:
        other.kill()
