"""What no other editor has, through the real adapter: the Ranks view's groups and merged
stacks, the shell's `!cast`/`!peek`/`!stacks` in the Debug Console, `stopAll`, and `launch`."""

from __future__ import annotations

import signal
import sys
import time

import pytest
from conftest import MARKER, processes_with_marker
from dap_client import DapClient
from programs import EXAMPLES, stop_line
from test_dap import BREAK_LINES, EXAMPLE, loops, threads_by_rank  # noqa: F401 (loops: the fixture)

from monarch_pdb import wire
from monarch_pdb.client.commands import answers


@pytest.fixture
def editor(env):
    client = DapClient(env)
    yield client
    client.close()


@pytest.mark.timeout(120)
def test_the_ranks_view_groups_ranks_as_list_does_and_a_group_continues_at_once(example, editor):
    editor.attach()
    editor.take_events("stopped", 16, reason="entry")
    by_rank = threads_by_rank(editor)
    view = editor.request("monarchRanks", stacks=True)
    groups = sorted(view["groups"], key=lambda g: g["line"])
    assert [(g["function"], g["line"], g["ranks"], g["count"], g["state"]) for g in groups] == [
        (
            "debugging._debugee_actor_internal",
            stop_line(BREAK_LINES[rank]),
            f"{rank},{rank + 4},{rank + 8},{rank + 12}",
            4,
            "breakpoint",
        )
        for rank in range(4)
    ]
    assert all(g["attached"] == "editor" and g["hosts"] for g in groups)
    assert [g["threadId"] for g in groups] == [by_rank[rank] for rank in range(4)], "each group's first thread"
    [tree] = view["stacks"]
    assert tree["actor"] == "debugee" and tree["ranks"] == "ranks[0-15] (16)"
    assert sorted(child["ranks"] for child in tree["children"][0]["children"]) != [], "the merged tree has branches"

    editor.request("monarchFocus", threadId=by_rank[1])
    focus = editor.take_events("stopped", threadId=by_rank[1])[0]["body"]
    assert focus["reason"] == "entry" and "preserveFocusHint" not in focus
    editor.request(
        "monarchRanksAct", action="continue", job=groups[0]["job"], actor="debugee", ranks=groups[0]["ranks"]
    )
    exited = editor.take_events("thread", 4, reason="exited")
    assert sorted(e["body"]["threadId"] for e in exited) == sorted(by_rank[r] for r in (0, 4, 8, 12))
    editor.take_events("monarchRanksChanged")
    assert sorted(threads_by_rank(editor)) == [r for r in range(16) if r % 4], "the other groups stay paused"
    assert "not 'jump'" in editor.failure("monarchRanksAct", action="jump", job="", actor="debugee", ranks="1")


@pytest.mark.timeout(120)
def test_cast_peek_and_stacks_in_the_debug_console_answer_as_the_shell_does(example, editor):
    editor.attach()
    editor.take_events("stopped", 16, reason="entry")
    frame = editor.request("stackTrace", threadId=threads_by_rank(editor)[3], levels=1)["stackFrames"][0]

    def console(line: str) -> str:
        return editor.request("evaluate", expression=line, frameId=frame["id"], context="repl")["result"]

    cast = console("!cast ranks(0:8) p rank * 10")
    expected = answers.grouped(
        wire.CastResult(
            ref=0,
            actor="debugee",
            groups=[wire.CastGroup(ranks=[rank], output=f"{rank * 10}\n", outcome="") for rank in range(8)],
            missing=[],
        )
    )
    assert cast == expected.rstrip("\n") and cast.endswith("mean 35, NaN/Inf 0, beyond 3 sd 0")
    assert console("!peek debugee ranks(4,5) rank % 2").splitlines() == [
        "debugee ranks[4] (1)",
        "0",
        "debugee ranks[5] (1)",
        "1",
        "numbers: count 2, min 0 (rank 4), max 1 (rank 5), mean 0.5, NaN/Inf 0, beyond 3 sd 0",
    ]
    assert console("!stacks").startswith("debugee ranks[0-15] (16): 4 distinct stacks")
    assert (
        editor.failure("evaluate", expression="!cast debugee", frameId=frame["id"], context="repl")
        == "usage: !cast <actor> ranks(<ranks>) <pdb command>"
    )
    assert "peek evaluates an expression, not a statement" in editor.failure(
        "evaluate", expression="!peek ranks(1) x = 1", frameId=frame["id"], context="repl"
    )
    assert console("!rank") == "3", "any other ! line is pdb's"


@pytest.mark.timeout(120)
def test_stop_all_interrupts_the_other_running_ranks_when_one_raises(loops, editor, tmp_path):
    program, script = loops()
    editor.attach(stopAll=True)
    editor.request("setExceptionBreakpoints", filters=["uncaught"])
    (tmp_path / "stop-0").touch()
    raised = editor.take_events("stopped", reason="exception")[0]["body"]
    paused = editor.take_events("stopped", reason="pause")[0]["body"]
    by_rank = threads_by_rank(editor)
    assert (raised["threadId"], paused["threadId"]) == (by_rank[0], by_rank[1])
    frame = editor.request("stackTrace", threadId=by_rank[1], levels=1)["stackFrames"][0]
    assert frame["source"]["path"] == str(script), "rank 1 stopped where it ran, in the program's own code"


@pytest.mark.timeout(120)
def test_without_stop_all_the_other_ranks_run_on(loops, editor, tmp_path):
    loops()
    editor.attach()
    editor.request("setExceptionBreakpoints", filters=["uncaught"])
    (tmp_path / "stop-0").touch()
    editor.take_events("stopped", reason="exception")
    by_rank = threads_by_rank(editor)
    assert sorted(by_rank) == [0]
    frame = editor.request("stackTrace", threadId=by_rank[0], levels=1)["stackFrames"][0]

    def round_of_rank_1() -> int:
        answer = editor.request(
            "evaluate", expression="!peek looper ranks(1) round", frameId=frame["id"], context="repl"
        )["result"]
        return int(answer.splitlines()[1])

    first, deadline = round_of_rank_1(), time.monotonic() + 30
    while round_of_rank_1() == first:  # a peek may come before the rank's next round: until a later one does
        assert time.monotonic() < deadline, "rank 1 loops on"
    assert not [e for e in editor.events if e["event"] == "stopped"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["program", "command"])
def test_launch_starts_the_job_with_a_broker_of_its_own_and_stopping_ends_everything(env, editor, tmp_path, how):
    editor.request("initialize", adapterID="monarch-pdb")
    where = (
        {"program": EXAMPLE}
        if how == "program"
        else {"command": [sys.executable, "debugging.py"], "cwd": str(EXAMPLES), "env": {"LAUNCHED_BY": "editor"}}
    )
    editor.request("launch", **where)
    editor.take_events("initialized")
    editor.request("configurationDone")
    editor.take_events("stopped", 16, reason="breakpoint")
    by_rank = threads_by_rank(editor)
    assert sorted(by_rank) == list(range(16))
    frame = editor.request("stackTrace", threadId=by_rank[2], levels=1)["stackFrames"][0]
    assert frame["line"] == stop_line(BREAK_LINES[2])
    if how == "command":
        assert (
            editor.request(
                "evaluate", expression="p __import__('os').environ['LAUNCHED_BY']", frameId=frame["id"], context="repl"
            )["result"]
            == "'editor'"
        )
    marker_processes = [cmd for _, cmd in processes_with_marker(env[MARKER])]
    assert any("monarch_pdb.broker" in cmd for cmd in marker_processes), marker_processes
    editor.request("disconnect")
    assert editor.proc.wait(timeout=60) == 0, editor.stderr()
    assert processes_with_marker(env[MARKER]) == [], "the job, its ranks and its broker ended"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("ending", [signal.SIGTERM, signal.SIGHUP])
def test_an_adapter_ended_by_a_signal_ends_the_job_it_launched(env, editor, ending):
    """The editor's window closed or its process killed: no disconnect comes, only a signal."""
    editor.request("initialize", adapterID="monarch-pdb")
    editor.request("launch", program=EXAMPLE)
    editor.take_events("initialized")
    editor.request("configurationDone")
    editor.take_events("stopped", 16, reason="breakpoint")
    editor.proc.send_signal(ending)
    assert editor.proc.wait(timeout=60) == 0, editor.stderr()
    assert processes_with_marker(env[MARKER]) == [], "the job, its ranks and its broker ended"


@pytest.mark.timeout(120)
def test_a_launch_that_cannot_start_says_why(env, editor, tmp_path):
    editor.request("initialize", adapterID="monarch-pdb")
    assert editor.failure("launch") == 'launch: give either "program" (a Python file) or "command" (a list of words)'
    assert editor.failure("launch", command="torchrun train.py").startswith("launch: command must be a list of words")
    assert (
        editor.failure("launch", program="train.py", cwd=str(tmp_path))
        == f"launch: program train.py is not a file in {tmp_path}"
    )
    assert editor.failure("launch", command=["no-such-command-here"]).startswith(
        "launch: cannot run no-such-command-here: "
    )
    assert [pid for pid, _ in processes_with_marker(env[MARKER]) if pid != editor.proc.pid] == [], (
        "the broker it started ended"
    )
