"""`monarch-pdb mcp`: a Model Context Protocol server on stdin/stdout (how an agent starts a
server), or on HTTP (`--listen HOST:PORT`, the streamable HTTP transport), on the official MCP
Python SDK (the `mcp` extra).

A client of the broker as the shell and the editor are: its tools are the shell's commands
(`mcp_tools` runs them), each answer the text the shell shows and the `--json` document; the
paused ranks are resources; a prompt walks an agent through a job that hangs. What changes the
ranks (`cast`, `continue`, `interrupt`, `step`), and an expression of `peek` or `stacks --by` that
does more than read (`read_only`), is refused unless the server was started with
`--allow-control`.
"""

from __future__ import annotations

import argparse
import inspect
import signal
import sys
from collections.abc import Callable
from typing import Annotated, Any, Literal
from urllib.parse import quote

from monarch_pdb import __version__, discovery, wire
from monarch_pdb import settings as settings_module
from monarch_pdb.client import commands
from monarch_pdb.client.agents import mcp_tools, read_only
from monarch_pdb.client.agents.mcp_tools import Debugger, Refusal, ToolResult, one_line
from monarch_pdb.client.commands.arguments import ACTOR_HELP, SELECTOR_HELP
from monarch_pdb.client.commands.cast import PEEK_TIMEOUT
from monarch_pdb.client.commands.hangs import INTERRUPT_TIMEOUT
from monarch_pdb.client.connection import broker_options
from monarch_pdb.client.listen import listen_address, serve

NEEDS_SDK = "monarch-pdb mcp needs the MCP Python SDK: pip install 'monarch-pdb[mcp]'"
try:
    import anyio
    import mcp_types
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from pydantic import Field
    from typing_extensions import TypedDict
except ImportError:  # the server is an extra; its command says how to install it
    raise SystemExit(NEEDS_SDK) from None

RESOURCES_LISTED = 1024
"""Paused ranks listed as resources at most (each one may still be read by its address)."""
URI = "monarch-pdb://{job}/{actor}/{rank}"
PATH = "/mcp"
"""Where the HTTP transport answers."""
INSTRUCTIONS = (
    "monarch-pdb debugs Python programs that run as many processes (ranks) at once. A rank is "
    "named by its actor and number; tools take an actor (job:actor where several jobs have one) "
    "and a selector such as ranks(0:8) or ranks(host=0, gpu=1:3). Answers group ranks that said "
    "the same. Start with list, stacks and peek, which read the ranks without stopping them."
)
READS_ONLY = (
    " Without --allow-control the expression may only read: names, attributes, subscripts, literals "
    "and operators, no calls (a property or __getitem__ of the program's own still runs)."
)
"""What a tool that takes an expression adds to its description."""
Actor = Annotated[str, Field(description=ACTOR_HELP)]
Selector = Annotated[str, Field(description=SELECTOR_HELP)]
Rank = Annotated[int, Field(description="one of the actor's ranks, paused", ge=0)]
Seconds = Annotated[float, Field(description="seconds a rank may take to answer", gt=0)]


class Structured(TypedDict):
    """A tool's structured result: the shell line that gives the same answer, the `--json`
    document, why it did not fully work, the events since the last call, and what was cut to fit."""

    command: str
    document: Any
    failure: str
    events: list[str]
    cut: list[str]


Result = Annotated[mcp_types.CallToolResult, Structured]


def result(answer: ToolResult) -> mcp_types.CallToolResult:
    """The answer, cut to fit: the shell's text to read, the document as structured content."""
    answer = mcp_tools.shaped(answer)
    text = answer.text.rstrip("\n")
    if answer.events:
        text += "\n\nevents since the last call:\n" + "\n".join(answer.events)
    if answer.cut:
        text += "\n\ncut to fit:\n" + "\n".join(answer.cut)
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text or "(nothing)")],
        structured_content=Structured(
            command=answer.command,
            document=answer.document,
            failure=answer.failure,
            events=answer.events,
            cut=answer.cut,
        ),
    )


def about(name: str) -> str:
    """A command's help without its usage line: the description of the tool that runs it."""
    return commands.COMMANDS[name].about


def uri_of(row: wire.SessionRow) -> str:
    return URI.format(job=quote(row.job, safe=""), actor=quote(row.actor, safe=""), rank=row.rank)


def build(debugger: Debugger, allow_control: bool) -> MCPServer:
    """The server, its tools, resources and prompt, over `debugger`."""

    class Server(MCPServer):
        async def list_resources(self) -> list[mcp_types.Resource]:
            """The paused ranks, each a resource (`URI`), beside the server's own."""
            try:
                rows = await anyio.to_thread.run_sync(debugger.paused)
            except Refusal:
                rows = []
            return [
                *await super().list_resources(),
                *(
                    mcp_types.Resource(
                        uri=uri_of(row),
                        name=f"{row.actor} {row.rank}",
                        description=f"{row.state} in {row.function} at {row.filename}:{row.lineno}, "
                        f"{row.host} pid {row.pid} (job {row.job})",
                        mime_type="text/plain",
                    )
                    for row in rows[:RESOURCES_LISTED]
                ),
            ]

    server = Server("monarch-pdb", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    def answered(run: Callable[[], ToolResult]) -> mcp_types.CallToolResult:
        try:
            return result(run())
        except Refusal as refusal:
            raise ToolError(str(refusal)) from None

    def control(name: str) -> None:
        if not allow_control:
            raise ToolError(
                f"{name} changes what the ranks do: an agent may run it only when the server was "
                "started with --allow-control (monarch-pdb mcp --allow-control)"
            )

    def reading(what: str, expression: str) -> str:
        """`expression`, refused unless it only reads (read_only) or the agent may change the ranks."""
        why = "" if allow_control else read_only.refusal(expression)
        if why:
            raise Refusal(
                f"{what} {why} ({expression!r}): without --allow-control an agent's expressions may only read "
                "(names, attributes, subscripts, literals and operators); start the server with --allow-control "
                "(monarch-pdb mcp --allow-control) to run code in the ranks"
            )
        return expression

    @server.tool(name="list", description=about("list"))
    def list_ranks(
        all: Annotated[bool, Field(description="every rank known, running ones too")] = False,
        rows: Annotated[bool, Field(description="a row per rank however many")] = False,
    ) -> Result:
        return answered(lambda: debugger.run(commands.ListArgs(all=all, rows=rows)))

    @server.tool(name="jobs", description=about("jobs"))
    def jobs() -> Result:
        return answered(lambda: debugger.run(commands.JobsArgs()))

    @server.tool(name="stacks", description=about("stacks"))
    def stacks(
        actor: Annotated[str, Field(description=ACTOR_HELP + " (empty: every running actor)")] = "",
        ranks: Annotated[str, Field(description=SELECTOR_HELP + " (empty: all)")] = "",
        thread: Annotated[Literal["main", "all"], Field(description="each rank's main thread, or all")] = "main",
        full: Annotated[bool, Field(description="every frame, the trunk all ranks share too")] = False,
        locals: Annotated[bool, Field(description="the locals of each group's program frame")] = False,
        native: Annotated[bool, Field(description="the C/C++ frames too, read from outside each process")] = False,
        samples: Annotated[int, Field(description="samples to take, to tell which ranks move", ge=1, le=20)] = 1,
        every: Annotated[float, Field(description="seconds between samples", gt=0, le=10)] = 1.0,
        by: Annotated[
            str, Field(description="an expression read in each rank (step) to order the groups by." + READS_ONLY)
        ] = "",
    ) -> Result:
        def run() -> ToolResult:
            if ranks and not actor:
                raise Refusal("ranks needs an actor")
            return debugger.run(
                commands.StacksArgs(
                    actor or None,
                    ranks,
                    wire.Threads(thread),
                    full,
                    locals,
                    native,
                    samples,
                    every if samples > 1 else 1.0,
                    by=reading("by", by) if by else "",
                ),
                ("thread", "samples", "every") if samples > 1 else ("thread",),
            )

        return answered(run)

    @server.tool(name="peek", description=about("peek") + READS_ONLY)
    def peek(
        actor: Actor,
        expression: Annotated[str, Field(description="a Python expression, evaluated in each rank")],
        ranks: Selector = "ranks(:)",
        frame: Annotated[str, Field(description="the innermost frame of this function")] = "",
        up: Annotated[int, Field(description="that many frames further out", ge=0)] = 0,
        timeout: Seconds = PEEK_TIMEOUT,
    ) -> Result:
        def run() -> ToolResult:
            expression_read = reading("the expression", one_line("expression", expression))
            return debugger.run(commands.PeekArgs(actor, ranks, expression_read, timeout, frame, up), ("up", "timeout"))

        return answered(run)

    @server.tool(name="hang", description=about("hang"))
    def hang(actor: Annotated[str, Field(description=ACTOR_HELP + " (empty: every running actor)")] = "") -> Result:
        return answered(lambda: debugger.run(commands.HangArgs(actor or None)))

    @server.tool(name="collectives", description=about("collectives"))
    def collectives(actor: Actor, ranks: Selector = "ranks(:)", timeout: Seconds = PEEK_TIMEOUT) -> Result:
        return answered(lambda: debugger.run(commands.CollectivesArgs(actor, ranks, timeout), ("timeout",)))

    @server.tool(name="source", description=inspect.cleandoc(mcp_tools.Debugger.source.__doc__ or ""))
    def source(
        actor: Actor,
        rank: Rank,
        around: Annotated[int, Field(description="lines shown on each side", ge=0, le=200)] = mcp_tools.SOURCE_AROUND,
    ) -> Result:
        return answered(lambda: debugger.source(actor, rank, around))

    @server.tool(name="cast", description=about("cast") + " Needs --allow-control.")
    def cast(
        actor: Actor,
        ranks: Selector,
        command: Annotated[str, Field(description="the pdb command, sent as typed (p loss, n, w)")],
    ) -> Result:
        control("cast")
        return answered(lambda: debugger.run(commands.CastArgs(actor, ranks, one_line("command", command))))

    @server.tool(name="continue", description=about("continue") + " Needs --allow-control.")
    def continue_ranks() -> Result:
        control("continue")
        return answered(lambda: debugger.run(commands.ContinueArgs()))

    @server.tool(name="interrupt", description=about("interrupt") + " Needs --allow-control.")
    def interrupt(
        actor: Actor,
        ranks: Selector,
        timeout: Annotated[float, Field(description="seconds to wait for them to stop", gt=0)] = INTERRUPT_TIMEOUT,
    ) -> Result:
        control("interrupt")
        return answered(lambda: debugger.run(commands.InterruptArgs(actor, ranks, timeout), ("timeout",)))

    @server.tool(name="step", description=inspect.cleandoc(Debugger.step.__doc__ or "") + " Needs --allow-control.")
    def step(
        actor: Actor,
        rank: Rank,
        how: Annotated[Literal["next", "step", "return"], Field(description="pdb's next, step or return")] = "next",
    ) -> Result:
        control("step")
        return answered(lambda: debugger.step(actor, rank, how))

    @server.resource(URI, name="paused rank", description="where a paused rank stopped, and its source around it")
    def paused_rank(job: str, actor: str, rank: str) -> str:
        if not rank.isdigit():
            raise ResourceError(f"no rank {rank!r}: a rank is a number")
        try:
            return debugger.source(f"{job}:{actor}", int(rank)).text
        except Refusal as refusal:
            raise ResourceError(str(refusal)) from None

    @server.prompt(name="diagnose-hung-job", description="find why a job hangs, changing nothing in it")
    def diagnose(actor: str = "") -> str:
        which = f"the actor {actor}" if actor else "each actor that runs"
        return (
            f"A job debugged by monarch-pdb seems stuck. Find out why, for {which}, with the read-only tools, "
            "and change nothing in the ranks.\n"
            "1. `hang`: where the ranks are, the collective they disagree on, the least progressed ranks "
            "and what to look at next; `list` with all=true and `jobs` for which ranks run, are paused "
            "or were lost.\n"
            "2. `stacks` (locals=true where the loop's variables matter, samples=3 to tell who moves, "
            "by='step' to order by progress): the merged stacks. Look for the "
            "group of ranks that stands somewhere else than the rest (the least progressed), and for "
            "lines that say a rank holds the GIL or was read from outside its process.\n"
            "3. `peek` into those ranks: the values that explain where they wait (a step counter, a "
            "queue's length, a flag), compared with the other ranks' in the same call.\n"
            "4. `collectives`, for torch.distributed jobs: the first collective the ranks disagree on "
            "and the ranks that never entered it.\n"
            "Report which ranks hang, where (function, file and line), and the likely cause, with the "
            "answers that show it."
        )

    return server


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="monarch-pdb mcp")
    parser.description = "a Model Context Protocol server: the shell's commands as tools for a coding agent"
    broker_options(parser)
    parser.add_argument(
        "--allow-control",
        action="store_true",
        help="let the agent change what the ranks do: cast, continue, interrupt and step",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="serve agents over streamable HTTP at http://HOST:PORT/mcp instead of stdin/stdout "
        "(off loopback, with a secret set, which clients send as 'Authorization: Bearer <secret>')",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    settings = settings_module.load().with_overrides(host=args.host, port=args.port)
    where = listen_address(args.listen, settings, "monarch-pdb mcp") if args.listen else None
    # An agent that goes away ends the server with a signal: the server still lets go of the
    # ranks it holds, as at the end of its input.
    for ending in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(ending, lambda *_: sys.exit(0))
    debugger = Debugger(settings)
    try:
        server = build(debugger, args.allow_control)
        if where is None:
            server.run("stdio")
        else:
            app = server.streamable_http_app(streamable_http_path=PATH, host=where[0])
            serve(app, *where, discovery.secret_of(settings), "monarch-pdb mcp", PATH)
    finally:
        debugger.close()
    return 0
