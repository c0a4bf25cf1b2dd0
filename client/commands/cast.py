"""The commands whose answers come grouped, one group per set of ranks that answered alike:
`cast` (a pdb command in paused ranks) and `peek` (an expression in running ranks)."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.client.commands import answers
from monarch_pdb.client.commands.answer import Answer, CommandError
from monarch_pdb.client.commands.arguments import (
    ACTOR_HELP,
    SELECTOR_HELP,
    argument,
    frames_up,
    from_actor,
    parse_target,
    ranks_of,
    split_job,
    timeout,
)
from monarch_pdb.client.commands.spec import command, usage
from monarch_pdb.client.connection import BrokerConnection
from monarch_pdb.ranks import render_selector

CAST_TIMEOUT = 10.0
"""Seconds a cast waits for every rank, unless the front end sets another (the shell's `cast_timeout`)."""
CAST_OUTPUTS = ("grouped", "raw")
PEEK_TIMEOUT = 5.0
RANK_ANSWERS_WITHIN = argument(
    "--timeout",
    type=timeout,
    default=PEEK_TIMEOUT,
    metavar="S",
    help=f"seconds a rank may take to answer (default {PEEK_TIMEOUT:g})",
)
"""The time limit of a command that reads running ranks as `peek` does."""


def named(job: str, actor: str) -> str:
    """An actor's name as a command takes it: `job:actor` where a job is named."""
    return f"{job}:{actor}" if job else actor


def checked_output(output: str) -> str:
    if output not in CAST_OUTPUTS:
        raise CommandError(f"cast_output must be one of {', '.join(CAST_OUTPUTS)}")
    return output


def rendered(result: wire.CastResult | wire.PeekResult, output: str) -> Callable[[], str]:
    return functools.partial(answers.raw if checked_output(output) == "raw" else answers.grouped, result)


def not_answered(result: wire.CastResult | wire.PeekResult | wire.StacksResult) -> str:
    return f"{len(result.missing)} of the selected ranks did not answer" if result.missing else ""


@dataclass(frozen=True)
class CastArgs:
    """cast <actor> ranks(<ranks>) <pdb command>

    Send one pdb command to many ranks and show their answers, grouped."""

    actor: str
    ranks: str
    line: str
    cast_timeout: float = CAST_TIMEOUT
    """Seconds to wait for every rank (the shell's `cast_timeout`)."""
    output: str = "grouped"
    """How the answers are shown: grouped, or raw (a block per rank)."""
    progress: Callable[[wire.CastProgress], None] | None = field(default=None, compare=False)
    """Told how many ranks answered so far, as they answer."""
    waiting: Callable[[str], None] | None = field(default=None, compare=False)
    """Told, once, when the broker stops answering meanwhile."""

    @classmethod
    def from_words(cls, parsed: argparse.Namespace, typed: str, words: int) -> CastArgs:
        job, actor, selection, line = parse_target(from_actor(typed, words, parsed.command), usage(cls))
        if selection is None:
            raise CommandError(usage(cls))
        return cls(named(job, actor), render_selector(selection), line)


@command(
    CastArgs,
    argument("actor", help=ACTOR_HELP),
    argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="ranks(<ranks>) <pdb command>",
        help=SELECTOR_HELP + ", then the pdb command, sent as typed",
    ),
)
def cast(conn: BrokerConnection, args: CastArgs) -> Answer:
    job, actor = split_job(args.actor)
    selector = render_selector(ranks_of(args.ranks))
    if not args.line.strip():
        raise CommandError("cast needs a pdb command after the selector")
    checked_output(args.output)  # said before the ranks run anything
    try:
        result = conn.cast(actor, selector, args.line, args.cast_timeout, job, args.progress, args.waiting)
    except KeyboardInterrupt:
        raise CommandError(f"stopped waiting (Ctrl-C); the ranks carry on with {args.line.strip()!r}") from None
    return Answer(
        rendered(result, args.output),
        functools.partial(answers.document, result),
        not_answered(result),
        actors=frozenset({actor}),
    )


def expression_only(text: str) -> str:
    """The expression, or the one line that says why it is not one: `peek` evaluates, it does
    not run statements, so a statement is refused before it is sent."""
    try:
        compile(text, "<peek>", "eval")
        return text
    except SyntaxError as error:
        try:
            compile(text, "<peek>", "exec")
        except SyntaxError:
            raise CommandError(f"peek needs a Python expression: {error.msg} in {text!r}") from None
    raise CommandError(f"peek evaluates an expression, not a statement ({text!r}): it assigns nothing in the ranks")


@dataclass(frozen=True)
class PeekArgs:
    """peek [--frame FUNC | --up N] [--timeout S] [--json] <actor> ranks(<ranks>) <expression>

    Evaluate a Python expression in running ranks without stopping them, and show the
    answers grouped as a cast's. It is read in the frame of the program's own code where
    `stacks` shows each rank (a paused rank: where it stopped); --frame FUNC the innermost
    frame of FUNC, --up N that many frames further out. An expression only, not a statement
    (what it calls runs in the rank: `mcp` without --allow-control refuses calls). One still running after --timeout seconds (default 5) is answered as
    such and finishes on its own; a rank whose C code holds the GIL is named."""

    actor: str
    ranks: str
    expression: str
    timeout: float = PEEK_TIMEOUT
    function: str = ""
    up: int = 0
    json: bool = False
    output: str = "grouped"

    @classmethod
    def from_words(cls, parsed: argparse.Namespace, typed: str, words: int) -> PeekArgs:
        job, actor, selection, expression = parse_target(from_actor(typed, words, parsed.expression), usage(cls))
        if selection is None or not expression.strip():
            raise CommandError(usage(cls))
        return cls(
            named(job, actor),
            render_selector(selection),
            expression_only(expression.strip()),
            parsed.timeout,
            parsed.function,
            parsed.up,
            parsed.json,
        )


@command(
    PeekArgs,
    argument("--frame", dest="function", default="", metavar="FUNC", help="the innermost frame of FUNC"),
    argument("--up", type=frames_up, default=0, metavar="N", help="that many frames further out"),
    RANK_ANSWERS_WITHIN,
    argument("--json", action="store_true", help="the grouped answers as JSON"),
    argument("actor", help=ACTOR_HELP),
    argument(
        "expression",
        nargs=argparse.REMAINDER,
        metavar="ranks(<ranks>) <expression>",
        help=SELECTOR_HELP + ", then the expression, sent as typed",
    ),
    names_options=True,
)
def peek(conn: BrokerConnection, args: PeekArgs) -> Answer:
    job, actor = split_job(args.actor)
    selector = render_selector(ranks_of(args.ranks))
    expression = expression_only(args.expression.strip())
    result = conn.peek(actor, selector, expression, args.timeout, args.function, args.up, job)

    def document() -> dict:
        doc = answers.document(result)
        for group in doc["groups"]:
            del group["outcome"]  # the ranks of a peek run on: no session's outcome to tell
        return doc

    text = (lambda: json.dumps(document(), sort_keys=True)) if args.json else rendered(result, args.output)
    return Answer(text, document, not_answered(result), actors=frozenset({actor}))
