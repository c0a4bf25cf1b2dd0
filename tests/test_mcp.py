"""`monarch-pdb mcp`, driven by the MCP Python SDK's own client over stdio (and streamable HTTP),
as a coding agent drives it: the shell's commands as tools with their answers folded, the
paused ranks as resources, a control tool refused unless the server was started with
--allow-control, and what the agent steps held as an editor holds it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from contextlib import asynccontextmanager, contextmanager

import pytest
from programs import NAMED_RANKS, Program, debug, start_broker, stop_broker, wait_for_lines, wait_for_sessions

pytest.importorskip("mcp", reason="the MCP Python SDK (monarch-pdb[mcp]) does not install on this Python")

import anyio  # noqa: E402
import httpx2  # noqa: E402
import jsonschema  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from monarch_pdb.client.agents.mcp_tools import DOCUMENT_CAP, TEXT_CAP, cut_text, fit  # noqa: E402

MONARCH_PDB = os.path.join(os.path.dirname(sys.executable), "monarch-pdb")
READING = {"list", "jobs", "stacks", "peek", "hang", "collectives", "source"}
CONTROL = {"cast", "continue", "interrupt", "step"}
CALL_WITHIN = 60.0
"""Seconds a test waits for the server to answer one request."""


@asynccontextmanager
async def agent(env: dict[str, str], *flags: str):
    """A client session with `monarch-pdb mcp FLAGS`, started as an agent starts it."""
    with tempfile.TemporaryFile("w+") as errors:
        server = StdioServerParameters(command=MONARCH_PDB, args=["mcp", *flags], env=env)
        async with stdio_client(server, errlog=errors) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(CALL_WITHIN):
                await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments):
    with anyio.fail_after(CALL_WITHIN):
        return await session.call_tool(tool, arguments)


def text_of(result) -> str:
    return "".join(block.text for block in result.content)


def shell_list(env: dict[str, str]) -> str:
    done = debug(env, "list")
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_tools_are_listed_with_valid_schemas_and_the_reading_ones_answer_folded(env, example):
    async def scenario():
        async with agent(env) as session:
            tools = (await session.list_tools()).tools
            assert {tool.name for tool in tools} == READING | CONTROL
            for tool in tools:
                jsonschema.Draft202012Validator.check_schema(tool.input_schema)
                jsonschema.Draft202012Validator.check_schema(tool.output_schema)
                assert tool.description, f"{tool.name} has no help"

            listed = await call(session, "list")
            assert not listed.is_error, text_of(listed)
            assert sorted(row["rank"] for row in listed.structured_content["document"]) == list(range(16))
            assert "debugee" in text_of(listed)

            stacks = await call(session, "stacks", actor="debugee")
            assert not stacks.is_error, text_of(stacks)
            assert "_debugee_actor_internal" in text_of(stacks)
            assert stacks.structured_content["command"] == "stacks --thread main debugee"

            sampled = await call(session, "stacks", actor="debugee", samples=2, every=0.1, by="rank")
            assert not sampled.is_error, text_of(sampled)
            document = sampled.structured_content["document"]
            assert document["motion"]["moved"] == [] and document["by"]["expression"] == "rank", document
            assert [g["values"][0] for g in document["by"]["groups"]][:1] == ["0"], "least first"

            hang = await call(session, "hang", actor="debugee")
            assert not hang.is_error, text_of(hang)
            assert text_of(hang).startswith("== debugee: no rank moved in 1 s; where they are:\n"), text_of(hang)
            assert hang.structured_content["document"]["next"][0].startswith("stacks debugee ranks(")

            peek = await call(session, "peek", actor="debugee", expression="rank % 4")
            assert not peek.is_error, text_of(peek)
            groups = peek.structured_content["document"]["groups"]
            assert sorted(sorted(g["ranks"]) for g in groups) == [list(range(r, 16, 4)) for r in range(4)]
            assert text_of(peek).startswith("debugee ranks[")

            source = await call(session, "source", actor="debugee", rank=0, around=1)
            assert not source.is_error, text_of(source)
            lines = source.structured_content["document"]["lines"]
            assert len(lines) == 3 and " ->\t" in text_of(source)
            assert "breakpoint()" in text_of(source) or "rank += 1" in text_of(source)

            resources = (await session.list_resources()).resources
            ranks = [r for r in resources if str(r.uri).startswith("monarch-pdb://")]
            assert len(ranks) == 16
            read = await session.read_resource(str(ranks[0].uri))
            assert "stopped in" in read.contents[0].text

            prompts = (await session.list_prompts()).prompts
            assert [p.name for p in prompts] == ["diagnose-hung-job"]
            prompt = await session.get_prompt("diagnose-hung-job", {"actor": "debugee"})
            said = prompt.messages[0].content.text
            assert said.index("`hang`") < said.index("`stacks`") < said.index("`peek`") < said.index("`collectives`")

        async with agent(dict(env, MONARCH_PDB_LIST_ROWS="4")) as session:  # past list_rows, a row per group
            listed = await call(session, "list")
            groups = listed.structured_content["document"]
            assert sorted(g["ranks"] for g in groups) == ["0,4,8,12", "1,5,9,13", "2,6,10,14", "3,7,11,15"]
            assert len(re.findall(r"^\| debugee ", text_of(listed), re.M)) == 4

    anyio.run(scenario)


def test_control_is_refused_without_allow_control_and_bad_arguments_get_a_tool_error(env, example):
    async def scenario():
        async with agent(env) as session:
            for tool, arguments in (
                ("cast", {"actor": "debugee", "ranks": "ranks(0)", "command": "p 1"}),
                ("continue", {}),
                ("interrupt", {"actor": "debugee", "ranks": "ranks(0)"}),
                ("step", {"actor": "debugee", "rank": 0}),
            ):
                refused = await call(session, tool, **arguments)
                assert refused.is_error and "--allow-control" in text_of(refused), text_of(refused)
                assert text_of(refused).count("\n") == 0

            for tool, arguments, said in (
                ("peek", {"actor": "debugee", "expression": "x = 1"}, "not a statement"),
                ("peek", {"actor": "debugee", "expression": "rank\nc"}, "expression must be one line"),
                ("peek", {"actor": "debugee", "expression": "rank", "ranks": "ranks(0:"}, "ranks"),
                ("source", {"actor": "debugee", "rank": -1}, "rank"),
                ("source", {"actor": "nosuch", "rank": 0}, "nosuch 0 is not paused"),
                ("stacks", {"thread": "some"}, "thread"),
                ("list", {"all": "often"}, "all"),
                ("nosuch", {}, "nosuch"),
            ):
                wrong = await call(session, tool, **arguments)
                assert wrong.is_error and said in text_of(wrong), (tool, arguments, text_of(wrong))

            still = await call(session, "jobs")
            assert not still.is_error and still.structured_content["document"][0]["processes"] >= 16

    anyio.run(scenario)
    assert len(wait_for_sessions(env, 16)) == 16, "nothing the agent was refused ran"


@pytest.mark.timeout(180)
def test_without_allow_control_an_expression_may_only_read_and_what_runs_code_is_refused_unsent(env, example):
    async def scenario():
        async with agent(env) as session:
            for tool, arguments, said in (
                (
                    "peek",
                    {"actor": "debugee", "ranks": "ranks(0)", "expression": "__import__('os')._exit(9)"},
                    "calls a function",
                ),
                (
                    "peek",
                    {
                        "actor": "debugee",
                        "ranks": "ranks(0)",
                        "expression": "_bad_rank.__globals__.__setitem__('changed', 7)",
                    },
                    "calls a function",
                ),
                ("peek", {"actor": "debugee", "ranks": "ranks(0)", "expression": "(changed := 7)"}, "assigns (:=)"),
                (
                    "peek",
                    {"actor": "debugee", "ranks": "ranks(0)", "expression": "_bad_rank.__globals__"},
                    "reads __globals__",
                ),
                (
                    "peek",
                    {"actor": "debugee", "ranks": "ranks(0)", "expression": "[os for os in rank]"},
                    "runs a comprehension",
                ),
                ("stacks", {"actor": "debugee", "by": "__import__('os')._exit(9)"}, "calls a function"),
            ):
                refused = await call(session, tool, **arguments)
                assert refused.is_error and said in text_of(refused), text_of(refused)
                assert "started with --allow-control" not in text_of(refused)
                assert "start the server with --allow-control (monarch-pdb mcp --allow-control)" in text_of(refused)
                assert text_of(refused).count("\n") == 0, text_of(refused)

            read = await call(session, "peek", actor="debugee", expression="[rank][0].real + 1 if rank >= 0 else -rank")
            assert not read.is_error, text_of(read)
            groups = read.structured_content["document"]["groups"]
            assert sorted((g["ranks"][0], g["output"]) for g in groups) == [(r, f"{r + 1}\n") for r in range(16)]

            unchanged = await call(session, "peek", actor="debugee", ranks="ranks(0)", expression="changed")
            assert "NameError" in text_of(unchanged), "the refused __setitem__ never reached the rank"

    anyio.run(scenario)
    assert len(wait_for_sessions(env, 16)) == 16, "rank 0 lives: the expression that ends it was never sent"


def test_a_peek_of_one_long_value_keeps_its_first_20000_characters(env, example):
    async def scenario():
        async with agent(env) as session:
            long = await call(session, "peek", actor="debugee", ranks="ranks(0)", expression="'x' * 100_000")
            assert not long.is_error, text_of(long)
            text, _, cut = text_of(long).partition("\n\ncut to fit:\n")
            assert text.startswith("debugee ranks[0] (1)\n'" + "x" * 19_000), text[:100]
            assert len(text) == TEXT_CAP
            said = long.structured_content["cut"][0]
            assert said == f"text: the first {TEXT_CAP:,} of 100,024 characters" and cut.startswith(said), cut

    anyio.run(scenario)


def test_with_allow_control_a_cast_and_a_step_work_and_continue_ends_the_job(env, example):
    async def scenario():
        async with agent(env, "--allow-control") as session:
            called = await call(session, "peek", actor="debugee", ranks="ranks(0:2)", expression="str(rank * 10)")
            assert not called.is_error, text_of(called)
            assert text_of(called) == "debugee ranks[0] (1)\n'0'\ndebugee ranks[1] (1)\n'10'"

            cast = await call(session, "cast", actor="debugee", ranks="ranks(0:4)", command="p rank * 10")
            assert not cast.is_error, text_of(cast)
            assert text_of(cast).startswith("debugee ranks[0] (1)\n0\ndebugee ranks[1] (1)\n10\n")
            assert [g["output"] for g in cast.structured_content["document"]["groups"]] == [
                "0\n",
                "10\n",
                "20\n",
                "30\n",
            ]

            before = [row for row in wait_for_sessions(env, 16) if row.rank == 1][0]
            step = await call(session, "step", actor="debugee", rank=1, how="next")
            assert not step.is_error, text_of(step)
            at = step.structured_content["document"]["at"]
            assert (at["rank"], at["line"]) == (1, before.lineno + 1)
            assert "-> " in text_of(step)

            done = await call(session, "continue")
            assert text_of(done).startswith("Continued 16 ranks: debugee ranks[0-15]"), text_of(done)
            wait_for_sessions(env, 4, state="post-mortem")  # the raising ranks stop again, and go on at the next
            done = await call(session, "continue")
            assert text_of(done).startswith("Continued 4 ranks: debugee ranks[2,6,10,14]"), text_of(done)

    anyio.run(scenario)
    code, output = example.finish()
    assert "4 of 16 ranks of debugee.to_debug raised: ranks 2,6,10,14: ValueError: bad rank" in output


@pytest.mark.timeout(120)
def test_every_tool_reaches_an_actor_whose_name_starts_with_a_dash(env, tmp_path):
    script = tmp_path / "named.py"
    script.write_text(NAMED_RANKS)
    program = Program(env, script, "-c,-c", "1", cwd=tmp_path)

    async def scenario():
        async with agent(env, "--allow-control") as session:
            for tool, arguments, answer in (
                ("stacks", {"ranks": "ranks(1)"}, "-c ranks[1] (1): 1 distinct stack\n"),
                ("peek", {"ranks": "ranks(0)", "expression": "rank"}, "-c ranks[0] (1)\n0"),
                ("collectives", {}, ""),
                ("hang", {}, "== -c: "),
                ("cast", {"ranks": "ranks(0)", "command": "p rank + 1"}, "-c ranks[0] (1)\n1"),
                ("interrupt", {"ranks": "ranks(1)", "timeout": 10}, "Interrupted 1 rank: -c ranks[1] (1)"),
            ):
                called = await call(session, tool, actor="-c", **arguments)
                assert not called.is_error and text_of(called).startswith(answer), (tool, text_of(called))
                assert " -- -c" in called.structured_content["command"], called.structured_content["command"]
            step = await call(session, "step", actor="-c", rank=1, how="next")
            assert not step.is_error and step.structured_content["document"]["at"]["actor"] == "-c", text_of(step)

    try:
        wait_for_lines(program, "RUNNING", 1)
        wait_for_sessions(env, 1)
        anyio.run(scenario)
    finally:
        program.stop()


def test_a_rank_the_agent_steps_is_held_as_the_agents_and_attach_force_takes_it_over(env, example):
    async def scenario():
        async with agent(env, "--allow-control") as session:
            step = await call(session, "step", actor="debugee", rank=3)
            assert not step.is_error, text_of(step)
            row = re.search(r"^\| debugee +\| 3 .*$", shell_list(env), re.M)
            assert row and row.group(0).rstrip(" |").endswith("agent"), shell_list(env)

            refused = debug(env, "attach debugee 3")
            assert refused.returncode == 1
            assert "debugee 3 is attached in an agent (" in refused.stderr
            assert "use 'attach --force' to take it over" in refused.stderr

            taken = debug(env, "attach debugee 3 --force", "p rank", "detach")
            assert taken.returncode == 0, taken.stderr
            assert re.search(
                r"^Attached to debug session for debugee 3 \(.*\), taken over from an agent \(", taken.stdout, re.M
            )
            assert not re.search(r"^\| debugee +\| 3 .*agent", shell_list(env), re.M)

            again = await call(session, "step", actor="debugee", rank=3, how="step")
            assert not again.is_error, text_of(again)
            assert re.search(r"^\| debugee +\| 3 .*agent", shell_list(env), re.M), "held again once it steps again"
        row = re.search(r"^\| debugee +\| 3 .*$", shell_list(env), re.M)
        assert row and "agent" not in row.group(0), "the server let go of what it held when it ended"

    anyio.run(scenario)


@contextmanager
def listening(env: dict[str, str], address: str):
    """`monarch-pdb mcp --listen ADDRESS`, and the port it says it listens on."""
    server = subprocess.Popen([MONARCH_PDB, "mcp", "--listen", address], env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        host = address.rpartition(":")[0]
        assert line.startswith(f"monarch-pdb mcp: listening on http://{host}:") and line.rstrip().endswith("/mcp"), line
        yield int(line.rstrip().removesuffix("/mcp").rpartition(":")[2])
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stderr.close()


async def jobs_over_http(url: str, headers: dict[str, str] | None = None) -> str:
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        with anyio.fail_after(CALL_WITHIN):
            await session.initialize()
        jobs = await call(session, "jobs")
        assert not jobs.is_error, text_of(jobs)
        return text_of(jobs)


def test_listen_serves_agents_over_streamable_http(env, broker):
    with listening(env, "127.0.0.1:0") as port:
        assert anyio.run(jobs_over_http, f"http://127.0.0.1:{port}/mcp") == "No job is connected."


def test_off_loopback_the_http_transport_answers_only_a_client_that_shows_the_secret(env):
    env = dict(env, MONARCH_PDB_SECRET="the secret of this test")
    broker, _ = start_broker(env)
    try:
        with listening(env, "0.0.0.0:0") as port:
            url = f"http://127.0.0.1:{port}/mcp"
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=30)
            assert refused.value.code == 401
            assert b"Authorization: Bearer" in refused.value.read()
            shown = {"Authorization": "Bearer the secret of this test"}
            assert anyio.run(jobs_over_http, url, shown) == "No job is connected."
    finally:
        stop_broker(broker)


@pytest.mark.timeout(30)
def test_listen_beyond_loopback_needs_a_secret(env):
    done = subprocess.run(
        [MONARCH_PDB, "mcp", "--listen", "0.0.0.0:0"], env=env, capture_output=True, text=True, timeout=20
    )
    assert done.returncode != 0
    assert done.stderr.strip() == (
        "monarch-pdb mcp: listening on 0.0.0.0, which is not loopback, needs a secret "
        "(MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE)"
    )


def test_a_cast_over_1024_ranks_fits_and_what_is_cut_is_said():
    groups = [{"ranks": [rank], "output": f"{rank * 1.5}\n" * 40, "outcome": "paused"} for rank in range(1024)]
    doc, cut = fit({"actor": "trainer", "groups": groups, "missing": []})
    assert len(json.dumps(doc)) <= DOCUMENT_CAP
    assert cut == [f"groups: the first {len(doc['groups'])} of 1,024 items"]
    assert doc["groups"] == groups[: len(doc["groups"])]
    assert fit({"actor": "trainer", "groups": groups[:4]}) == ({"actor": "trainer", "groups": groups[:4]}, [])

    text, cut = cut_text("x" * 60 + "\n" * (TEXT_CAP + 1))
    assert len(text) <= TEXT_CAP and cut == [f"text: the first {len(text):,} of {TEXT_CAP + 61:,} characters"]
    assert cut_text("x" * 30_000 + "\n") == ("x" * TEXT_CAP, [f"text: the first {TEXT_CAP:,} of 30,001 characters"])
    lines = "\n".join(["y" * 99] * 300)
    text, cut = cut_text(lines)
    assert text == lines[: TEXT_CAP // 100 * 100] and text.endswith("y\n"), "many lines end at a line"
