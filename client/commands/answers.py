"""A cast's answers as the user reads them: grouped by identical output, or raw per rank."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from monarch_pdb import wire
from monarch_pdb.client.commands.numbers import Summary, summarize
from monarch_pdb.client.escapes import visible
from monarch_pdb.ranks import format_ranks

NUMBER_LINES = 16
"""Numeric answers take one line per distinct value; past this many, only the most common
values and the notable ones (extremes, NaN/Inf, outliers) are shown, and the rest counted."""
OUTCOMES: dict[str, str] = {
    wire.Ending.FINISHED: "(its endpoint returned)",
    wire.Ending.QUIT: "(quit: its endpoint call ends with BdbQuit)",
    wire.Ending.CONTINUED: "(continued; no longer traced)",
}


def shortened(text: str, width: int) -> str:
    """A comma-separated set (ranks, hosts) cut after its last item that fits in `width`."""
    return text if len(text) <= width else text[:width].rsplit(",", 1)[0] + ",..."


def rank_set(actor: str, ranks: Collection[int]) -> str:
    return f"{actor} ranks[{format_ranks(ranks)}] ({len(ranks)})"


def _body(output: str, outcome: str) -> str:
    note = OUTCOMES.get(outcome, f"(its endpoint {outcome})" if outcome else "")
    text = visible(output if output.endswith("\n") or not output else output + "\n")
    if not text and not note:
        return "(no output)\n"
    return text + (note + "\n" if note else "")


def grouped(result: wire.CastResult | wire.PeekResult) -> str:
    summary = summarize(result.groups)
    groups = result.groups if summary is None else shown_groups(result.groups, summary)
    blocks = [rank_set(result.actor, g.ranks) + "\n" + _body(g.output, g.outcome) for g in groups]
    if summary is not None:
        hidden = sum(len(g.ranks) for g in result.groups) - sum(len(g.ranks) for g in groups)
        more = f"... {hidden} more ranks with other values ('set cast_output raw' shows each)\n" if hidden else ""
        blocks.append(more + summary.line() + "\n")
    return "".join(blocks) + missing_lines(result)


def shown_groups(groups: list[wire.CastGroup], summary: Summary) -> list[wire.CastGroup]:
    """Of many distinct numbers, the most common values and the notable ones (the extremes,
    NaN/Inf, outliers, answers that are no number); all of them when they are few."""
    notable = set(summary.nonfinite) | set(summary.outliers) | set(summary.other)
    notable |= {extreme[1] for extreme in (summary.minimum, summary.maximum) if extreme is not None}
    return [g for index, g in enumerate(groups) if index < NUMBER_LINES or notable.intersection(g.ranks)]


def raw(result: wire.CastResult | wire.PeekResult) -> str:
    per_rank = sorted((rank, g.output, g.outcome) for g in result.groups for rank in g.ranks)
    lines = [f"[{rank}] {line}" for rank, output, outcome in per_rank for line in _body(output, outcome).splitlines()]
    return "".join(line + "\n" for line in lines) + missing_lines(result)


def missing_lines(result: wire.CastResult | wire.StacksResult | wire.PeekResult) -> str:
    """One line per reason naming the ranks that did not answer."""
    by_reason: dict[str, list[int]] = {}
    for m in result.missing:
        by_reason.setdefault(m.reason, []).append(m.rank)
    return "".join(f"no answer from {rank_set(result.actor, r)}: {why}\n" for why, r in by_reason.items())


def document(result: wire.CastResult | wire.PeekResult) -> dict:
    """The JSON form of a cast in docs/scripts.md (or a peek): groups most common first, then who did
    not answer."""
    doc: dict[str, Any] = {
        "actor": result.actor,
        "groups": [
            {"ranks": list(g.ranks), "output": g.output, "outcome": g.outcome or "paused"} for g in result.groups
        ],
        "missing": [{"rank": m.rank, "reason": m.reason} for m in result.missing],
    }
    summary = summarize(result.groups)
    if summary is not None:
        doc["numbers"] = summary.document()
    return doc
