"""The commands about the ranks the broker knows: `list`, `jobs`, `mesh`, `wait` and `continue`."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

from monarch_pdb import wire
from monarch_pdb.client.commands import mesh
from monarch_pdb.client.commands.answer import Answer, CommandError, ask, one_or_all
from monarch_pdb.client.commands.arguments import ACTOR_HELP, argument, count_number, split_job, timeout
from monarch_pdb.client.commands.listing import groups_table, jobs_table, sessions_table
from monarch_pdb.client.commands.spec import command, usage
from monarch_pdb.client.connection import BrokerConnection
from monarch_pdb.ranks import counted, format_ranks

WAIT_TIMEOUT = 60.0


def json_row(row: wire.SessionRow) -> dict:
    """A `list` row as docs/scripts.md's JSON schema names its fields."""
    return {
        "job": row.job,
        "actor": row.actor,
        "rank": row.rank,
        "coords": row.coords,
        "host": row.host,
        "pid": row.pid,
        "function": row.function,
        "file": row.filename,
        "line": row.lineno,
        "state": row.state,
        "instance": row.instance,
        "attached": row.attached,
    }


@dataclass(frozen=True)
class ListArgs:
    """list [--all] [--rows]

    Show every rank stopped at a breakpoint, or with --all every rank known, running too.
    Past list_rows ranks, a row per group of ranks stopped at the same place, as the broker
    groups them (JSON has every row)."""

    all: bool = False
    rows: bool = False
    list_rows: int | None = None
    """The front end's setting: past this many ranks, a row per group; None: a row per rank."""


@command(
    ListArgs,
    argument("--all", action="store_true", help="every rank known, running ones too"),
    argument(
        "--rows",
        action="store_true",
        help="a row per rank however many (past list_rows ranks, a row per group of ranks by default)",
    ),
)
def list_ranks(conn: BrokerConnection, args: ListArgs) -> Answer:
    above = None if args.rows else args.list_rows
    question = wire.ListAll(groups_above=above) if args.all else wire.ListSessions(groups_above=above)
    reply = ask(conn, question, wire.SessionList, wire.SessionGroups)
    if isinstance(reply, wire.SessionGroups):
        return Answer(
            functools.partial(groups_table, reply.groups, with_state=args.all),
            [asdict(g) for g in reply.groups],
            actors=frozenset(g.actor for g in reply.groups),
        )
    assert isinstance(reply, wire.SessionList)
    rows = reply.rows
    text: str | functools.partial[str]
    if not rows:
        text = "No rank is known to the broker." if args.all else "No active breakpoints."
    else:
        text = functools.partial(sessions_table, rows, with_state=args.all)
    return Answer(text, lambda: [json_row(r) for r in rows], actors=frozenset(r.actor for r in rows))


@dataclass(frozen=True)
class JobsArgs:
    """jobs

    Show the jobs whose ranks the broker knows."""


@command(JobsArgs, refusal="jobs takes no arguments")
def jobs(conn: BrokerConnection, args: JobsArgs) -> Answer:
    rows = ask(conn, wire.ListJobs(), wire.JobList).rows
    return Answer(jobs_table(rows) if rows else "No job is connected.", [asdict(r) for r in rows])


@dataclass(frozen=True)
class MeshArgs:
    """mesh [actor]

    A picture of the mesh, each rank's state in its cell."""

    actor: str | None = None
    colour: bool = False
    """The front end's: the cells in colour (a terminal)."""
    columns: int = 80
    """The front end's: the width the picture fits."""


@command(MeshArgs, argument("actor", nargs="?", help=ACTOR_HELP + " (default: every actor)"))
def mesh_picture(conn: BrokerConnection, args: MeshArgs) -> Answer:
    job, actor = split_job(args.actor) if args.actor is not None else ("", "")
    rows = ask(conn, wire.ListAll(), wire.SessionList).rows
    by_actor: dict[tuple[str, str], list[wire.SessionRow]] = {}
    for row in rows:
        if (not actor or row.actor == actor) and (not job or row.job == job):
            by_actor.setdefault((row.job, row.actor), []).append(row)
    if not by_actor:
        raise CommandError(
            f"No rank of actor {actor} is known to the broker" if actor else "No rank is known to the broker"
        )
    several_jobs = len({j for j, _ in by_actor}) > 1
    names = {key: f"{key[0]}:{key[1]}" if several_jobs else key[1] for key in by_actor}
    pictures = [mesh.picture(names[key], by_actor[key], args.colour, args.columns) for key in sorted(by_actor)]
    docs = [mesh.document(names[key], by_actor[key]) for key in sorted(by_actor)]
    return Answer("\n".join(pictures), one_or_all(docs), colours=args.colour)


@dataclass(frozen=True)
class WaitArgs:
    """wait <actor> <count> [--timeout S] | wait --any <count> [--timeout S]

    Block until enough ranks of an actor, or of any actor, are stopped."""

    count: int
    actor: str | None = None
    any: bool = False
    timeout: float = WAIT_TIMEOUT


@command(
    WaitArgs,
    argument("actor", nargs="?", help=ACTOR_HELP),
    argument("--any", action="store_true", help="ranks of any actor, instead of one actor's"),
    argument("count", type=count_number, help="how many of its ranks must be stopped"),
    argument(
        "--timeout",
        type=timeout,
        default=WAIT_TIMEOUT,
        metavar="S",
        help=f"seconds to wait (default {WAIT_TIMEOUT:g})",
    ),
    news_first=True,
)
def wait(conn: BrokerConnection, args: WaitArgs) -> Answer:
    if args.any == (args.actor is not None):
        raise CommandError(usage(WaitArgs))
    name = "--any" if args.any or args.actor is None else args.actor
    job, actor = ("", "") if args.actor is None else split_job(args.actor)

    def stopped(rows: list[wire.SessionRow]) -> int:
        return sum(
            1
            for r in rows
            if r.state != wire.RankState.RUNNING and (not actor or r.actor == actor) and (not job or r.job == job)
        )

    seen = stopped(conn.wait_for_rows(lambda rows: stopped(rows) >= args.count, args.timeout))
    what = f"ranks of {name}" if actor else "ranks"
    if seen < args.count:
        raise CommandError(f"waited {args.timeout:g} s: {seen} of {args.count} {what} stopped")
    return Answer(f"{seen} {what} stopped", {"wait": name, "wanted": args.count, "stopped": seen})


@dataclass(frozen=True)
class ContinueArgs:
    """continue

    Clear the breakpoints set with b/tbreak and continue every stopped rank."""


@command(ContinueArgs, refusal="continue takes no arguments (to continue some ranks: cast <actor> ranks(...) c)")
def continue_all(conn: BrokerConnection, args: ContinueArgs) -> Answer:
    released = ask(conn, wire.Continue(), wire.Continued).released
    total = sum(len(r.ranks) for r in released)
    parts = ", ".join(f"{r.actor} ranks[{format_ranks(r.ranks)}]" for r in released)
    text = f"Continued {counted(total, 'rank')}: {parts}" if released else "No rank is stopped."
    return Answer(text, {"continued": [{"actor": r.actor, "ranks": r.ranks} for r in released], "count": total})
