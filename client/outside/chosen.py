"""The processes a command that works from outside takes (`join`, `stacks`): PIDs named, then
the Python processes a launcher runs below one (`--children-of`)."""

from __future__ import annotations

import argparse
import os

from monarch_pdb.processes import children_of


class NoProcess(Exception):
    """Why the command has no process to work on, in one line."""


def process_arguments(parser: argparse.ArgumentParser, command: str, verb: str) -> None:
    """The processes `command` takes to `verb` (join, read): PIDs, or a launcher's below it."""
    parser.set_defaults(command=command)
    parser.add_argument("pids", type=int, nargs="*", metavar="PID", help=f"a process to {verb}")
    parser.add_argument(
        "--children-of",
        type=int,
        metavar="PID",
        help=f"{verb} the Python processes a launcher (torchrun, mpirun, an srun step) runs below PID",
    )


def chosen_pids(args: argparse.Namespace) -> list[int]:
    """The processes named, then those below --children-of; NoProcess when there are none."""
    pids = list(dict.fromkeys(args.pids))
    if args.children_of is not None:
        if not os.path.exists(f"/proc/{args.children_of}"):
            raise NoProcess(f"{args.children_of}: no such process")
        below = children_of(args.children_of)
        if not below:
            raise NoProcess(f"{args.children_of} runs no Python process below it")
        pids += [pid for pid in below if pid not in pids]
    if not pids:
        raise NoProcess(f"{args.command} needs a PID, or --children-of PID")
    return pids
