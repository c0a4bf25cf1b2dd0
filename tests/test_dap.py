"""`monarch-pdb dap` as an editor sees it: the guide's program with 16 ranks, a real broker,
and the adapter a subprocess speaking DAP on its stdin and stdout."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from dap_client import DAP, DapClient
from programs import (
    DEBUG_SHELL,
    EXAMPLES,
    BrokerLog,
    Program,
    debug,
    start_broker,
    stop_broker,
    stop_line,
    wait_for_all_rows,
    wait_for_lines,
    wait_for_sessions,
)
from test_tree import tree  # noqa: F401 (the fixture of a root and its host brokers)

from monarch_pdb import wire

EXAMPLE = str(EXAMPLES / "debugging.py")
BREAK_LINES = {0: 11, 1: 15, 2: 19, 3: 23}
RUNS_ON = Path(__file__).parent / "dap" / "runs_on.py"
"""Two ranks that stop; once continued, rank 1 runs on (the Node.js tests run it too)."""


@pytest.fixture
def editor(env):
    client = DapClient(env)
    yield client
    client.close()


def threads_by_rank(editor: DapClient) -> dict[int, int]:
    """Each thread's rank, read from its name (`debugee 3 · host · host=0, gpu=3`)."""
    return {int(t["name"].split(" · ")[0].split()[1]): t["id"] for t in editor.request("threads")["threads"]}


def plain(breakpoints: list[dict]) -> list[dict]:
    """Breakpoints as shown, without the ids the adapter gives them."""
    return [{key: value for key, value in shown.items() if key != "id"} for shown in breakpoints]


def top_frame(editor: DapClient, thread: int) -> dict:
    return editor.request("stackTrace", threadId=thread, startFrame=0, levels=1)["stackFrames"][0]


@pytest.mark.timeout(120)
def test_every_paused_rank_is_a_thread_named_by_actor_rank_host_and_coords(example, editor):
    capabilities = editor.attach()
    assert capabilities["supportsConfigurationDoneRequest"] and not capabilities["supportsTerminateRequest"]
    assert "supportsDelayedStackTraceLoading" not in capabilities, "a stop's frames are asked and shown at once"
    stops = editor.take_events("stopped", 16, reason="entry")
    assert all(e["body"]["allThreadsStopped"] is False for e in stops)
    assert "preserveFocusHint" not in stops[0]["body"] and all(e["body"]["preserveFocusHint"] for e in stops[1:])
    threads = editor.request("threads")["threads"]
    assert len(threads) == 16
    names = sorted(t["name"] for t in threads)
    assert names[0].startswith("debugee 0 · ") and names[0].endswith(" · host=0, gpu=0")
    assert {e["body"]["threadId"] for e in stops} == {t["id"] for t in threads}


@pytest.mark.timeout(120)
def test_stack_scopes_variables_and_evaluate_on_one_rank(example, editor):
    editor.attach()
    thread = threads_by_rank(editor)[5]
    trace = editor.request("stackTrace", threadId=thread)
    frames = trace["stackFrames"]
    assert trace["totalFrames"] == len(frames)
    assert frames[0]["name"] == "_debugee_actor_internal" and frames[0]["line"] == stop_line(BREAK_LINES[1])
    assert frames[0]["source"]["path"] == EXAMPLE
    assert not any(
        "monarch_pdb" in f["source"].get("path", "") and "/actor/" not in f["source"].get("path", "") for f in frames
    ), "the adapter's and the agent's own frames are never shown"
    assert not any(f["source"].get("path", "").endswith(("pdb.py", "bdb.py")) for f in frames)
    assert {f["source"]["path"] for f in frames} == {EXAMPLE}, "justMyCode: only the program's own frames"
    paged = editor.request("stackTrace", threadId=thread, startFrame=1, levels=1)
    assert [f["name"] for f in paged["stackFrames"]] == [frames[1]["name"]]

    scopes = editor.request("scopes", frameId=frames[0]["id"])["scopes"]
    assert [s["name"] for s in scopes] == ["Locals", "Globals"]
    local = {
        v["name"]: v
        for v in editor.request("variables", variablesReference=scopes[0]["variablesReference"])["variables"]
    }
    assert local["rank"]["value"] == "5" and local["rank"]["type"] == "int"

    caller = editor.request("scopes", frameId=frames[1]["id"])["scopes"][0]
    mine = {
        v["name"]: v for v in editor.request("variables", variablesReference=caller["variablesReference"])["variables"]
    }
    assert mine["self"]["type"] == "DebugeeActor" and mine["rank"]["value"] == "5"
    thing = editor.request(
        "evaluate",
        expression="__import__('types').SimpleNamespace(x=1, y='two')",
        frameId=frames[0]["id"],
        context="watch",
    )
    attributes = editor.request("variables", variablesReference=thing["variablesReference"])["variables"]
    assert [(v["name"], v["value"]) for v in attributes] == [("x", "1"), ("y", "'two'")]

    watch = editor.request("evaluate", expression="rank * 10", frameId=frames[0]["id"], context="watch")
    assert watch["result"] == "50"
    hover = editor.request("evaluate", expression="{'a': [1, 2, 3]}", frameId=frames[0]["id"], context="hover")
    children = editor.request("variables", variablesReference=hover["variablesReference"])["variables"]
    assert [(c["name"], c["value"]) for c in children] == [("'a'", "[1, 2, 3]")]
    page = editor.request("variables", variablesReference=children[0]["variablesReference"], start=1, count=1)
    assert [(v["name"], v["value"]) for v in page["variables"]] == [("1", "2")]
    many = editor.request("evaluate", expression="list(range(100_000))", frameId=frames[0]["id"], context="watch")
    first = editor.request("variables", variablesReference=many["variablesReference"])["variables"]
    assert len(first) == 1000 and first[-1] == {"name": "999", "value": "999", "type": "int", "variablesReference": 0}
    later = editor.request("variables", variablesReference=many["variablesReference"], start=99_998, count=5)
    assert [v["value"] for v in later["variables"]] == ["99998", "99999"]
    assert "NameError" in editor.failure("evaluate", expression="nosuch", frameId=frames[0]["id"], context="watch")
    changed = editor.request(
        "setVariable", variablesReference=scopes[0]["variablesReference"], name="rank", value="rank * 100"
    )
    assert (changed["value"], changed["type"]) == ("500", "int")
    pair = editor.request("evaluate", expression="(1, 2)", frameId=frames[0]["id"], context="watch")
    assert (
        editor.failure("setVariable", variablesReference=pair["variablesReference"], name="0", value="3")
        == "TypeError: a tuple cannot be changed"
    )
    item = editor.request("setVariable", variablesReference=hover["variablesReference"], name="'a'", value="'x'")
    assert item["value"] == "'x'"
    assert (
        editor.request("evaluate", expression="p rank + 1", frameId=frames[0]["id"], context="repl")["result"] == "501"
    )


@pytest.mark.timeout(120)
def test_next_moves_only_that_rank(example, editor):
    editor.attach()
    editor.take_events("stopped", 16, reason="entry")
    by_rank = threads_by_rank(editor)
    before = {rank: top_frame(editor, thread)["line"] for rank, thread in by_rank.items()}
    editor.request("next", threadId=by_rank[4])
    stop = editor.take_events("stopped", reason="step")[0]["body"]
    assert stop["threadId"] == by_rank[4] and "preserveFocusHint" not in stop, "the user's own step shows its new frame"
    after = {rank: top_frame(editor, thread)["line"] for rank, thread in by_rank.items()}
    assert after[4] == before[4] + 1
    assert {r: line for r, line in after.items() if r != 4} == {r: line for r, line in before.items() if r != 4}


@pytest.mark.each_python
@pytest.mark.timeout(120)
def test_a_console_line_keeps_the_frames_shown_unless_it_ran_the_rank(example, editor):
    """As VS Code does after a Debug Console line: scopes, variables and watch again with the
    ids it holds; a line that ran the rank (`n`) is told as a stop of that thread."""
    editor.attach()
    editor.take_events("stopped", 16, reason="entry")
    thread = threads_by_rank(editor)[9]
    frame = top_frame(editor, thread)
    scopes = editor.request("scopes", frameId=frame["id"])["scopes"]
    editor.request("variables", variablesReference=scopes[0]["variablesReference"])
    assert editor.request("evaluate", expression="p rank", frameId=frame["id"], context="repl")["result"] == "9"
    scopes = editor.request("scopes", frameId=frame["id"])["scopes"]
    local = {
        v["name"]: v["value"]
        for v in editor.request("variables", variablesReference=scopes[0]["variablesReference"])["variables"]
    }
    assert local["rank"] == "9"
    assert editor.request("evaluate", expression="rank + 1", frameId=frame["id"], context="watch")["result"] == "10"
    assert editor.request("evaluate", expression="rank", frameId=frame["id"], context="hover")["result"] == "9"
    assert not [e for e in editor.events if e["event"] in ("stopped", "invalidated")]

    editor.request("evaluate", expression="n", frameId=frame["id"], context="repl")
    stop = editor.take_events("stopped", reason="step")[0]["body"]
    assert stop["threadId"] == thread and "preserveFocusHint" not in stop
    assert top_frame(editor, thread)["line"] == frame["line"] + 1


@pytest.mark.timeout(120)
def test_continue_resumes_every_rank_and_the_raising_ones_stop_in_post_mortem(example, editor):
    editor.attach()
    editor.take_events("stopped", 16, reason="entry")
    by_rank = threads_by_rank(editor)
    assert editor.request("continue", threadId=by_rank[0])["allThreadsContinued"] is True
    raising = [rank for rank in by_rank if rank % 4 == 2]
    stops = editor.take_events("stopped", len(raising), reason="exception")
    assert sorted(e["body"]["threadId"] for e in stops) == sorted(by_rank[r] for r in raising)
    exited = editor.take_events("thread", 16 - len(raising), reason="exited")
    assert sorted(e["body"]["threadId"] for e in exited) == sorted(t for r, t in by_rank.items() if r % 4 != 2)
    assert sorted(threads_by_rank(editor)) == raising
    info = editor.request("exceptionInfo", threadId=by_rank[raising[0]])
    assert (info["exceptionId"], info["description"]) == ("ValueError", "bad rank")
    assert "in _bad_rank" in info["details"]["stackTrace"] and info["details"]["stackTrace"].endswith(
        "ValueError: bad rank\n"
    )


def locals_of(editor: DapClient, frame: dict) -> dict[str, str]:
    scope = editor.request("scopes", frameId=frame["id"])["scopes"][0]
    return {
        v["name"]: v["value"]
        for v in editor.request("variables", variablesReference=scope["variablesReference"])["variables"]
    }


@pytest.mark.timeout(120)
def test_each_frame_id_names_one_frame_of_one_ranks_stop_and_is_refused_once_it_ran(example, editor):
    """What VS Code holds across ranks and stops: the ids of two ranks' frames never meet, and
    a rank's ids from before its post-mortem stop are refused, never read as a frame of it now."""
    editor.attach()
    editor.take_events("stopped", 16, reason="entry")
    by_rank = threads_by_rank(editor)
    paused = {rank: editor.request("stackTrace", threadId=by_rank[rank])["stackFrames"] for rank in (2, 6)}
    assert not {f["id"] for f in paused[2]} & {f["id"] for f in paused[6]}
    assert [locals_of(editor, frames[0])["rank"] for frames in paused.values()] == ["2", "6"]
    editor.request("continue", threadId=by_rank[0])
    editor.take_events("stopped", 4, reason="exception")
    # Paged, as an editor asks for more of a long stack.
    top = editor.request("stackTrace", threadId=by_rank[6], startFrame=0, levels=1)["stackFrames"]
    rest = editor.request("stackTrace", threadId=by_rank[6], startFrame=1, levels=19)["stackFrames"]
    raised = top + rest
    assert [(f["name"], f["line"]) for f in raised[:2]] == [("_bad_rank", 5), ("_debugee_actor_internal", 20)]
    assert not {f["id"] for f in raised} & {f["id"] for frames in paused.values() for f in frames}
    assert "rank" not in locals_of(editor, raised[0]) and locals_of(editor, raised[1])["rank"] == "9"
    assert "the rank ran since it was shown" in editor.failure("scopes", frameId=paused[6][0]["id"])


@pytest.mark.timeout(120)
def test_breakpoints_set_in_the_editor_stop_every_rank_that_reaches_them(example, editor):
    editor.attach()
    editor.take_events("stopped", 16, reason="entry")
    by_rank = threads_by_rank(editor)
    lines = [
        {"line": 12},
        {"line": 16, "condition": "rank > 10"},
        {"line": 20},
        {"line": 24},
        {"line": 3},
        {"line": 24, "condition": "rank >"},
        {"line": 24, "logMessage": "at {rank}"},
    ]
    shown = editor.request("setBreakpoints", source={"path": EXAMPLE}, breakpoints=lines)["breakpoints"]
    assert [b["verified"] for b in shown] == [True, True, True, True, False, False, True]
    assert "holds no code" in shown[4]["message"] and "not a Python expression" in shown[5]["message"]
    editor.request("continue", threadId=by_rank[0])
    stopping = [rank for rank in range(16) if rank % 4 != 1 or rank > 8]
    stops = editor.take_events("stopped", len(stopping), reason="breakpoint")
    assert sorted(e["body"]["threadId"] for e in stops) == sorted(by_rank[r] for r in stopping)
    editor.take_events("thread", 2, reason="exited")
    for rank in stopping:
        assert top_frame(editor, by_rank[rank])["line"] == {0: 12, 1: 16, 2: 20, 3: 24}[rank % 4]
    editor.request("continue", threadId=by_rank[0])
    editor.take_events("stopped", 4, reason="exception")


@pytest.mark.timeout(120)
def test_disconnect_leaves_the_ranks_paused_for_the_shell(env, example, editor):
    editor.attach()
    editor.request("disconnect")
    assert editor.proc.wait(timeout=30) == 0, editor.stderr()
    assert len(wait_for_sessions(env, 16)) == 16


@pytest.mark.timeout(120)
def test_pause_stops_a_running_rank(env, editor):
    program = Program(env, RUNS_ON)
    try:
        wait_for_sessions(env, 2)
        editor.attach()
        by_rank = threads_by_rank(editor)
        editor.request("continue", threadId=by_rank[0])
        editor.take_events("thread", reason="exited", threadId=by_rank[0])
        editor.request("pause", threadId=by_rank[1])
        stop = editor.take_events("stopped", reason="pause")[0]["body"]
        assert stop["threadId"] == by_rank[1]
        assert top_frame(editor, by_rank[1])["name"] == "work"
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_bad_requests_and_malformed_input_get_an_error_and_the_adapter_goes_on(example, editor):
    editor.attach()
    assert (
        editor.failure("launch", program="x.py")
        == "launch: this session is attached already; launch in a debug session of its own"
    )
    assert editor.failure("restart") == "monarch-pdb does not support the request 'restart'"
    assert "never ends a job" in editor.failure("terminate")
    assert "no thread 999" in editor.failure("stackTrace", threadId=999)
    assert "threadId" in editor.failure("next", threadId="one")
    assert "no frame 12345" in editor.failure("scopes", frameId=12345)
    assert editor.failure("stackTrace", threadId=1, startFrame="x").startswith("stackTrace: bad arguments (ValueError")
    assert editor.failure("setBreakpoints", source="x.py").startswith("setBreakpoints: bad arguments (")
    assert (
        editor.failure("setBreakpoints", source={"path": EXAMPLE}, breakpoints=[{"column": 1}])
        == "setBreakpoints: bad arguments (KeyError: 'line')"
    )
    editor.write(b"Content-Length: 5\r\n\r\nnot j")
    editor.write(b"Content-Length: 2\r\n\r\n[]")
    editor.write(b"Nonsense\r\n\r\n")
    for text in ("a body that is not JSON", "a body that is not a JSON object", "a header line without ':'"):
        output = editor.take_events("output", category="stderr")[0]["body"]["output"]
        assert text in output and output.count("\n") == 1
    assert len(editor.request("threads")["threads"]) == 16


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
def test_listen_serves_an_editor_over_tcp_one_after_another(env, example, host):
    server = subprocess.Popen([*DAP, "--listen", f"{host}:0"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        assert line.startswith(f"monarch-pdb dap: listening on {host}:"), line
        port = int(line.rsplit(":", 1)[1])
        for _ in range(2):
            with socket.create_connection((host.strip("[]"), port), timeout=30) as sock:
                editor = DapClient(env, streams=(sock.makefile("rb"), sock.makefile("wb")))
                editor.attach()
                assert len(editor.request("threads")["threads"]) == 16
                editor.request("disconnect")
                with editor.arrived:  # the adapter ends the connection, and is free for the next
                    assert editor.arrived.wait_for(lambda: editor.ended, 10), "the connection stayed open"
                editor.close()
    finally:
        server.kill()
        server.wait()
        server.stderr.close()


@pytest.mark.timeout(30)
def test_listen_beyond_loopback_needs_a_secret(env):
    done = subprocess.run([*DAP, "--listen", "0.0.0.0:0"], env=env, capture_output=True, text=True, timeout=20)
    assert done.returncode != 0
    assert done.stderr.strip() == (
        "monarch-pdb dap: listening on 0.0.0.0, which is not loopback, needs a secret "
        "(MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE)"
    )


@pytest.mark.timeout(60)
def test_a_bad_attach_says_why_and_the_adapter_takes_another(env, editor):
    editor.request("initialize", adapterID="monarch-pdb")
    assert editor.failure("threads") == "threads: attach to a broker first"
    assert editor.failure("attach", port="27000") == "attach: port must be a port number, not '27000'"
    assert editor.failure("attach", ranks="debugee ranks(1:").startswith("ranks: ")
    assert editor.failure("attach").startswith("attach: no debug broker answers at 127.0.0.1:")
    assert editor.failure("evaluate", expression="1", context="watch") == "evaluate: attach to a broker first"


@pytest.mark.timeout(120)
def test_past_the_thread_limit_the_console_says_how_many_more_and_how_to_see_them(env, example):
    editor = DapClient(dict(env, MONARCH_PDB_DAP_THREADS="4"))
    try:
        editor.attach()
        assert sorted(threads_by_rank(editor)) == [0, 1, 2, 3]
        told = editor.take_events("output", category="console")[0]["body"]["output"]
        assert told == (
            "monarch-pdb: 16 ranks are paused; the editor shows 4 of them as threads "
            '(MONARCH_PDB_DAP_THREADS). To see others, attach with "ranks" such as '
            '"debugee ranks(4:8)", or use the shell.\n'
        )
        assert not [e for e in editor.events if e["event"] == "output"], "told once"
    finally:
        editor.close()


@pytest.mark.timeout(120)
def test_path_mappings_show_the_editors_copy_and_set_breakpoints_in_the_ranks_own(example, editor, tmp_path):
    mine = tmp_path / "checkout"
    editor.attach(pathMappings=[{"localRoot": str(mine), "remoteRoot": str(EXAMPLES)}])
    editor.take_events("stopped", 16, reason="entry")
    by_rank = threads_by_rank(editor)
    assert top_frame(editor, by_rank[3])["source"]["path"] == str(mine / "debugging.py")
    shown = editor.request("setBreakpoints", source={"path": str(mine / "debugging.py")}, breakpoints=[{"line": 24}])
    assert shown["breakpoints"][0]["verified"]
    editor.request("continue", threadId=by_rank[3])
    stops = editor.take_events("stopped", 4, reason="breakpoint")
    assert sorted(e["body"]["threadId"] for e in stops) == sorted(by_rank[r] for r in (3, 7, 11, 15))
    assert "pathMappings" in editor.failure("attach", pathMappings=[{"localRoot": 1}])


@pytest.mark.timeout(120)
def test_without_just_my_code_the_stack_holds_the_runtime_frames_but_never_the_debuggers(example, editor):
    editor.attach(justMyCode=False)
    frames = editor.request("stackTrace", threadId=threads_by_rank(editor)[2])["stackFrames"]
    paths = [f["source"].get("path", f["source"]["name"]) for f in frames]
    assert paths[0] == EXAMPLE and len(paths) > 3 and any("asyncio" in p or "/actor/" in p for p in paths)
    assert not any(p.endswith(("pdb.py", "bdb.py", "debugger.py", "inspection.py")) for p in paths)
    scopes = editor.request("scopes", frameId=frames[-1]["id"])["scopes"]
    assert editor.request("variables", variablesReference=scopes[1]["variablesReference"])["variables"]
    assert "justMyCode" in editor.failure("attach", justMyCode="yes")


GENERATED_SOURCE = "def generated(rank):\n    total = rank * 7\n    breakpoint()\n    return total\n"
GENERATED = textwrap.dedent(f"""
    import linecache

    import monarch_pdb

    SOURCE = {GENERATED_SOURCE!r}
    # As code generators do (attrs, dataclasses): the text where pdb and tracebacks look for it.
    linecache.cache["<generated>"] = (len(SOURCE), None, SOURCE.splitlines(True), "<generated>")
    namespace = {{}}
    exec(compile(SOURCE, "<generated>", "exec"), namespace)
    monarch_pdb.install()
    with monarch_pdb.endpoint_call("gen", 0, {{"rank": 0}}):
        namespace["generated"](0)
""")


@pytest.mark.timeout(120)
def test_code_with_no_file_on_the_editors_disk_is_read_from_the_rank_through_a_source_reference(env, tmp_path, editor):
    script = tmp_path / "generated.py"
    script.write_text(GENERATED)
    program = Program(env, script)
    try:
        wait_for_sessions(env, 1)
        elsewhere = tmp_path / "not-on-this-machine"
        editor.attach(pathMappings=[{"localRoot": str(elsewhere), "remoteRoot": str(tmp_path)}])
        frames = editor.request("stackTrace", threadId=threads_by_rank(editor)[0])["stackFrames"]
        assert [f["name"] for f in frames] == ["generated", "<module>"]
        generated, module = frames[0]["source"], frames[1]["source"]
        assert generated["name"] == "<generated>" and "path" not in generated
        assert editor.request("source", sourceReference=generated["sourceReference"])["content"] == GENERATED_SOURCE
        assert module["path"] == str(elsewhere / "generated.py"), "breakpoints still name the editor's path"
        shown = editor.request("source", source=module, sourceReference=module["sourceReference"])
        assert shown == {"content": GENERATED, "mimeType": "text/x-python"}
        assert editor.failure("source", sourceReference=999).startswith("source: no source 999")
    finally:
        program.stop()


def printed(editor: DapClient) -> list[str]:
    """The lines of the editor's Debug Console that ranks printed (output events `stdout`)."""
    with editor.arrived:
        return "".join(
            e["body"]["output"] for e in editor.events if e["event"] == "output" and e["body"]["category"] == "stdout"
        ).splitlines()


@pytest.mark.timeout(180)
def test_the_shell_sees_the_editors_ranks_as_held_and_its_lines_and_continue_reach_the_editor(
    env, example, editor, shell
):
    editor.attach()
    editor.take_events("stopped", 16, reason="entry")
    by_rank = threads_by_rank(editor)
    sh = shell()
    table = sh.command("list")
    assert re.search(r"^\| Actor Name .*\| Attached \|$", table, re.M), table
    assert len(re.findall(r"^\| debugee .*\| editor +\|$", table, re.M)) == 16, table
    listed = json.loads(debug(env, "list", flags=("--json",)).stdout)
    assert {row["attached"] for row in listed} == {"editor"}
    sh.command("set list_rows 8")
    grouped = sh.command("list")
    groups = re.findall(r"^\| debugee .*\| editor +\|$", grouped, re.M)
    assert groups and f"16 ranks in {len(groups)} groups;" in grouped, grouped
    sh.command("set list_rows 40")
    pictured = sh.command("mesh debugee")
    assert re.search(r"^0  s s s s$", pictured, re.M) and "  s attached (16)  . no rank" in pictured, pictured
    refused = sh.command("attach debugee 3")
    assert re.search(
        r"debugee 3 is attached in an editor \(\S+ pid \d+\); use 'attach --force' to take it over$", refused, re.M
    ), refused

    line = top_frame(editor, by_rank[5])["line"]
    sh.command("cast debugee ranks(5) n")
    editor.take_events("continued", threadId=by_rank[5], allThreadsContinued=False)
    editor.take_events("stopped", reason="step", threadId=by_rank[5])
    assert top_frame(editor, by_rank[5])["line"] == line + 1
    assert any(text.startswith("[debugee 5] > ") for text in printed(editor)), "what the shell's line printed"

    assert sh.command("attach --force debugee 3").startswith("Attached to debug session for debugee 3")
    told = editor.take_events("output", category="console")[0]["body"]["output"]
    assert told == (
        "monarch-pdb: a shell took over debugee 3 (attach --force); the editor follows it, "
        "and holds it again when the shell detaches\n"
    )
    assert re.search(r"^\| debugee +\| 3 +\|.*\| shell +\|$", debug(env, "list").stdout, re.M)
    line = top_frame(editor, by_rank[3])["line"]
    sh.command("n")  # attached
    editor.take_events("continued", threadId=by_rank[3], allThreadsContinued=False)
    editor.take_events("stopped", reason="step", threadId=by_rank[3])
    assert top_frame(editor, by_rank[3])["line"] == line + 1
    sh.command("detach")
    assert re.search(r"^\| debugee +\| 3 +\|.*\| editor +\|$", debug(env, "list").stdout, re.M), "held again"

    sh.command("continue")
    continued = editor.take_events("continued", 16, allThreadsContinued=False)
    assert sorted(e["body"]["threadId"] for e in continued) == sorted(by_rank.values())
    raising = [2, 6, 10, 14]
    stops = editor.take_events("stopped", 4, reason="exception")
    assert sorted(e["body"]["threadId"] for e in stops) == sorted(by_rank[r] for r in raising)
    editor.take_events("thread", 12, reason="exited")
    assert not [e for e in editor.events if e["event"] == "stopped"], "each stop told once"


@pytest.mark.timeout(180)
def test_what_a_rank_prints_running_or_paused_reaches_the_debug_console_in_order(env, example, editor):
    editor.attach()
    editor.take_events("stopped", 16, reason="entry")
    printing = subprocess.Popen(
        [
            *DEBUG_SHELL,
            "-c",
            "cast debugee ranks(7) !for i in range(3000): print(i) or __import__('time').sleep(0.001)",
            "-c",
            "cast debugee ranks(7) p rank * 7",
        ],
        env=dict(env, MONARCH_PDB_HISTORY=""),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    try:
        with editor.arrived:
            assert editor.arrived.wait_for(lambda: printed(editor), 60), "the rank prints, running"
        while printing.poll() is None:
            start = time.monotonic()
            assert len(editor.request("threads")["threads"]) == 16
            assert time.monotonic() - start < 5.0, "the adapter answers while a rank prints"
        assert printing.wait() == 0
    finally:
        if printing.poll() is None:
            printing.kill()
        printing.wait()
    with editor.arrived:
        assert editor.arrived.wait_for(lambda: "[debugee 7] 49" in printed(editor), 60), printed(editor)[-3:]
    assert printed(editor) == [f"[debugee 7] {i}" for i in range(3000)] + ["[debugee 7] 49"]
    frame = top_frame(editor, threads_by_rank(editor)[7])
    mine = editor.request("evaluate", expression="!print('mine')", frameId=frame["id"], context="repl")
    assert mine["result"] == "mine"
    assert debug(env, "cast debugee ranks(7) p 'after'").returncode == 0
    with editor.arrived:
        assert editor.arrived.wait_for(lambda: "[debugee 7] 'after'" in printed(editor), 60), printed(editor)[-3:]
    assert printed(editor)[3001:] == ["[debugee 7] 'after'"], "the editor's own line's answer is not printed again"


@pytest.mark.timeout(180)
def test_ranks_below_host_brokers_are_threads_of_an_editor_on_the_root(tree, env, editor):
    tree.two_hosts()
    editor.attach()
    editor.take_events("stopped", 4, reason="entry")
    by_rank = threads_by_rank(editor)
    assert sorted(by_rank) == [0, 1, 2, 3]
    names = {t["name"] for t in editor.request("threads")["threads"]}
    assert names == {f"rank {r} · {socket.gethostname()} · host={r // 2}, gpu={r % 2}" for r in range(4)}
    stop = stop_line(18)
    frame = top_frame(editor, by_rank[3])
    assert (frame["name"], frame["line"], frame["source"]["path"]) == ("<module>", stop, str(tree.tmp / "rank.py"))
    scopes = editor.request("scopes", frameId=frame["id"])["scopes"]
    local = editor.request("variables", variablesReference=scopes[0]["variablesReference"])["variables"]
    values = {v["name"]: v["value"] for v in local}
    assert values["value"] == "9"
    assert editor.request("evaluate", expression="value * 2", frameId=frame["id"], context="watch")["result"] == "18"

    editor.request("next", threadId=by_rank[2])
    assert editor.take_events("stopped", reason="step")[0]["body"]["threadId"] == by_rank[2]
    assert {r: top_frame(editor, t)["line"] for r, t in by_rank.items()} == {0: stop, 1: stop, 2: stop + 1, 3: stop}

    assert editor.request("continue", threadId=by_rank[0])["allThreadsContinued"] is True
    # Each session ends; the odd ranks raise after it, and each stops in a post-mortem session, a new thread.
    exited = editor.take_events("thread", 4, reason="exited")
    assert sorted(e["body"]["threadId"] for e in exited) == sorted(by_rank.values())
    stops = editor.take_events("stopped", 2, reason="exception")
    by_rank = threads_by_rank(editor)
    assert sorted(by_rank) == [1, 3] and sorted(e["body"]["threadId"] for e in stops) == sorted(by_rank.values())
    info = editor.request("exceptionInfo", threadId=by_rank[3])
    assert (info["exceptionId"], info["description"]) == ("ValueError", "rank 3 fails")


@pytest.mark.timeout(180)
def test_a_rank_a_shell_holds_is_a_thread_the_editor_does_not_hold_and_the_shell_hears_the_editors_continue(
    env, example, editor, shell
):
    sh = shell()
    assert sh.command("attach debugee 3").startswith("Attached to debug session for debugee 3")
    editor.attach()
    told = editor.take_events("output", category="console")[0]["body"]["output"]
    assert re.fullmatch(
        r"monarch-pdb: debugee 3 is attached in another shell \(\S+ pid \d+\): "
        r"the editor shows it, without its output\n",
        told,
    ), told
    editor.take_events("stopped", 16, reason="entry")
    by_rank = threads_by_rank(editor)
    assert len(by_rank) == 16
    editor.request("continue", threadId=by_rank[0])
    editor.take_events("thread", reason="exited", threadId=by_rank[3])
    # The shell says so above its prompt at once (erasing the prompt's line), and is back at monarch_dbg>.
    sh.expect(
        r"\(debugee 3 \(\S+\) runs: another shell or an editor sent it a line; it stops where its pdb says next\)\n"
        r"Detaching from debug session for debugee 3 .*\nDetached from debug session for debugee 3 .*\nmonarch_dbg> "
    )
    assert "| Job " in sh.command("jobs")


MONITORING = sys.version_info >= (3, 12)
LOOPS = textwrap.dedent("""
    import os
    import sys
    import time
    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host

    def visit(rank, round):
        return rank + round

    class Looper(Actor):
        @endpoint
        def work(self, paused):
            rank = current_rank().rank
            if rank in paused:
                breakpoint()
            print("RUNNING", rank, flush=True)
            round = 0
            while not os.path.exists(sys.argv[1] + str(rank)):
                round += 1
                visit(rank, round)
                time.sleep(0.01)
            raise ValueError(f"rank {rank} was told to stop")

    if __name__ == "__main__":
        this_host().spawn_procs(per_host={"gpu": 2}).spawn("looper", Looper).work.call(PAUSED).get()
""")
VISIT_LINE = 8
LOOP_LINE = 20
"""Where `visit` does its work, and where the loop calls it."""


@pytest.fixture
def loops(env, tmp_path):
    """Run the looping ranks' script, some ranks paused at a breakpoint first: each runs until
    a file named after it appears (`stop-RANK`), then raises."""
    started = []

    def run(paused: tuple[int, ...] = ()) -> tuple[Program, Path]:
        script = tmp_path / "loops.py"
        script.write_text(LOOPS.replace("PAUSED", repr(list(paused))))
        program = Program(env, script, str(tmp_path / "stop-"))
        started.append(program)
        if paused:
            wait_for_sessions(env, len(paused))
        wait_for_lines(program, "RUNNING", 2 - len(paused))
        wait_for_all_rows(env, lambda rows: len(rows) == 2)  # the broker knows both ranks, running or not
        return program, script

    yield run
    for program in started:
        if program.proc.returncode is None:
            program.stop()


def console_lines(editor: DapClient, count: int, timeout: float = 60.0) -> list[str]:
    return [e["body"]["output"] for e in editor.take_events("output", count, timeout, category="console")]


@pytest.mark.each_python
@pytest.mark.skipif(not MONITORING, reason="sys.monitoring comes with Python 3.12")
@pytest.mark.timeout(120)
def test_a_breakpoint_set_while_ranks_run_stops_them_all_and_one_removed_lets_them_run(loops, editor):
    program, script = loops()
    editor.attach()
    assert console_lines(editor, 1)[0].startswith("monarch-pdb: no selected rank is paused yet (2 rank processes run)")
    shown = editor.request(
        "setBreakpoints", source={"path": str(script)}, breakpoints=[{"line": VISIT_LINE}, {"line": 2}]
    )["breakpoints"]
    assert plain(shown)[0] == {"verified": True, "line": VISIT_LINE}
    assert not shown[1]["verified"] and "holds no code" in shown[1]["message"]
    stops = editor.take_events("stopped", 2, reason="breakpoint")
    by_rank = threads_by_rank(editor)
    assert sorted(e["body"]["threadId"] for e in stops) == sorted(by_rank.values()) and len(by_rank) == 2
    for thread in by_rank.values():
        assert (top_frame(editor, thread)["name"], top_frame(editor, thread)["line"]) == ("visit", VISIT_LINE)
    for _ in range(2):  # visit's return, then the loop's next line
        editor.request("next", threadId=by_rank[0])
        editor.take_events("stopped", reason="step")
    assert (top_frame(editor, by_rank[0])["name"], top_frame(editor, by_rank[0])["line"]) == ("work", LOOP_LINE + 1)
    editor.request(
        "setBreakpoints",
        source={"path": str(script)},
        breakpoints=[{"line": LOOP_LINE, "logMessage": "round {round} of {rank}", "condition": "rank == 1"}],
    )
    editor.request("continue", threadId=by_rank[0])
    printed = console_lines(editor, 3)
    assert all(line.startswith("looper 1: round ") and line.endswith(" of 1\n") for line in printed), printed
    assert not [e for e in editor.events if e["event"] == "stopped"], "the breakpoint removed stops no rank"


@pytest.mark.each_python
@pytest.mark.timeout(180)
def test_running_ranks_below_a_host_broker_take_the_editors_breakpoints_log_points_and_uncaught_filter(
    tree, env, editor, tmp_path
):
    tree.start_root()
    tree.host_broker("host0")
    script = tmp_path / "loops.py"
    script.write_text(LOOPS.replace("PAUSED", "[]"))
    program = Program(tree.host_env("host0"), script, str(tmp_path / "stop-"))
    try:
        wait_for_lines(program, "RUNNING", 2)
        wait_for_all_rows(env, lambda rows: [(r.rank, r.state) for r in rows] == [(0, "running"), (1, "running")])
        editor.attach()
        assert console_lines(editor, 1)[0].startswith("monarch-pdb: no selected rank is paused yet")
        assert editor.request("setExceptionBreakpoints", filters=["uncaught"])["breakpoints"] == [{"verified": True}]
        (tmp_path / "stop-0").touch()
        stop = editor.take_events("stopped", reason="exception")[0]["body"]
        assert threads_by_rank(editor) == {0: stop["threadId"]}, "rank 0 raised below the host broker"
        shown = editor.request(
            "setBreakpoints",
            source={"path": str(script)},
            breakpoints=[{"line": LOOP_LINE, "logMessage": "round {round} of {rank}", "condition": "rank == 1"}],
        )["breakpoints"]
        if not MONITORING:  # the running rank's process answered from below the host broker
            assert shown[0]["message"].startswith("looper 1: set when the rank next stops"), shown
            return
        assert plain(shown) == [{"verified": True, "line": LOOP_LINE}], (
            "set in the running rank's process below the host broker"
        )
        printed = console_lines(editor, 3)
        assert all(line.startswith("looper 1: round ") and line.endswith(" of 1\n") for line in printed), printed
        shown = editor.request("setBreakpoints", source={"path": str(script)}, breakpoints=[{"line": VISIT_LINE}])[
            "breakpoints"
        ]
        assert plain(shown) == [{"verified": True, "line": VISIT_LINE}]
        [stopped] = editor.take_events("stopped", reason="breakpoint")
        thread = stopped["body"]["threadId"]
        assert threads_by_rank(editor)[1] == thread
        assert (top_frame(editor, thread)["name"], top_frame(editor, thread)["line"]) == ("visit", VISIT_LINE)
    finally:
        program.stop()


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring comes with Python 3.12")
@pytest.mark.timeout(120)
def test_a_files_new_breakpoints_go_only_to_the_ranks_selected_now(env, loops, editor):
    program, script = loops()
    editor.attach()
    console_lines(editor, 1)  # no selected rank is paused yet
    point = {"line": LOOP_LINE, "logMessage": "every {rank}"}
    editor.request("setBreakpoints", source={"path": str(script)}, breakpoints=[point])
    assert {line.split(":")[0] for line in console_lines(editor, 6)} == {"looper 0", "looper 1"}
    one = DapClient(env)
    try:
        one.attach(ranks="looper ranks(1)")
        console_lines(one, 1)
        point = {"line": LOOP_LINE, "logMessage": "one {rank}"}
        shown = one.request("setBreakpoints", source={"path": str(script)}, breakpoints=[point])["breakpoints"]
        assert plain(shown) == [{"verified": True, "line": LOOP_LINE}]
        printed = console_lines(one, 6)
        assert all(line.startswith("looper 1: one 1") for line in printed), printed
    finally:
        one.close()


@pytest.mark.each_python
@pytest.mark.timeout(120)
def test_log_points_print_in_the_console_naming_the_rank_with_conditions_and_hit_counts(loops, editor):
    program, script = loops(paused=(0,))
    editor.attach()
    editor.take_events("stopped", reason="entry")
    point = {
        "line": VISIT_LINE,
        "logMessage": "visit {rank}: round {round}, {{braces}} {nosuch}",
        "condition": "round % 2 == 1",
        "hitCondition": "2",
    }
    shown = editor.request("setBreakpoints", source={"path": str(script)}, breakpoints=[point])["breakpoints"]
    if MONITORING:
        assert plain(shown) == [{"verified": True, "line": VISIT_LINE}]
    else:  # the running rank 1 takes it at its next stop
        assert shown[0]["message"].startswith("looper 1: set when the rank next stops")
    editor.request("continue", threadId=threads_by_rank(editor)[0])
    printed = console_lines(editor, 12)
    paused_first = [line for line in printed if line.startswith("looper 0: ")]
    assert paused_first[:2] == [
        "looper 0: visit 0: round 3, {braces} <NameError: name 'nosuch' is not defined>\n",
        "looper 0: visit 0: round 5, {braces} <NameError: name 'nosuch' is not defined>\n",
    ]
    running = [line for line in printed if line.startswith("looper 1: ")]
    assert bool(running) == MONITORING, printed
    assert all(int(line.split("round ")[1].split(",")[0]) % 2 == 1 for line in running), printed
    assert not [e for e in editor.events if e["event"] == "stopped"], "a log point never stops a rank"


@pytest.mark.each_python
@pytest.mark.skipif(MONITORING, reason="from Python 3.12 on a running rank stops at once")
@pytest.mark.timeout(120)
def test_before_3_12_a_breakpoint_reaches_running_ranks_at_their_next_stop(env, loops, editor):
    program, script = loops()
    editor.attach()
    shown = editor.request("setBreakpoints", source={"path": str(script)}, breakpoints=[{"line": VISIT_LINE}])
    assert shown["breakpoints"][0]["verified"] is False
    assert "set when the rank next stops" in shown["breakpoints"][0]["message"]
    interrupted = debug(env, "interrupt looper ranks(0)")
    assert interrupted.returncode == 0, interrupted.stdout + interrupted.stderr
    stop = editor.take_events("stopped", reason="pause")[0]["body"]
    editor.request("continue", threadId=stop["threadId"])
    again = editor.take_events("stopped", reason="breakpoint")[0]["body"]
    assert again["threadId"] == stop["threadId"] and top_frame(editor, stop["threadId"])["line"] == VISIT_LINE


@pytest.mark.timeout(120)
def test_the_uncaught_filter_stops_ranks_that_raise_in_post_mortem_until_it_is_cleared(loops, editor, tmp_path):
    program, script = loops()
    filters = editor.attach()["exceptionBreakpointFilters"]
    assert [f["filter"] for f in filters] == ["uncaught"]
    assert editor.request("setExceptionBreakpoints", filters=["uncaught"])["breakpoints"] == [{"verified": True}]
    (tmp_path / "stop-0").touch()
    stop = editor.take_events("stopped", reason="exception")[0]["body"]
    assert threads_by_rank(editor) == {0: stop["threadId"]}
    info = editor.request("exceptionInfo", threadId=stop["threadId"])
    assert (info["exceptionId"], info["description"]) == ("ValueError", "rank 0 was told to stop")
    assert editor.request("setExceptionBreakpoints", filters=[])["breakpoints"] == []
    (tmp_path / "stop-1").touch()
    editor.request("continue", threadId=stop["threadId"])
    code, out = program.finish()
    assert code != 0 and "rank 1 was told to stop" in out, out
    assert not [e for e in editor.events if e["event"] == "stopped"], "cleared, the filter stops no rank"


@pytest.mark.each_python
@pytest.mark.timeout(120)
def test_ranks_that_start_after_the_editor_set_its_breakpoints_and_filter_take_them(env, tmp_path, editor):
    broker, _ = start_broker(env)
    script = tmp_path / "loops.py"
    script.write_text(LOOPS.replace("PAUSED", "[]"))
    program = None
    try:
        editor.attach()
        shown = editor.request(
            "setBreakpoints", source={"path": str(script)}, breakpoints=[{"line": VISIT_LINE, "condition": "rank == 1"}]
        )["breakpoints"]
        assert plain(shown) == [
            {
                "verified": False,
                "line": VISIT_LINE,
                "message": "no selected rank is paused or runs yet: set in each as it starts or stops",
            }
        ]
        assert editor.request("setExceptionBreakpoints", filters=["uncaught"])["breakpoints"] == [{"verified": True}]
        program = Program(env, script, str(tmp_path / "stop-"))
        wait_for_lines(program, "RUNNING", 2)
        wait_for_all_rows(env, lambda rows: len(rows) == 2)  # rank 1 may have stopped at its breakpoint by now
        # Asked of each process after the broker asked it the standing requests, as it started.
        assert debug(env, "peek looper ranks(:) rank").stdout.startswith("looper ranks[0] (1)\n0\n")
        (tmp_path / "stop-0").touch()
        raised = editor.take_events("stopped", reason="exception")[0]["body"]
        assert threads_by_rank(editor)[0] == raised["threadId"], "the filter reached the rank that started later"
        if MONITORING:
            stop = editor.take_events("stopped", reason="breakpoint")[0]["body"]
            assert threads_by_rank(editor)[1] == stop["threadId"]
            assert top_frame(editor, stop["threadId"])["line"] == VISIT_LINE
    finally:
        if program is not None:
            program.stop()
        stop_broker(broker)


def editor_gone(editor: DapClient, how: str) -> None:
    """The editor disconnects, or its adapter dies (the broker finds its connection lost)."""
    if how == "disconnect":
        editor.request("disconnect")
        assert editor.proc.wait(timeout=30) == 0, editor.stderr()
    else:
        editor.proc.kill()
        editor.proc.wait(timeout=30)


@pytest.mark.parametrize("how", ["disconnect", "lost"])
@pytest.mark.timeout(120)
def test_the_editors_breakpoints_in_paused_ranks_go_when_it_disconnects_or_is_lost(env, example, editor, how):
    editor.attach()
    editor.take_events("stopped", 16, reason="entry")
    shown = editor.request(
        "setBreakpoints", source={"path": EXAMPLE}, breakpoints=[{"line": 12}, {"line": 16}, {"line": 24}]
    )["breakpoints"]
    assert all(b["verified"] for b in shown), shown
    editor_gone(editor, how)
    wait_for_all_rows(
        env, lambda rows: len(rows) == 16 and not any(r.attached for r in rows), 60, ask=wire.ListSessions()
    )
    assert debug(env, "continue").returncode == 0
    rows = wait_for_all_rows(
        env, lambda rows: len(rows) == 4 and all(r.state == "post-mortem" for r in rows), 60, ask=wire.ListSessions()
    )
    assert sorted(r.rank for r in rows) == [2, 6, 10, 14], "no rank stops at a breakpoint of the editor that left"


@pytest.mark.each_python
@pytest.mark.parametrize("how", ["disconnect", "lost"])
@pytest.mark.timeout(180)
def test_running_ranks_and_later_jobs_take_nothing_from_an_editor_that_left(env, tmp_path, editor, how):
    broker, _ = start_broker(env)
    said = BrokerLog(broker)
    script = tmp_path / "loops.py"
    script.write_text(LOOPS.replace("PAUSED", "[]"))
    started = []
    try:
        started.append(Program(env, script, str(tmp_path / "first-stop-")))
        wait_for_lines(started[0], "RUNNING", 2)
        wait_for_all_rows(env, lambda rows: len(rows) == 2)
        editor.attach()
        go = f"__import__('os').path.exists({str(tmp_path / 'go')!r})"
        editor.request(
            "setBreakpoints", source={"path": str(script)}, breakpoints=[{"line": VISIT_LINE, "condition": go}]
        )
        assert editor.request("setExceptionBreakpoints", filters=["uncaught"])["breakpoints"] == [{"verified": True}]
        editor_gone(editor, how)
        said.wait_for("its breakpoints and exception filter are removed from every rank")
        # Answered by each process after it was told, in the order the broker sent both.
        assert debug(env, "peek looper ranks(:) rank").stdout.startswith("looper ranks[0] (1)\n0\n")
        (tmp_path / "go").touch()
        for rank in (0, 1):
            (tmp_path / f"first-stop-{rank}").touch()
        code, out = started[0].finish()
        assert code != 0 and "rank 1 was told to stop" in out, out

        started.append(Program(env, script, str(tmp_path / "later-stop-")))
        wait_for_lines(started[1], "RUNNING", 2)
        for rank in (0, 1):
            (tmp_path / f"later-stop-{rank}").touch()
        code, out = started[1].finish()
        assert code != 0 and "rank 1 was told to stop" in out, out
    finally:
        for program in started:
            if program.proc.returncode is None:
                program.stop()
        said.stop()


@pytest.mark.parametrize("wait", [False, True])
@pytest.mark.timeout(180)
def test_when_every_rank_finished_the_session_ends_unless_it_waits_for_the_next_job(env, example, editor, wait):
    editor.attach(waitForJob=wait)
    editor.take_events("stopped", 16, reason="entry")
    by_rank = threads_by_rank(editor)
    editor.request("continue", threadId=by_rank[0])
    raised = editor.take_events("stopped", 4, reason="exception")
    editor.request("continue", threadId=raised[0]["body"]["threadId"])
    code, out = example.finish()
    assert code != 0, out
    if not wait:
        editor.take_events("terminated")
        assert any(
            re.fullmatch(r"monarch-pdb: every rank of debugging-\d+ finished\n", line)
            for line in console_lines(editor, 1)
        )
        return
    later = Program(env, EXAMPLES / "debugging.py")
    try:
        editor.take_events("stopped", 16, reason="breakpoint")
        assert len(threads_by_rank(editor)) == 16
        assert not [e for e in editor.events if e["event"] == "terminated"], "it waited for the next job"
    finally:
        later.stop()


@pytest.mark.timeout(120)
def test_attached_before_the_job_its_breakpoints_turn_verified_once_a_rank_takes_them(env, editor):
    broker, _ = start_broker(env)
    program = None
    try:
        editor.attach()
        assert console_lines(editor, 1) == [
            "monarch-pdb: no selected rank is paused yet (0 rank processes run): "
            "each one that stops at a breakpoint, raises or is paused becomes a thread\n"
        ]
        shown = editor.request("setBreakpoints", source={"path": EXAMPLE}, breakpoints=[{"line": 12}, {"line": 3}])[
            "breakpoints"
        ]
        assert [(b["verified"], b["line"]) for b in shown] == [(False, 12), (False, 3)]
        program = Program(env, EXAMPLES / "debugging.py")
        changed = editor.take_events("breakpoint", reason="changed")[0]["body"]["breakpoint"]
        assert changed == {"id": shown[0]["id"], "verified": True, "line": 12}
        editor.take_events("stopped", 16, reason="breakpoint")
        assert not [e for e in editor.events if e["event"] == "breakpoint"], "line 3 holds no code: never verified"
    finally:
        if program is not None:
            program.stop()
        stop_broker(broker)


LATE = textwrap.dedent("""
    import os
    import sys
    import time
    import monarch_pdb

    monarch_pdb.install()
    print("INSTALLED", flush=True)
    while not os.path.exists(sys.argv[1] + "import"):
        time.sleep(0.01)
    import late
    late.run(sys.argv[1])
""")
LATE_MODULE = textwrap.dedent("""
    import os

    def step(n):
        return n + 1

    def run(stop):
        n = 0
        while not os.path.exists(stop + "end"):
            n = step(n)
""")
STEP_LINE = 5


@pytest.mark.each_python
@pytest.mark.skipif(not MONITORING, reason="sys.monitoring comes with Python 3.12")
@pytest.mark.timeout(120)
def test_a_breakpoint_in_a_file_the_running_rank_has_not_imported_yet_stops_it_once_it_does(env, tmp_path, editor):
    (tmp_path / "late.py").write_text(LATE_MODULE)
    (tmp_path / "main.py").write_text(LATE)
    program = Program(env, tmp_path / "main.py", str(tmp_path / "go-"))
    try:
        wait_for_lines(program, "INSTALLED", 1)
        wait_for_all_rows(env, lambda rows: [r.state for r in rows] == ["running"])
        editor.attach()
        shown = editor.request(
            "setBreakpoints", source={"path": str(tmp_path / "late.py")}, breakpoints=[{"line": STEP_LINE}]
        )["breakpoints"]
        assert plain(shown) == [{"verified": True, "line": STEP_LINE}], "set as the file loads"
        (tmp_path / "go-import").touch()
        stop = editor.take_events("stopped", reason="breakpoint")[0]["body"]
        assert (top_frame(editor, stop["threadId"])["name"], top_frame(editor, stop["threadId"])["line"]) == (
            "step",
            STEP_LINE,
        )
    finally:
        program.stop()


@pytest.mark.timeout(120)
def test_the_audit_log_names_the_breakpoints_an_editor_sets_in_running_ranks(env, tmp_path, loops, editor):
    audit = tmp_path / "audit.log"
    broker, _ = start_broker(env, "--audit", str(audit))
    try:
        program, script = loops()
        editor.attach()
        editor.request(
            "setBreakpoints",
            source={"path": str(script)},
            breakpoints=[{"line": VISIT_LINE, "condition": "rank == 9", "logMessage": "at {round}"}],
        )
        editor.request("setExceptionBreakpoints", filters=["uncaught"])
    finally:
        stop_broker(broker)
    lines = audit.read_text().splitlines()
    assert [line.split(" ranks=")[1] for line in lines] == [
        f"0,1 command=\"breakpoints {script} [{VISIT_LINE} if rank == 9 log 'at {{round}}']\"",
        "0,1 command='breakpoints uncaught=True'",
    ]
