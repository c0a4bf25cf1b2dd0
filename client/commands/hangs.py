"""The commands for a job that hangs, which look at the whole job at once and stop nothing
unasked: `hang`, `stacks`, `collectives` and `interrupt`."""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, fields

from monarch_pdb import wire
from monarch_pdb.client.commands import answers, collectives_report, hang_report, stack_samples, stack_tree
from monarch_pdb.client.commands.answer import Answer, CommandError, ask, one_or_all
from monarch_pdb.client.commands.arguments import (
    ACTOR_HELP,
    SELECTOR_HELP,
    actor_and_ranks,
    argument,
    every,
    ranks_of,
    samples,
    split_job,
    threads,
    timeout,
)
from monarch_pdb.client.commands.cast import (
    CAST_TIMEOUT,
    PEEK_TIMEOUT,
    RANK_ANSWERS_WITHIN,
    expression_only,
    not_answered,
)
from monarch_pdb.client.commands.spec import command, usage
from monarch_pdb.client.connection import BrokerConnection, RequestFailed
from monarch_pdb.ranks import counted, format_ranks, render_selector

INTERRUPT_TIMEOUT = 5.0
HANG_SAMPLES = 3
HANG_EVERY = 0.5
"""`hang` takes three samples of the stacks this far apart: enough to tell ranks that move."""
EVERY_RANK = "ranks(:)"
GONE = (wire.RankState.LOST, wire.RankState.FINISHED)
"""The states of a rank whose process is gone: every other rank is one that runs, to be read."""


def in_call_line(actor: str, in_call: list[int], place: str, holds_gil: bool) -> str:
    """What to do about ranks that an interrupt cannot stop before their call returns: `peek`
    reads them meanwhile, unless their call holds the GIL, which leaves only `stacks`."""
    one = len(in_call) == 1
    them = "it" if one else "them"
    now = f"only `stacks` reads {them} until then" if holds_gil else f"`peek` reads {them} now"
    return (
        f"{actor} ranks[{format_ranks(in_call)}] {'is' if one else 'are'} in a C call ({place})"
        f"{' that holds the GIL' if holds_gil else ''}; {'it stops' if one else 'they stop'} when it returns; {now}"
    )


def running_actors(conn: BrokerConnection, job: str = "") -> list[tuple[str, str]]:
    """Every (job, actor) with a rank neither lost nor finished (of `job`, where one is named):
    what `stacks` and `hang` look at when no actor is named."""
    rows = ask(conn, wire.ListAll(), wire.SessionList).rows
    found = sorted({(r.job, r.actor) for r in rows if r.state not in GONE and (not job or r.job == job)})
    if not found:
        raise CommandError("no running rank is known to the broker")
    return found


def sampled(count: int, every_s: float, take: Callable[[], wire.StacksResult]) -> list[wire.StacksResult]:
    """`count` stacks, `every_s` seconds apart; only the first where it read no rank at all (no
    reader, or every rank silent), since more samples of nothing tell nothing and cost seconds."""
    results = []
    for sample in range(count):
        if sample:
            time.sleep(every_s)  # the samples' pace, which the user chose
        results.append(take())
        if not results[-1].groups:
            break
    return results


@dataclass(frozen=True)
class StacksArgs:
    """stacks [actor] [ranks(<ranks>)] [--thread main|all] [--full] [--locals] [--native] [--samples N [--every S]] [--timeout S] [--by EXPR] [--json]

    Merged Python stacks of running ranks, without stopping them. A rank whose agent does
    not answer (C code holding the GIL) is read from outside its process; --native reads
    every rank so, its C/C++ frames (a NCCL or gloo wait) among its Python ones. --samples
    takes N samples S seconds apart and tells the ranks that moved from those that stood
    still, and where; --by orders the groups by a value of each rank's (`step`), least
    progressed first. --timeout S gives the ranks, and the reads from outside, S seconds
    (default cast_timeout)."""

    actor: str | None = None
    ranks: str = ""
    thread: wire.Threads = wire.Threads.MAIN
    full: bool = False
    locals: bool = False
    native: bool = False
    samples: int = 1
    every: float = 1.0
    timeout: float | None = None
    by: str = ""
    json: bool = False
    cast_timeout: float = CAST_TIMEOUT
    """The front end's: the time limit where no --timeout is given."""
    job: str = ""
    """Where no actor is named, the running actors of this job only ("": of every job)."""

    @classmethod
    def from_words(cls, parsed: argparse.Namespace, typed: str, words: int) -> StacksArgs:
        actor, ranks = (
            (None, "") if parsed.actor is None else actor_and_ranks(parsed.actor, parsed.selector, usage(cls))
        )
        options = {
            f.name: getattr(parsed, f.name) for f in fields(cls) if f.name != "actor" and hasattr(parsed, f.name)
        }
        return cls(actor, ranks, **options)


@command(
    StacksArgs,
    argument("actor", nargs="?", help=ACTOR_HELP + " (default: every running actor)"),
    argument("selector", nargs="*", metavar="ranks(<ranks>)", help=SELECTOR_HELP + " (default: all)"),
    argument(
        "--thread",
        type=threads,
        default=wire.Threads.MAIN,
        metavar="main|all",
        help="the main thread of each rank (default), or all its threads",
    ),
    argument(
        "--full",
        action="store_true",
        help="every frame, the trunk all ranks share too (folded into one line by default)",
    ),
    argument(
        "--locals",
        action="store_true",
        help="the locals of each group's program frame (the one peek reads), values folded over ranks",
    ),
    argument(
        "--native",
        action="store_true",
        help="the C/C++ frames too, read from outside each process by its host's broker (py-spy)",
    ),
    argument(
        "--samples",
        type=samples,
        default=1,
        metavar="N",
        help="take N merged samples and tell which ranks moved between them (default 1)",
    ),
    argument("--every", type=every, default=1.0, metavar="S", help="seconds between samples (default 1)"),
    argument(
        "--timeout",
        type=timeout,
        default=None,
        metavar="S",
        help="seconds the ranks get to answer, or their host's broker to read them from outside "
        "(default: cast_timeout)",
    ),
    argument(
        "--by",
        default="",
        metavar="EXPR",
        help="order the groups by EXPR read from each rank (as peek reads it), least first",
    ),
    argument("--json", action="store_true", help="the merged stacks as JSON"),
)
def stacks(conn: BrokerConnection, args: StacksArgs) -> Answer:
    selector = render_selector(ranks_of(args.ranks or EVERY_RANK))
    by = expression_only(args.by) if args.by else ""
    targets = [split_job(args.actor)] if args.actor is not None else running_actors(conn, args.job)
    every_thread = args.thread == wire.Threads.ALL
    texts, docs, failures = [], [], []
    for job, actor in targets:
        take = functools.partial(
            conn.stacks, actor, selector, args.thread, args.timeout or args.cast_timeout, job, args.locals, args.native
        )
        results = sampled(args.samples, args.every, take)
        result = results[-1]
        texts.append(stack_tree.text(result, every_thread, args.full))
        docs.append(stack_tree.document(result, every_thread, args.full))
        if args.samples > 1:
            moves = stack_samples.motion(results, args.every)
            texts.append("\n".join(stack_samples.motion_lines(actor, moves)) + "\n")
            docs[-1]["motion"] = stack_samples.motion_document(moves)
        if by:
            ordered = stack_samples.by_value(result, conn.peek(actor, selector, by, PEEK_TIMEOUT, job=job))
            texts.append("\n".join(stack_samples.by_lines(actor, by, ordered)) + "\n")
            docs[-1]["by"] = stack_samples.by_document(by, ordered)
        if result.missing:
            failures.append(f"{counted(len(result.missing), 'rank')} of {actor} sent no stack")
    doc = one_or_all(docs)
    return Answer(json.dumps(doc, sort_keys=True) if args.json else "".join(texts), doc, "; ".join(failures))


@dataclass(frozen=True)
class CollectivesArgs:
    """collectives <actor> [ranks(<ranks>)] [--timeout S] [--json]

    What each rank's torch.distributed process groups last did, read without stopping
    the ranks, folded over ranks: per group, the first collective the ranks disagree on and
    the ranks that never entered it, then where each set of ranks stands (the last
    collective's operation, sizes and state where the job enabled torch's Flight Recorder)."""

    actor: str
    ranks: str = ""
    timeout: float = PEEK_TIMEOUT
    json: bool = False

    @classmethod
    def from_words(cls, parsed: argparse.Namespace, typed: str, words: int) -> CollectivesArgs:
        return cls(*actor_and_ranks(parsed.actor, parsed.selector, usage(cls)), parsed.timeout, parsed.json)


@command(
    CollectivesArgs,
    argument("actor", help=ACTOR_HELP),
    argument("selector", nargs="*", metavar="ranks(<ranks>)", help=SELECTOR_HELP + " (default: all)"),
    RANK_ANSWERS_WITHIN,
    argument("--json", action="store_true", help="the groups and their ranks as JSON"),
)
def collectives_of(conn: BrokerConnection, args: CollectivesArgs) -> Answer:
    job, actor = split_job(args.actor)
    selection = ranks_of(args.ranks or EVERY_RANK)
    result = conn.peek(actor, render_selector(selection), "", args.timeout, job=job, reading=wire.Reading.COLLECTIVES)
    report = collectives_report.fold(result, selection if args.ranks else None)
    doc = collectives_report.document(report)
    text = json.dumps(doc, sort_keys=True) if args.json else collectives_report.text(report)
    return Answer(text, doc, not_answered(result), actors=frozenset({actor}))


@dataclass(frozen=True)
class HangArgs:
    """hang [actor] [--json]

    The whole story of a job that hangs, on one screen, stopping nothing: where the ranks
    are (their stacks, three samples half a second apart), the collective they disagree on and
    who never entered it, the least progressed ranks, and the commands to type next."""

    actor: str | None = None
    json: bool = False
    cast_timeout: float = CAST_TIMEOUT
    """The front end's: the time limit of each sample of the stacks."""


@command(
    HangArgs,
    argument("actor", nargs="?", help=ACTOR_HELP + " (default: every running actor)"),
    argument("--json", action="store_true", help="the whole story as JSON"),
)
def hang(conn: BrokerConnection, args: HangArgs) -> Answer:
    targets = [split_job(args.actor)] if args.actor is not None else running_actors(conn)
    texts, docs = [], []
    for job, actor in targets:
        take = functools.partial(conn.stacks, actor, EVERY_RANK, wire.Threads.MAIN, args.cast_timeout, job)
        samples_taken = sampled(HANG_SAMPLES, HANG_EVERY, take)
        snapshots = conn.peek(actor, EVERY_RANK, "", PEEK_TIMEOUT, job=job, reading=wire.Reading.COLLECTIVES)
        story = hang_report.fold(actor, samples_taken, HANG_EVERY, snapshots)
        texts.append(hang_report.text(story))
        docs.append(hang_report.document(story))
    doc = one_or_all(docs)
    text = json.dumps(doc, sort_keys=True) if args.json else "\n".join(texts)
    return Answer(text, doc, actors=frozenset(actor for _, actor in targets))


@dataclass(frozen=True)
class InterruptArgs:
    """interrupt <actor> ranks(<ranks>) [--timeout S]

    Stop running ranks where they are, as sessions."""

    actor: str
    ranks: str
    timeout: float = INTERRUPT_TIMEOUT
    cast_timeout: float = CAST_TIMEOUT
    """The front end's: the time limit of reading the stacks of ranks that did not stop."""

    @classmethod
    def from_words(cls, parsed: argparse.Namespace, typed: str, words: int) -> InterruptArgs:
        actor, ranks = actor_and_ranks(parsed.actor, parsed.selector, usage(cls), usage(cls))
        return cls(actor, ranks, parsed.timeout)


@command(
    InterruptArgs,
    argument("actor", help=ACTOR_HELP),
    argument("selector", nargs="+", metavar="ranks(<ranks>)", help=SELECTOR_HELP),
    argument(
        "--timeout",
        type=timeout,
        default=INTERRUPT_TIMEOUT,
        metavar="S",
        help=f"seconds to wait for them to stop (default {INTERRUPT_TIMEOUT:g})",
    ),
)
def interrupt(conn: BrokerConnection, args: InterruptArgs) -> Answer:
    job, actor = split_job(args.actor)
    selector = render_selector(ranks_of(args.ranks))
    reply = ask(conn, wire.Interrupt(actor=actor, selector=selector, job=job), wire.Interrupting)
    asked = set(reply.ranks)

    def stopped(rows: list[wire.SessionRow]) -> set[int]:
        return {r.rank for r in rows if r.job == reply.job and r.actor == actor} & asked

    done = stopped(conn.wait_for_rows(lambda rows: stopped(rows) == asked, args.timeout)) if asked else set()
    stuck = sorted(asked - done)
    lines = [
        f"Interrupted {counted(len(done), 'rank')}" + (f": {answers.rank_set(actor, sorted(done))}" if done else "")
    ]
    if not asked:
        lines = [f"Every selected rank of {actor} is already stopped."]
    doc: dict = {"interrupted": {"job": reply.job, "actor": actor, "ranks": sorted(done)}, "not_stopped": stuck}
    failure = ""
    if stuck:
        lines.append(
            f"{answers.rank_set(actor, stuck)} did not stop within {args.timeout:g} s (blocked in a call that "
            "did not return to its code, C code holding the GIL, or the signal blocked); where they are:"
        )
        try:
            where = conn.stacks(
                actor, f"ranks({','.join(map(str, stuck))})", wire.Threads.MAIN, args.cast_timeout, reply.job
            )
            lines.append(stack_tree.text(where, False).rstrip("\n"))
            doc["stacks"] = stack_tree.document(where)
            lines += [in_call_line(actor, *found) for found in stack_tree.in_calls(where)]
        except RequestFailed as failed:
            lines.append(f"(no stacks: {failed})")
        failure = f"{counted(len(stuck), 'rank')} did not stop"
    return Answer("\n".join(lines), doc, failure, actors=frozenset({actor}))
