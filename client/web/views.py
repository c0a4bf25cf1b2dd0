"""What the page shows of the job, each part answered by a command of the command layer as the
shell runs it: the state (jobs, every rank, each actor's mesh), cheap enough to send on every
change, and each actor's reading (its stacks, the hang story, its process groups), which asks
the ranks and takes a second or two."""

from __future__ import annotations

import argparse
import time
from typing import Any

from monarch_pdb.client import commands
from monarch_pdb.client.commands.arguments import seconds
from monarch_pdb.client.commands.cast import CAST_TIMEOUT
from monarch_pdb.client.commands.hangs import GONE
from monarch_pdb.client.connection import BrokerConnection, broker_options


def client_options(parser: argparse.ArgumentParser, reading: str) -> None:
    """The options of every command of the page's: its broker, and `--timeout`, the seconds the
    ranks get to answer `reading`."""
    broker_options(parser)
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=CAST_TIMEOUT,
        metavar="S",
        help=f"seconds the ranks get to answer {reading} (default %(default)g)",
    )


def actor_names(rows: list[dict], actor: str | None) -> list[str]:
    """The actors with a rank neither lost nor finished (only `actor`, when one is named), as
    a command names them: `job:actor` where several jobs run."""
    live = sorted({(r["job"], r["actor"]) for r in rows if r["state"] not in GONE})
    several = len({job for job, _ in live}) > 1
    names = [f"{job}:{name}" if several else name for job, name in live]
    if actor is None:
        return names
    wanted = [n for n, (job, name) in zip(names, live) if actor in (n, name, f"{job}:{name}")]
    if not wanted:
        raise commands.CommandError(f"no running rank of actor {actor} is known to the broker")
    return wanted


def state(conn: BrokerConnection, actor: str | None = None) -> dict[str, Any]:
    """The jobs, every rank, and each running actor's mesh."""
    rows = commands.run(conn, commands.ListArgs(all=True, rows=True)).doc
    return {
        "jobs": commands.run(conn, commands.JobsArgs()).doc,
        "ranks": rows,
        "actors": [
            {"name": name, "mesh": commands.run(conn, commands.MeshArgs(name)).doc} for name in actor_names(rows, actor)
        ],
    }


def reading(conn: BrokerConnection, name: str, cast_timeout: float) -> dict[str, Any]:
    """One actor read without stopping it: the hang story, its process groups, and its merged
    stacks with the program frame's locals; each with its `--json` document."""
    stacks = commands.run(conn, commands.StacksArgs(name, locals=True, cast_timeout=cast_timeout))
    hang = commands.run(conn, commands.HangArgs(name, cast_timeout=cast_timeout))
    groups = commands.run(conn, commands.CollectivesArgs(name))
    return {
        "stacks": stacks.shown,
        "stacks_document": stacks.doc,
        "hang": hang.shown,
        "hang_document": hang.doc,
        "collectives": groups.shown,
        "collectives_document": groups.doc,
        "failures": [f for f in (stacks.failure, hang.failure, groups.failure) if f],
    }


def gather(conn: BrokerConnection, actor: str | None, cast_timeout: float) -> dict[str, Any]:
    """Everything a snapshot shows: the state, and each actor's reading."""
    data = state(conn, actor)
    for part in data["actors"]:
        part.update(reading(conn, part["name"], cast_timeout))
    return {"taken": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **data}
