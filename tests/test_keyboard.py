"""What a person does with the keys, at both prompts of the real shell in a pseudo-terminal:
history, completion, Ctrl-C, Ctrl-D, pasting, colours."""

from __future__ import annotations

import json
import lzma
import os
import re
import signal
import subprocess
import sys
import threading

import pexpect
import pytest
from programs import PDB_STOPS_ON_BREAKPOINT
from shell_driver import ShellDriver, plain

pytestmark = pytest.mark.each_python

UP = "\x1b[A"
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
MONARCH = os.path.join(os.path.dirname(sys.executable), "monarch")
FOLLOWED = re.compile(r"^\[debugee 0\] 0\n", re.M)


@pytest.mark.timeout(90)
def test_each_prompt_recalls_its_own_lines_and_keeps_them_across_runs(example, env, tmp_path):
    with_history = dict(env, MONARCH_PDB_HISTORY=str(tmp_path / "history"))
    first = ShellDriver(with_history)
    try:
        first.wait_prompt()
        first.command("attach debugee 3")
        assert first.command("p rank").strip() == "3"
        assert first.command("p rank * 2").strip() == "6"
        first.command("detach")
        out = first.command(UP, shown="attach debugee 3")
        assert out.startswith("Attached to debug session for debugee 3"), "the top prompt recalls no pdb line"
        assert first.command(UP + UP, shown="p rank * 2").strip() == "6", "the pdb prompt recalls no command"
        first.command("detach")
        assert "Quitting debug session..." in first.command_until_exit("quit")
    finally:
        first.kill()

    second = ShellDriver(with_history)
    try:
        second.wait_prompt()
        out = second.command(UP + UP, shown="attach debugee 3")
        assert out.startswith("Attached to debug session for debugee 3"), "the last run's commands are recalled"
        assert second.command(UP + UP, shown="p rank * 2").strip() == "6"
    finally:
        second.kill()


@pytest.mark.timeout(90)
def test_tab_completes_commands_actors_and_paused_ranks(example, shell):
    sh = shell()
    sh.child.send("att\t")
    sh.expect("ach ")
    sh.child.send("deb\t")
    sh.expect("ugee ")
    sh.child.send("1\t\t")
    sh.expect(r"1\s+10\s+11\s+12\s+13\s+14\s+15\s")
    out = sh.command("3", shown="attach debugee 13")
    assert out.startswith("Attached to debug session for debugee 13")
    sh.child.send("whe\t")
    sh.expect("where")
    assert "_debugee_actor_internal()" in sh.command("", shown="where")


@pytest.mark.timeout(90)
def test_ctrl_c_stops_waiting_and_ctrl_d_leaves_each_prompt(example, shell):
    sh = shell()
    sh.command("set cast_timeout 30")
    sh.child.send("cast debugee ranks(3) !import threading; threading.Event().wait(60)\r")
    sh.expect("answered 0/1")
    sh.child.sendintr()
    sh.expect(
        r"Error processing command: stopped waiting \(Ctrl-C\); the ranks carry on with "
        r"'!import threading; threading.Event\(\).wait\(60\)'"
    )
    assert sh.wait_prompt() == "monarch_dbg>"
    assert "| debugee | 3 " not in sh.command("list"), "rank 3 still runs the cast's line"

    sh.command("attach debugee 5")
    sh.child.send("!import threading; threading.Event().wait(60)\r")
    sh.expect(r"\(debugee 5 \(.+\) is running; type 'detach' to leave it running\)")
    sh.child.sendintr()
    sh.expect("Detached from debug session for debugee 5")
    assert sh.wait_prompt() == "monarch_dbg>"

    sh.command("attach debugee 0")
    sh.child.sendeof()
    sh.expect("Detached from debug session for debugee 0")
    assert sh.wait_prompt() == "monarch_dbg>"
    sh.child.sendeof()
    sh.expect("Quitting debug session...")
    sh.child.expect(pexpect.EOF)
    sh.child.close()
    assert sh.child.exitstatus == 0


def interrupted_line(sh: ShellDriver, prompt: str) -> str:
    """Type part of a line, press Ctrl-C, and return what the shell drew up to its next prompt."""
    sh.child.send("p ra")
    sh.expect("p ra")
    start = len(sh.raw)
    sh.child.sendintr()
    sh.expect(re.escape(prompt))
    return plain(sh.raw[start:])


@pytest.mark.timeout(90)
def test_ctrl_c_at_an_idle_prompt_drops_the_line_for_a_fresh_prompt_below_it(example, shell):
    sh = shell()
    sh.command("attach debugee 3")
    assert sh.command("p rank").strip() == "3"
    assert interrupted_line(sh, "(Pdb) ") == "\n(Pdb) ", "nothing drawn over the prompt, and no line sent to pdb"
    assert sh.command("p rank * 2").strip() == "6"
    sh.command("detach")
    assert interrupted_line(sh, "monarch_dbg> ") == "\nmonarch_dbg> "
    assert sh.command("jobs").startswith("+")


CURSOR_MOVES = "\x01\x05" * 1000
"""Ctrl-A, Ctrl-E: keys that leave the line as it is, enough of them to keep readline reading
keys for a while, as a busy machine keeps it behind the keys typed."""


@pytest.mark.timeout(120)
def test_ctrl_c_while_keys_are_still_being_read_drops_the_line_at_once_for_a_fresh_prompt(example, shell):
    """Ctrl-C that comes while readline still reads the keys typed before it (those not read yet
    are thrown away): the half-typed line is dropped at once, not when the next line is accepted
    in its place, and the next line runs by itself."""
    sh = shell()
    for _ in range(10):
        sh.seen = len(sh.text)
        sh.child.send("lis" + CURSOR_MOVES)
        sh.child.sendintr()
        sh.expect(r"\nmonarch_dbg> \Z")
        out = sh.command("list")
        assert out.startswith("+---"), f"'list' typed after Ctrl-C printed {out!r}"
    assert "lilist" not in sh.text and "lislist" not in sh.text
    assert sh.command("lilist") == "Error processing command: unknown command 'lilist'; enter 'help' for the list\n"


@pytest.mark.timeout(90)
def test_a_pasted_block_runs_each_of_its_lines_in_turn(example, shell):
    sh = shell()
    sh.command("attach debugee 2")
    sh.child.send(f"{PASTE_START}p rank\np rank * 10\nn\np rank\n{PASTE_END}\r")
    after_n, rank_after = (r"rank \+= 3", 2) if PDB_STOPS_ON_BREAKPOINT else (r"_bad_rank\(\)", 5)
    sh.expect(rf"(?s)\n2\n20\n> .*-> {after_n}\n{rank_after}\n")
    assert sh.wait_prompt() == "(Pdb)"
    pasted = "".join(f"p {n}\n" for n in range(1500))
    sh.child.send(f"{PASTE_START}{pasted}p 'end of paste'\n{PASTE_END}\r")
    sh.expect(r"\n1499\n'end of paste'\n", timeout=60)
    assert sh.wait_prompt() == "(Pdb)", "a paste longer than Python's recursion limit runs whole"
    sh.command("detach")
    sh.child.send(f"{PASTE_START}list\njobs\n{PASTE_END}\r")
    sh.expect(r"(?s)\| debugee +\| 15 .*\| debugging-\d+ +\| 16 ")
    assert sh.wait_prompt() == "monarch_dbg>"


@pytest.mark.timeout(60)
def test_errors_are_red_on_a_terminal_and_plain_without_one(example, env, shell):
    sh = shell()
    sh.command("frobnicate")
    assert "\x1b[91mError processing command: unknown command 'frobnicate'" in sh.raw
    piped = subprocess.run(
        [MONARCH, "debug", "-c", "frobnicate"],
        env=dict(env, MONARCH_PDB_HISTORY=""),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert piped.returncode == 1
    assert "\x1b" not in piped.stdout + piped.stderr
    assert piped.stderr == "monarch-pdb: -c:1: frobnicate: unknown command 'frobnicate'; enter 'help' for the list\n"


@pytest.mark.timeout(60)
def test_a_history_file_of_an_older_release_is_replaced_not_fatal(env, broker, tmp_path):
    history = tmp_path / "history"
    history.write_bytes(lzma.compress(json.dumps({"history_version": "4.0.0", "history_items": []}).encode()))
    with_history = dict(env, MONARCH_PDB_HISTORY=str(history))
    first = ShellDriver(with_history)
    try:
        first.wait_prompt()
        assert "Unsupported history file version: 4.0.0" in first.text
        assert "The history file will be recreated when this application exits." in first.text
        first.command("jobs")
        first.command_until_exit("quit")
    finally:
        first.kill()
    second = ShellDriver(with_history)
    try:
        second.wait_prompt()
        assert "history" not in second.text
        assert second.command(UP + UP, shown="jobs").strip() == "No job is connected."
    finally:
        second.kill()


def hangup_waits() -> None:
    """In the shell: a SIGHUP waits, as one does on a busy machine when the kernel wakes the
    shell's read with the end of input first."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})


@pytest.mark.timeout(150)
@pytest.mark.parametrize("first_news", ["SIGHUP", "end of input"])
def test_pdb_lines_are_kept_when_the_terminal_closes_while_attached(example, env, tmp_path, first_news):
    with_history = dict(env, MONARCH_PDB_HISTORY=str(tmp_path / "history"))
    first = ShellDriver(with_history, preexec_fn=hangup_waits if first_news == "end of input" else None)
    try:
        first.wait_prompt()
        first.command("attach debugee 6")
        assert first.command("p rank * 7").strip() == "42"
        assert first.close_terminal(timeout=60) == 128 + signal.SIGHUP
    finally:
        first.kill()
    second = ShellDriver(with_history)
    try:
        second.wait_prompt()
        second.command("attach debugee 6")
        assert second.command(UP, shown="p rank * 7").strip() == "42"
    finally:
        second.kill()


@pytest.mark.timeout(120)
def test_lines_that_come_as_keys_are_typed_go_above_the_prompt_and_never_redraw_it_below(example, env, shell):
    """A followed rank prints about as often as lines are typed and completed; each line goes
    above the prompt, whole and once, however it meets the Enter key or a Tab."""
    sh = shell()
    sh.command("follow debugee ranks(0)")
    sh.command("set list_rows 5")
    other = ShellDriver(env)
    casts = 0
    typing = threading.Event()

    def cast_until_typing_ends() -> None:
        nonlocal casts
        other.wait_prompt()
        while not typing.is_set():
            other.command("cast debugee ranks(0) p rank")
            casts += 1
        other.command("cast debugee ranks(0) p 'last'")

    caster = threading.Thread(target=cast_until_typing_ends)
    caster.start()
    try:
        for n in range(200):
            line, shown = ("set list_r\t5", "set list_rows 5") if n % 10 == 0 else ("set list_rows 5", None)
            out = sh.command(line, shown=shown)
            assert FOLLOWED.sub("", out) == "list_rows - was: 5\nnow: 5\n", f"line {n} printed {out!r}"
    finally:
        typing.set()
        caster.join(timeout=60)
        other.kill()
    sh.expect(r"\[debugee 0\] 'last'\n")
    assert casts > 20 and sh.text.count("[debugee 0] 0\n") == casts, "every line once"


@pytest.mark.timeout(90)
def test_lines_typed_ahead_at_pdb_each_run_in_order_once_the_rank_is_at_its_prompt(example, shell):
    sh = shell()
    sh.command("attach debugee 3")
    sh.child.send("p 101\rp 202\rp 303\r")
    sh.expect(r"\n101\n\(Pdb\) p 202\n202\n\(Pdb\) p 303\n303\n")
    assert sh.wait_prompt() == "(Pdb)"
    assert "is running" not in sh.text, "a rank that answers at once is not said to run"

    sh.command("detach")
    sh.command("attach debugee 0")
    sh.child.send("b 12\rc\rp rank * 100\r")
    sh.expect(r"\(Pdb\) p rank \* 100\n100\n")
    assert sh.wait_prompt() == "(Pdb)", "a line after c waits for the rank's next stop"
    sh.child.send("c\rp 'lost'\rdetach\rjobs\r")
    sh.expect(r"not sent: \"p 'lost'\" was typed for debugee 0 \(.+\), whose session ended")
    sh.expect(r"monarch_dbg> jobs\n(debugee 0 finished\n)?\+")  # the event heard before jobs comes first
    prompt = sh.wait_prompt()
    assert prompt == "monarch_dbg>", sh.text[-1500:]
    assert "not attached" not in sh.text and "unknown command" not in sh.text, "the detach met its session's end"

    sh.command("attach debugee 4")
    sh.child.send(f"{PASTE_START}p 404\nc\np 'lost too'\ndetach\njobs\n{PASTE_END}\r")
    sh.expect(r"\n404\n")
    sh.expect(r"not sent: \"p 'lost too'\" was typed for debugee 4 \(.+\), whose session ended")
    sh.expect(r"\| debugging-\d+ +\| 16 ")
    prompt = sh.wait_prompt()
    assert prompt == "monarch_dbg>", sh.text[-1500:]
    assert "not attached" not in sh.text and "unknown command" not in sh.text


@pytest.mark.timeout(90)
def test_ctrl_z_then_fg_draws_the_prompt_and_the_half_typed_line_again(example, env):
    """In a job-control shell, as a user runs it: Ctrl-Z stops the shell, `fg` brings it back
    to where it was, the line half typed at `(Pdb)` still there to finish."""
    sh = ShellDriver(dict(env, PS1="job$ "), command=["bash", "--norc", "--noprofile", "-i"])
    try:
        sh.expect(r"job\$ ")
        sh.child.sendline(f"{MONARCH} debug")
        sh.wait_prompt()
        sh.command("attach debugee 3")
        sh.child.send("p ra")
        sh.expect("p ra")
        sh.child.send("\x1a")
        sh.expect(r"Stopped.*\njob\$ ")
        sh.child.sendline("fg")
        sh.expect(r"\n\(Pdb\) p ra$")
        assert sh.command("nk * 2", shown="p rank * 2").strip() == "6", "the keys after fg go to the same line"
        sh.command("detach")
        sh.child.sendline("quit")
        sh.expect(r"Quitting debug session\.\.\.\n.*job\$ ")
        sh.child.sendline("exit")
        sh.child.expect(pexpect.EOF)
    finally:
        sh.kill()


@pytest.mark.timeout(90)
def test_lines_typed_while_the_rank_runs_wait_for_its_prompt_or_are_named_when_ctrl_c_leaves_it(
    example, shell, tmp_path
):
    sh = shell()
    sh.command("attach debugee 5")
    go = tmp_path / "go"
    wait_for_go = (
        f"![__import__('time').sleep(0.02) for _ in iter(lambda: __import__('os').path.exists({str(go)!r}), True)]"
    )
    sh.child.send(wait_for_go + "\r")
    sh.expect(r"\(debugee 5 \(.+\) is running; type 'detach' to leave it running\)")
    sh.child.send("p 505\r")
    sh.expect(r"\(debugee 5 \(.+\) is running; 1 line typed waits for its prompt; Ctrl-C leaves it running\)")
    sh.child.send("p 606\r")
    sh.expect(r"\(debugee 5 \(.+\) is running; 2 lines typed wait for its prompt; Ctrl-C leaves it running\)")
    go.touch()
    sh.expect(r"\(Pdb\) p 505\n505\n\(Pdb\) p 606\n606\n")
    assert sh.wait_prompt() == "(Pdb)"

    go.unlink()
    sh.child.send(wait_for_go + "\r")
    sh.expect(r"is running; type 'detach' to leave it running\)")
    sh.child.send("p 707\r")
    sh.expect(r"1 line typed waits for its prompt")
    sh.child.sendintr()
    sh.expect(
        r"Detached from debug session for debugee 5 .*\n\(Pdb\) p 707\nError processing command: not sent: "
        r"'p 707' was typed for debugee 5 \(.+\), which you left running \(Ctrl-C\)\n"
    )
    assert sh.wait_prompt() == "monarch_dbg>"
    go.touch()
