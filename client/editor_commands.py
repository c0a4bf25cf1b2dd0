"""The shell's whole-job commands in the editor's Debug Console: `!cast`, `!peek` and `!stacks`,
read by the shell's own parsers and answered in the shell's own words (a cast's answers
grouped, with its numbers line; the merged stacks), so that editor and shell cannot disagree.

An actor may be left out (`!cast ranks(0:8) p loss`): the one of the rank the console is at,
else the one the editor debugs. A line the shell would refuse is refused with the shell's reason.
The shell's modules come with cmd2 and readline, which double the adapter's start: they are
loaded when the first such line is typed, not when the editor starts the adapter.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from monarch_pdb.client import answers, stack_tree
from monarch_pdb.client.connection import RequestFailed, ShellConnection
from monarch_pdb.client.editor_runtime import Refused

from monarch_pdb import wire
from monarch_pdb.ranks import parse_selector, render_selector

PREFIX = "!"
COMMANDS = ("cast", "peek", "stacks")
CAST_TIMEOUT = 10.0
"""As the shell's `cast_timeout` is by default."""


@dataclass(frozen=True)
class Here:
    """Where the console is: the actor (and its job) a line without one means."""

    job: str = ""
    actor: str = ""


def command_of(line: str) -> tuple[str, str] | None:
    """(`cast`, the rest) of `!cast ...`; None for a line that is pdb's (`!x = 1` among them)."""
    if not line.startswith(PREFIX):
        return None
    word, _, rest = line[len(PREFIX) :].partition(" ")
    return (word, rest) if word in COMMANDS else None


def run(conn: ShellConnection, word: str, rest: str, here: Here) -> str:
    """Command `word`'s answer as the shell shows it; Refused with the shell's one line."""
    from monarch_pdb.client.arguments import CommandError

    try:
        return {"cast": cast, "peek": peek, "stacks": merged_stacks}[word](conn, rest, here)
    except (RequestFailed, CommandError) as error:
        raise Refused(str(error)) from None


def with_actor(rest: str, here: Here) -> str:
    """The line with the console's actor before a selector that comes first."""
    if not rest.lstrip().startswith("ranks(") or not here.actor:
        return rest
    name = f"{here.job}:{here.actor}" if here.job else here.actor
    return f"{shlex.quote(name)} {rest.lstrip()}"


def console_usage(do) -> str:
    """The shell's usage of a command, as the console's `!` command."""
    from monarch_pdb.client.arguments import usage

    return usage(do).replace("usage: ", "usage: !", 1)


def cast(conn: ShellConnection, rest: str, here: Here) -> str:
    from monarch_pdb.client.arguments import parse_target
    from monarch_pdb.client.shell import DebugShell

    job, actor, selection, line = parse_target(with_actor(rest, here), console_usage(DebugShell.do_cast))
    if selection is None or not line.strip():
        raise Refused(console_usage(DebugShell.do_cast))
    return answers.grouped(conn.cast(actor, render_selector(selection), line, CAST_TIMEOUT, job))


def words(command: str, text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as error:  # an unclosed quote
        raise Refused(f"!{command}: {error}") from None


def peek(conn: ShellConnection, rest: str, here: Here) -> str:
    from monarch_pdb.client.arguments import from_actor, parser_of
    from monarch_pdb.client.hangs import HangCommands, peek_target

    rest = with_actor(rest, here)
    typed = words("peek", rest)
    args = parser_of(HangCommands.do_peek).parse_args(typed)
    job, actor, selection, expression = peek_target(
        from_actor(rest, len(typed), args.expression), console_usage(HangCommands.do_peek)
    )
    return answers.grouped(
        conn.peek(
            actor,
            render_selector(selection),
            expression,
            args.timeout,
            args.function,
            args.up,
            job,
        )
    )


def merged_stacks(conn: ShellConnection, rest: str, here: Here) -> str:
    """Of the actor named, else of every running actor the editor debugs (of every one, when
    it debugs no actor in particular)."""
    from monarch_pdb.client.arguments import parser_of, words_target
    from monarch_pdb.client.hangs import HangCommands

    args = parser_of(HangCommands.do_stacks).parse_args(words("stacks", with_actor(rest, here)))
    if args.actor is not None:
        job, actor, selection, _ = words_target(args.actor, args.selector, console_usage(HangCommands.do_stacks))
        targets = [(job, actor)]
    else:
        selection = None
        reply = conn.request(wire.ListAll(), wire.SessionList)
        rows = reply.rows if isinstance(reply, wire.SessionList) else []
        targets = sorted(
            {
                (r.job, r.actor)
                for r in rows
                if r.state not in (wire.RankState.LOST, wire.RankState.FINISHED) and (not here.job or r.job == here.job)
            }
        )
        if not targets:
            raise Refused("no running rank is known to the broker")
    selector = render_selector(selection or parse_selector("ranks(:)"))
    return "".join(
        stack_tree.text(
            conn.stacks(actor, selector, args.thread, CAST_TIMEOUT, job, args.locals),
            args.thread == wire.Threads.ALL,
            args.full,
        )
        for job, actor in targets
    )
