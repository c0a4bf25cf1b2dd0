"""The shell without a terminal: scripts, -c, exit statuses, JSON documents, transcripts."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import textwrap

import pytest
from programs import (
    DEBUG_SHELL,
    EXAMPLES,
    Program,
    settings_for,
    start_broker,
    stop_broker,
    stop_text,
    wait_for_sessions,
)
from programs import run_debug as shell
from shell_driver import ShellDriver

from monarch_pdb.client.connection import BrokerConnection

SCRIPT = textwrap.dedent("""\
    # what every rank of the job is doing
    wait debugee 16 --timeout 60

    list
    cast debugee ranks(::5) p rank
    cast debugee ranks(host=1, gpu=(0,3)) p rank * 10
""")


@pytest.mark.each_python
@pytest.mark.timeout(120)
def test_a_script_started_before_the_job_waits_for_it_then_casts(env, broker, tmp_path):
    script = tmp_path / "state.monarch"
    script.write_text(SCRIPT)
    run = subprocess.Popen(
        [*DEBUG_SHELL, "--script", str(script)],
        env=dict(env, MONARCH_PDB_HISTORY=""),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    program = Program(env, EXAMPLES / "debugging.py")
    try:
        out, err = run.communicate(timeout=90)
    finally:
        program.stop()
    assert run.returncode == 0, err
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == "16 ranks of debugee stopped"
    assert sum(line.startswith("| debugee ") for line in lines) == 16
    assert out.endswith(
        "debugee ranks[0] (1)\n0\ndebugee ranks[5] (1)\n5\ndebugee ranks[10] (1)\n10\n"
        "debugee ranks[15] (1)\n15\n"
        "numbers: count 4, min 0 (rank 0), max 15 (rank 15), mean 7.5, NaN/Inf 0, beyond 3 sd 0\n"
        "debugee ranks[4] (1)\n40\ndebugee ranks[7] (1)\n70\n"
        "numbers: count 2, min 40 (rank 4), max 70 (rank 7), mean 55, NaN/Inf 0, beyond 3 sd 0\n"
    )
    assert "\x1b" not in out + err and "monarch_dbg>" not in out and "answered" not in out + err


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("commands", "failing", "why"),
    [
        (["list", "cast debugee ranks(1,,2) p 1"], 2, "ranks(1,,2): empty item at position 9"),
        (["cast nosuch ranks(0) p 1"], 1, "No debug sessions for actor nosuch"),
        (["list", "frobnicate"], 2, "unknown command 'frobnicate'; enter 'help' for the list"),
        (["wait debugee 17 --timeout 1"], 1, "waited 1 s: 16 of 17 ranks of debugee stopped"),
        (
            ["set cast_timeout 1", "cast debugee ranks(3) !import threading; threading.Event().wait(60)"],
            2,
            "1 of the selected ranks did not answer",
        ),
        (
            ["set cast_timeout 1", "attach debugee 3", "!import threading; threading.Event().wait(60)"],
            3,
            f"debugee 3 ({socket.gethostname()}) did not come back to its prompt within 1 s (cast_timeout); "
            "the script leaves it as it is",
        ),
    ],
)
def test_the_first_failing_command_ends_the_run_and_is_named_once(env, example, commands, failing, why):
    args = [arg for command in [*commands, "list"] for arg in ("-c", command)]
    done = shell(env, *args)
    assert done.returncode == 1
    assert done.stderr == f"monarch-pdb: -c:{failing}: {commands[failing - 1]}: {why}\n"
    assert done.stdout.count("| debugee ") <= 16, "nothing after the failing command ran"


@pytest.mark.timeout(60)
def test_commands_that_are_blank_or_comments_do_nothing(env, broker, tmp_path):
    script = tmp_path / "comments.monarch"
    script.write_text("# nothing to run yet\n\n")
    for args in (["-c", ""], ["-c", "# a comment"], ["-c", "  "], ["--script", str(script)]):
        done = shell(env, *args)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), args


@pytest.mark.timeout(60)
def test_no_broker_and_no_script_file_are_clear_failures(env, tmp_path):
    done = shell(dict(env, MONARCH_PDB_CONNECT_TIMEOUT="0.5"), "--wait-broker", "1", "-c", "list")
    assert done.returncode == 2
    waited, gave_up = done.stderr.splitlines()
    assert waited.startswith("monarch-pdb: waiting for a debug broker at 127.0.0.1:0 (looked for ")
    assert waited.endswith(" Giving up after 1 s (--wait-broker).")
    assert gave_up.startswith("monarch-pdb: no debug broker answers at 127.0.0.1:0 (looked for ")
    missing = shell(env, "--script", str(tmp_path / "nope.txt"))
    assert missing.returncode == 1
    assert (
        missing.stderr.strip() == f"monarch-pdb: cannot read script {tmp_path / 'nope.txt'}: No such file or directory"
    )


@pytest.mark.timeout(60)
def test_a_script_started_before_its_broker_waits_for_it(env):
    early = dict(env, MONARCH_PDB_CONNECT_TIMEOUT="0.2", MONARCH_PDB_HISTORY="")
    script = subprocess.Popen(
        [*DEBUG_SHELL, "-c", "list"],
        env=early,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert script.stderr.readline().startswith("monarch-pdb: waiting for a debug broker at 127.0.0.1:0")
        broker, _ = start_broker(early)
        try:
            out, err = script.communicate(timeout=30)
        finally:
            stop_broker(broker)
        assert (script.returncode, out, err) == (0, "No active breakpoints.\n", "")
    finally:
        if script.poll() is None:
            script.kill()
            script.communicate()


@pytest.mark.timeout(120)
def test_a_rank_named_in_a_cast_and_absent_is_missing_and_fails_the_script(env, example):
    absent = shell(env, "--json", "-c", "cast debugee ranks(0,16) p rank")
    assert absent.returncode == 1
    assert json.loads(absent.stdout)["missing"] == [{"rank": 16, "reason": "no such rank is known"}]
    assert absent.stderr.splitlines()[-1].endswith("1 of the selected ranks did not answer")
    [row] = [r for r in wait_for_sessions(env, 16) if r.rank == 3]
    os.kill(row.pid, signal.SIGKILL)
    conn = BrokerConnection.open(settings_for(env))
    try:
        conn.wait_for_rows(lambda rows: all(r.rank != 3 for r in rows), timeout=30)
    finally:
        conn.close()
    lost = shell(env, "-c", "cast debugee ranks(0,3) p rank")
    assert lost.returncode == 1
    assert lost.stdout == "debugee ranks[0] (1)\n0\nno answer from debugee ranks[3] (1): lost\n"
    whatever = shell(env, "--json", "-c", "cast debugee ranks(:) p rank", "-c", "cast debugee ranks(2:) p rank")
    assert whatever.returncode == 0, whatever.stderr
    assert [json.loads(line)["missing"] for line in whatever.stdout.splitlines()] == [[], []]


def check(value, shape) -> None:
    """`value` has exactly the keys and types docs/scripts.md's schema gives."""
    if isinstance(shape, dict):
        assert isinstance(value, dict) and set(value) == set(shape), (value, shape)
        for key, sub in shape.items():
            check(value[key], sub)
    elif isinstance(shape, list):
        assert isinstance(value, list)
        for item in value:
            check(item, shape[0])
    else:
        assert isinstance(value, shape) and not (shape is int and isinstance(value, bool)), (value, shape)


LIST_ROW = {
    "job": str,
    "actor": str,
    "rank": int,
    "coords": dict,
    "host": str,
    "pid": int,
    "function": str,
    "file": str,
    "line": int,
    "state": str,
    "instance": str,
    "attached": str,
}
CAST = {
    "actor": str,
    "groups": [{"ranks": [int], "output": str, "outcome": str}],
    "missing": [{"rank": int, "reason": str}],
}
NUMERIC_CAST = dict(
    CAST,
    numbers={
        "count": int,
        "min": {"value": float, "rank": int},
        "max": {"value": float, "rank": int},
        "mean": float,
        "nonfinite": [int],
        "outliers": [int],
        "other": [int],
    },
)


@pytest.mark.each_python
@pytest.mark.timeout(120)
def test_json_documents_follow_the_documented_schema(env, example):
    done = shell(
        env,
        "--json",
        "-c",
        "list",
        "-c",
        "cast debugee ranks(0:4) p rank % 2",
        "-c",
        "jobs",
        "-c",
        "attach debugee 5",
        "-c",
        "p rank",
        "-c",
        "detach",
        "-c",
        "continue",
    )
    assert done.returncode == 0, done.stderr
    docs = [json.loads(line) for line in done.stdout.splitlines()]
    listing, cast, jobs, attached, answer, detached, continued = docs
    check(listing, [LIST_ROW])
    assert [r["rank"] for r in listing] == list(range(16)) and listing[13]["coords"] == {"host": 3, "gpu": 1}
    check(cast, NUMERIC_CAST)
    assert [(g["ranks"], g["output"]) for g in cast["groups"]] == [([0, 2], "0\n"), ([1, 3], "1\n")]
    assert cast["numbers"] == {
        "count": 4,
        "min": {"value": 0.0, "rank": 0},
        "max": {"value": 1.0, "rank": 1},
        "mean": 0.5,
        "nonfinite": [],
        "outliers": [],
        "other": [],
    }
    check(jobs, [{"job": str, "processes": int, "sessions": int, "paused": int, "hosts": [str]}])
    assert attached["attached"]["actor"] == "debugee" and stop_text("rank += 2") in attached["output"]
    assert answer == {"session": attached["attached"], "output": "5\n"}
    assert detached == {"detached": attached["attached"]}
    assert continued["count"] == 16


@pytest.mark.each_python
@pytest.mark.timeout(120)
def test_a_recorded_transcript_replays(env, example, tmp_path):
    record = tmp_path / "session.transcript"
    first = shell(
        env,
        "--record",
        str(record),
        "-c",
        "cast debugee ranks(2:7:2) p rank",
        "-c",
        "attach debugee 9",
        "-c",
        "p rank * 2",
        "-c",
        "detach",
    )
    assert first.returncode == 0, first.stderr
    text = record.read_text()
    assert text.startswith("# monarch-pdb transcript, started ")
    assert "\ncast debugee ranks(2:7:2) p rank\n" in text and "# out: debugee ranks[4] (1)\n" in text
    assert "\np rank * 2\n# out: 18\n" in text
    again = shell(env, "--script", str(record))
    assert again.returncode == 0, again.stderr
    cast_block = "debugee ranks[2] (1)\n2\ndebugee ranks[4] (1)\n4\ndebugee ranks[6] (1)\n6\n"
    assert first.stdout.startswith(cast_block) and again.stdout.startswith(cast_block)
    after_attach = first.stdout.split(stop_text("rank += 2") + "\n", 1)[1]
    assert after_attach.startswith("18\nDetaching from debug session for debugee 9 (")
    assert again.stdout.endswith(after_attach)
    assert "<last pdb output for debugee 9 follows>" in again.stdout, "the rank kept its state between the runs"


@pytest.mark.timeout(120)
def test_wait_any_and_a_script_run_from_inside_the_shell(env, example, tmp_path):
    done = shell(env, "-c", "wait --any 16 --timeout 10", "--json", "-c", "wait --any 3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        '{"stopped": 16, "wait": "--any", "wanted": 16}',
        '{"stopped": 16, "wait": "--any", "wanted": 3}',
    ]
    script = tmp_path / "inner.monarch"
    script.write_text("# from inside\ncast debugee ranks(7) p rank\n")
    driver = ShellDriver(env)
    try:
        driver.wait_prompt()
        assert driver.command(f"@{script}") == "debugee ranks[7] (1)\n7\n"
    finally:
        driver.kill()


@pytest.mark.timeout(60)
def test_a_shell_the_broker_refuses_says_so_in_json_too(env, tmp_path):
    broker, first = start_broker(dict(env, MONARCH_PDB_SECRET="the-right-one"))
    try:
        port = re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", first).group(1)
        wrong = dict(
            env,
            MONARCH_PDB_SECRET="a-wrong-one",
            MONARCH_DEBUG_SERVER_PORT=port,
            MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "elsewhere"),
            MONARCH_PDB_CONNECT_TIMEOUT="3",
        )
        done = shell(wrong, "--json", "-c", "list")
        assert done.returncode == 2
        (line,) = done.stdout.splitlines()
        assert set(json.loads(line)) == {"error"} and "secret" in json.loads(line)["error"]
        plain = shell(wrong, "-c", "list")
        assert plain.returncode == 2 and plain.stdout == ""
        assert plain.stderr.startswith("monarch-pdb: ") and "secret" in plain.stderr
    finally:
        stop_broker(broker)


@pytest.mark.timeout(60)
def test_a_time_limit_that_is_no_positive_finite_number_fails_the_script_in_one_line(env, broker):
    """Every value is checked in-process (test_commands.py); here, what a script prints for one."""
    for value in ("nan",):
        done = shell(env, "-c", f"set cast_timeout {value}")
        assert done.returncode == 1, value
        assert (
            done.stderr
            == f"monarch-pdb: -c:1: set cast_timeout {value}: Error setting cast_timeout: needs a positive number of seconds, not '{value}'\n"
        )
        done = shell(env, "-c", f"wait --any 1 --timeout {value}")
        assert done.returncode == 1, value
        assert (
            done.stderr
            == f"monarch-pdb: -c:1: wait --any 1 --timeout {value}: --timeout needs a positive number of seconds, not '{value}'\n"
        )
    assert shell(env, "-c", "set cast_timeout 2.5", "-c", "set cast_timeout").stdout.count("2.5") >= 1


@pytest.mark.timeout(90)
def test_a_long_command_is_refused_at_once_and_one_under_the_limit_runs(env, example, tmp_path):
    script = tmp_path / "long.monarch"
    script.write_text("list " + "x" * 9_000_000 + "\n")
    done = shell(env, "--script", str(script))
    assert done.returncode == 1
    assert done.stderr == (
        f"monarch-pdb: {script}:1: list {'x' * 195}... (9,000,005 characters): a command of 9,000,005 "
        "characters is over the limit of 65,536; nothing was run (lines typed while attached have no such limit)\n"
    )
    script.write_text(f"cast debugee ranks(0) p len('{'x' * 60_000}')\n")
    done = shell(env, "--script", str(script))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "debugee ranks[0] (1)\n60000\n"


@pytest.mark.timeout(60)
def test_output_piped_into_a_reader_that_stops_early_ends_the_run_quietly(env, broker):
    """`monarch-pdb debug -c ... | head`: the shell stops at the first write nobody reads, as a
    program killed by SIGPIPE does, with no traceback."""
    commands = " ".join(["-c jobs"] * 2000)
    piped = subprocess.run(
        ["bash", "-c", f"{' '.join(DEBUG_SHELL)} {commands} | head -n 2; exit ${{PIPESTATUS[0]}}"],
        env=dict(env, MONARCH_PDB_HISTORY=""),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert piped.stderr == ""
    assert len(piped.stdout.splitlines()) == 2
    assert piped.returncode == 128 + signal.SIGPIPE
