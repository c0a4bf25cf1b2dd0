"""`monarch-pdb stacks PID... | --children-of PID`: the merged stacks of processes of this host
read from outside them, whether or not they ever loaded the debugger, with no broker: the first
look at a job that hangs, before anything is joined. Each process is named by the rank its
launcher gave it (torchrun's RANK, Slurm's, MPI's), else by its pid; the tree is the shell's.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from monarch_pdb import outside, processes, settings, wire
from monarch_pdb.client.commands import stack_tree
from monarch_pdb.client.commands.arguments import seconds
from monarch_pdb.client.escapes import visible
from monarch_pdb.client.outside.chosen import NoProcess, chosen_pids, process_arguments
from monarch_pdb.ranks import RankSet


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="monarch-pdb stacks")
    parser.description = (
        "The merged Python stacks of processes of this host, read from outside them: joined or not, "
        "holding the GIL or not, running no code in them."
    )
    process_arguments(parser, "stacks", "read")
    parser.add_argument("--native", action="store_true", help="the C/C++ frames too (py-spy)")
    parser.add_argument("--locals", action="store_true", help="the locals of each program frame (py-spy)")
    parser.add_argument("--thread", choices=("main", "all"), default="main", help="the main thread (default), or all")
    parser.add_argument("--full", action="store_true", help="every frame, the shared trunk too")
    parser.add_argument(
        "--timeout",
        type=seconds,
        metavar="S",
        help="seconds py-spy gets to read each process (MONARCH_PDB_READ_TIMEOUT, default 5, with a core to "
        "itself: twice that with --native, and more when more processes than cores are read at once)",
    )
    parser.add_argument("--json", action="store_true", help="the merged stacks as JSON")
    return parser


def named(pids: list[int]) -> tuple[str, dict[int, int]]:
    """The name the stacks go under and each process's rank: the launcher's ranks where every
    process has a distinct one (its environment as it started), else the pids themselves."""
    ranks = {}
    for pid in pids:
        try:
            detected = processes.launched(pid)
        except OSError:
            break
        if detected is None:
            break
        ranks[pid] = detected.rank
    script = processes.script_of(pids[0])
    if len(ranks) == len(pids) and len(set(ranks.values())) == len(pids):
        return script, ranks
    return f"{script} pids", {pid: pid for pid in pids}


def read_all(pids: list[int], args: argparse.Namespace) -> wire.StacksResult:
    """Every process read, a few at once, and identical stacks merged."""
    actor, ranks = named(pids)
    every = args.thread == "all"
    limit = args.timeout or outside.time_limit(settings.load().read_timeout, len(pids), args.native)

    def one(pid: int) -> outside.Outside | str:
        try:
            processes.python_version(pid)
            return outside.read(pid, every, args.native, args.locals, limit)
        except processes.CannotRead as why:
            return str(why)
        except FileNotFoundError:
            return "no such process"
        except OSError as error:
            return error.strerror or str(error)

    merged: dict[tuple, tuple[list[wire.ThreadStack], list[int], dict[tuple[str, str], list[int]]]] = {}
    missing = []
    with ThreadPoolExecutor(outside.READS_AT_ONCE) as pool:
        for pid, found in zip(pids, pool.map(one, pids)):
            rank = ranks[pid]
            if isinstance(found, str):
                missing.append(wire.Missing(rank, f"process {pid}: {found}"))
                continue
            key = tuple(thread.key() for thread in found.threads)
            _, held, values = merged.setdefault(key, (found.threads, [], {}))
            held.append(rank)
            for value in found.locals.items():
                values.setdefault(value, []).append(rank)
    groups = [
        wire.StackGroup(threads, RankSet.of(held), [wire.LocalValue(n, v, r) for (n, v), r in values.items()])
        for threads, held, values in merged.values()
    ]
    return wire.StacksResult(ref=0, actor=actor, groups=groups, missing=missing)


def run(args: argparse.Namespace) -> int:
    try:
        pids = chosen_pids(args)
    except NoProcess as problem:
        print(f"monarch-pdb: {problem}", file=sys.stderr)
        return 2
    result = read_all(pids, args)
    every = args.thread == "all"
    if args.json:
        print(json.dumps(stack_tree.document(result, every, args.full), sort_keys=True))
    else:
        sys.stdout.write(visible(stack_tree.text(result, every, args.full)))
    return 1 if not result.groups else 0
