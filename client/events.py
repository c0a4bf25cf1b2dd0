"""Events as one line each, folded: sixteen ranks stopping at one line make one line."""

from __future__ import annotations

from collections import defaultdict

from monarch_pdb import wire
from monarch_pdb.ranks import format_ranks

PHRASES = {
    "breakpoint": "stopped at {where}",
    "post-mortem": "entered post-mortem at {where}: {detail}",
    "ended": "finished",
    "lost": "was lost (its process stopped answering)",
}


def who(actor: str, ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"{actor} {ranks[0]}"
    return f"{actor} ranks[{format_ranks(ranks)}] ({len(ranks)})"


def describe_events(events: list[wire.Event]) -> list[str]:
    """One line per (what happened, where) for each actor, in the order first seen."""
    groups: dict[tuple[str, str, str, str, str], list[int]] = defaultdict(list)
    for e in events:
        if e.kind in PHRASES:
            detail = e.detail if e.kind == "post-mortem" else ""
            groups[(e.job, e.actor, e.kind, e.where, detail)].append(e.rank)
    several_jobs = len({key[0] for key in groups}) > 1
    lines = []
    for (job, actor, kind, where, detail), ranks in groups.items():
        name = f"{job}:{actor}" if several_jobs else actor
        lines.append(f"{who(name, sorted(set(ranks)))} {PHRASES[kind].format(where=where, detail=detail)}")
    return lines
