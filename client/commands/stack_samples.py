"""Stacks over time and by progress, as STAT shows a hang: `stacks --samples N` tells which
ranks moved between N merged samples and where the others stood still; `stacks --by EXPR`
orders the stack groups by a value read from each rank (`step`), least progressed first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from monarch_pdb import wire
from monarch_pdb.client.commands.stack_tree import rank_text
from monarch_pdb.places import place


@dataclass(frozen=True)
class Motion:
    """What N samples of one actor's stacks say: the ranks whose stack changed, and those whose
    stack stayed the same, by where they stand."""

    samples: int
    every: float
    moved: list[int]
    still: list[tuple[list[int], str]]


def motion(results: list[wire.StacksResult], every: float) -> Motion:
    """Ranks seen in every sample, moved or still; a rank missing from a sample is neither."""
    stacks: dict[int, set[tuple]] = {}
    seen: dict[int, int] = {}
    at: dict[int, str] = {}
    for result in results:
        for group in result.groups:
            key = tuple(thread.key() for thread in group.threads)
            where = place(group.threads[0].frames if group.threads else [])
            for rank in group.ranks:
                stacks.setdefault(rank, set()).add(key)
                seen[rank] = seen.get(rank, 0) + 1
                at[rank] = where
    everywhere = [rank for rank in sorted(stacks) if seen[rank] == len(results)]
    still: dict[str, list[int]] = {}
    for rank in everywhere:
        if len(stacks[rank]) == 1:
            still.setdefault(at[rank], []).append(rank)
    return Motion(
        len(results),
        every,
        [rank for rank in everywhere if len(stacks[rank]) > 1],
        sorted(((ranks, where) for where, ranks in still.items()), key=lambda pair: (len(pair[0]), pair[0])),
    )


def read_nothing(m: Motion) -> bool:
    """Whether the samples read no rank's stack, so that they say nothing of who moved."""
    return not m.moved and not m.still


def motion_lines(actor: str, m: Motion) -> list[str]:
    if read_nothing(m):
        return [f"{actor}: no rank's stack was read, so nothing tells which ranks move"]
    span = (m.samples - 1) * m.every
    lines = [f"{actor}: {m.samples} samples {m.every:g} s apart ({span:g} s):"]
    if m.moved:
        lines.append(f"  moved: {rank_text(m.moved)}")
    lines += [f"  still: {rank_text(ranks)} at {where}" for ranks, where in m.still]
    return lines


def motion_document(m: Motion) -> dict:
    return {
        "samples": m.samples,
        "every": m.every,
        "moved": m.moved,
        "still": [{"ranks": ranks, "where": where} for ranks, where in m.still],
    }


@dataclass(frozen=True)
class Progress:
    """A stack group's ranks and the values an expression has in them, least first."""

    ranks: list[int]
    where: str
    values: list[str]


def number(text: str) -> float:
    """A value as a number to order by; one that is none (an error, a string) orders last."""
    try:
        return float(text)
    except ValueError:
        return math.inf


def by_value(result: wire.StacksResult, values: wire.PeekResult) -> list[Progress]:
    """The stack groups ordered by the least value of the expression among their ranks."""
    of: dict[int, str] = {rank: group.output.strip() for group in values.groups for rank in group.ranks}
    groups = []
    for group in result.groups:
        found = sorted({of[rank] for rank in group.ranks if rank in of}, key=lambda v: (number(v), v))
        groups.append(Progress(list(group.ranks), place(group.threads[0].frames if group.threads else []), found))
    return sorted(groups, key=lambda g: (number(g.values[0]) if g.values else math.inf, g.ranks))


def by_lines(actor: str, expression: str, groups: list[Progress]) -> list[str]:
    lines = [f"{actor} by {expression}, least first:"]
    for g in groups:
        shown = g.values[0] if len(g.values) == 1 else f"{g.values[0]} .. {g.values[-1]}" if g.values else "?"
        lines.append(f"  {expression} = {shown}  {rank_text(g.ranks)} at {g.where}")
    return lines


def by_document(expression: str, groups: list[Progress]) -> dict:
    return {
        "expression": expression,
        "groups": [{"ranks": g.ranks, "where": g.where, "values": g.values} for g in groups],
    }
