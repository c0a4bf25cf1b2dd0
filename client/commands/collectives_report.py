"""`collectives`: what each rank's torch.distributed process groups last did, read from every
rank as `peek` reads (`monarch_pdb.rank.process_groups`), folded over ranks; per group, the
first collective the ranks disagree on and the ranks that never entered it come first, as
torch's offline Flight Recorder analyzer names them, but live. Every member of a group that
did not answer is named, with why: "every rank entered" is said only when every member did.
The job's ranks are taken to be torch's global ranks, as the launchers number them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from monarch_pdb import wire
from monarch_pdb.ranks import Selection, counted, format_ranks, parse_ranks, select

RECORDER_OFF = (
    "torch's Flight Recorder is off in this job: with TORCH_FR_BUFFER_SIZE=2000 (gloo) or "
    "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 (NCCL) in its environment each collective is named"
)
NOT_KNOWN = "not known to the broker (it never joined, or its process is gone)"
"""Why a member of a group that was asked gave no answer, where the broker named none."""
OTHERWISE_NUMBERED = "torch numbers the group's ranks otherwise than the job does, so they cannot be named"


@dataclass(frozen=True)
class Where:
    """Where a rank stands in one group: the collectives it entered, and the last one as the
    Flight Recorder has it (empty when it is off)."""

    entered: int
    completed: int = -1
    last: tuple = ()
    """(sequence number, operation, sizes, state, age in seconds) of its last collective."""
    at: str = ""

    def shown(self, ages: str) -> str:
        """As the folded line says it, `ages` standing for how long ago its last collective was
        scheduled (the range over the ranks folded with it): ranks that entered one collective a
        moment apart tell one story."""
        if not self.last:
            text = f"entered #{self.entered}"
        else:
            seq, op, sizes, state, _ = self.last
            done = seq <= self.completed or state == "completed"
            text = f"#{seq} {op} {sizes}, " + ("completed" if done else f"{state} {ages} s ago, not completed")
        return f"{text}; at {self.at}" if self.at else text


@dataclass
class Group:
    """One process group: its members, where those that answered stand, and why the others
    did not."""

    name: str
    size: int
    desc: str = ""
    """What torch calls it beside its name: `world` for the default group."""
    members: list[int] = field(default_factory=list)
    """Its ranks, torch's global ones."""
    ranks: dict[int, Where] = field(default_factory=dict)
    silent: dict[str, list[int]] = field(default_factory=dict)
    """The members asked that gave no snapshot, by why."""
    unasked: list[int] = field(default_factory=list)
    unnamed: int = 0
    """Members that gave no snapshot where torch's numbers are not the job's."""

    def account(self, reasons: dict[int, str], asked: Selection | None) -> None:
        """Name each member without a snapshot: why it gave none (`reasons`, by rank), not
        asked, or not known to the broker."""
        if not set(self.ranks) <= set(self.members):
            self.unnamed = len(self.members) - len(self.ranks)
            return
        for rank in self.members:
            if rank in self.ranks:
                continue
            if rank in reasons:
                self.silent.setdefault(reasons[rank], []).append(rank)
            elif asked is None or asked.ranks is not None and select(asked, [(rank, {})]):
                self.silent.setdefault(NOT_KNOWN, []).append(rank)
            else:
                self.unasked.append(rank)

    def complete(self) -> bool:
        """Whether every member gave its snapshot."""
        return not (self.silent or self.unasked or self.unnamed)

    def verdict(self) -> str:
        """Where the group stands, in one line: who never entered which collective, or that every
        member entered the last; then the members that did not answer, and those not asked."""
        disagree = self.disagreement()
        if disagree is not None:
            seq, op, behind, ahead = disagree
            parts = [f"{ranks_text(behind)} never entered {f'#{seq} {op}'.rstrip()}, which {ranks_text(ahead)} entered"]
        elif self.complete():
            parts = [f"every rank entered #{self.entered_by_all()}"]
        else:
            parts = [f"{ranks_text(list(self.ranks))} entered #{self.entered_by_all()}"]
        parts += [f"{ranks_text(ranks)} did not answer: {why}" for why, ranks in self.silent.items()]
        if self.unnamed:
            parts.append(f"{self.unnamed} did not answer ({OTHERWISE_NUMBERED})")
        if self.unasked:
            parts.append(f"{ranks_text(self.unasked)} not asked")
        return "; ".join(parts)

    def entered_by_all(self) -> int:
        """The number of collectives each rank that answered entered, where they agree."""
        return next(iter(self.ranks.values())).entered

    def disagreement(self) -> tuple[int, str, list[int], list[int]] | None:
        """The first collective some ranks entered and others did not: its number, its
        operation where known, the ranks that never entered it, those that did."""
        entered = {rank: where.entered for rank, where in self.ranks.items()}
        if len(set(entered.values())) < 2:
            return None
        first = min(entered.values()) + 1
        behind = sorted(r for r, n in entered.items() if n < first)
        ahead = sorted(r for r, n in entered.items() if n >= first)
        ops = [w.last[1] for r, w in self.ranks.items() if r in ahead and w.last and w.last[0] == first]
        return first, ops[0] if ops else "", behind, ahead


@dataclass
class Report:
    actor: str
    groups: dict[str, Group] = field(default_factory=dict)
    failed: dict[str, list[int]] = field(default_factory=dict)
    """Ranks whose answer was no snapshot, by what they said."""
    recorded: bool = False
    missing: list[wire.Missing] = field(default_factory=list)


def fold(result: wire.PeekResult, asked: Selection | None = None) -> Report:
    """The snapshots of the ranks `asked` (None: every rank), folded by group."""
    report = Report(result.actor, missing=result.missing)
    for answer in result.groups:
        said = _snapshot(answer.output)
        if "groups" not in said:
            report.failed.setdefault(said.get("error", "no answer"), []).extend(answer.ranks)
            continue
        report.recorded = report.recorded or said.get("recorded", False)
        for rank in answer.ranks:
            for entry in said["groups"]:
                group = report.groups.setdefault(
                    entry["name"],
                    Group(entry["name"], entry["size"], entry.get("desc", ""), parse_ranks(entry["ranks"])),
                )
                last = entry.get("last") or {}
                group.ranks[rank] = Where(
                    entry["entered"],
                    entry.get("completed", -1),
                    (last["seq"], last["op"], last["sizes"], last["state"], last["age"]) if last else (),
                    said.get("at", ""),
                )
    reasons = {m.rank: m.reason for m in result.missing}
    for why, ranks in report.failed.items():
        reasons.update(dict.fromkeys(ranks, why))
    for group in report.groups.values():
        group.account(reasons, asked)
    return report


def _snapshot(output: str) -> dict[str, Any]:
    """A rank's snapshot from what it answered (`wire.Reading.COLLECTIVES`), or why there is none."""
    text = output.strip()
    if text.startswith("***"):
        return {"error": text.removeprefix("*** ")}
    try:
        return json.loads(text)
    except ValueError:
        return {"error": f"not a snapshot: {text[:80]}"}


def ranks_text(ranks: list[int]) -> str:
    return f"ranks[{format_ranks(sorted(ranks))}] ({len(ranks)})"


def text(report: Report) -> str:
    lines = []
    for group in sorted(report.groups.values(), key=lambda g: g.name):
        head = f"{report.actor}: group {group.name} ({group.desc + ', ' if group.desc else ''}{counted(group.size, 'rank')})"
        lines.append(f"{head}: {group.verdict()}")
        alike: dict[str, list[int]] = {}
        for rank, where in group.ranks.items():
            alike.setdefault(where.shown(""), []).append(rank)
        for ranks in sorted(alike.values(), key=min):
            ages = sorted({group.ranks[rank].last[4] for rank in ranks if group.ranks[rank].last})
            span = f"{ages[0]:g}-{ages[-1]:g}" if len(ages) > 1 else "".join(f"{age:g}" for age in ages)
            lines.append(f"  {ranks_text(ranks)}: {group.ranks[ranks[0]].shown(span)}")
    for why, ranks in report.failed.items():
        lines.append(f"{report.actor} {ranks_text(ranks)}: {why}")
    if report.groups and not report.recorded:
        lines.append(RECORDER_OFF)
    named = {rank for group in report.groups.values() for ranks in group.silent.values() for rank in ranks}
    lines += [f"no answer from {report.actor} rank {m.rank}: {m.reason}" for m in report.missing if m.rank not in named]
    return "\n".join(lines) + "\n"


def document(report: Report) -> dict[str, Any]:
    groups = []
    for group in sorted(report.groups.values(), key=lambda g: g.name):
        disagree = group.disagreement()
        groups.append(
            {
                "name": group.name,
                "desc": group.desc,
                "size": group.size,
                "verdict": group.verdict(),
                "every_rank_entered": group.entered_by_all()
                if group.complete() and group.disagreement() is None
                else None,
                "did_not_answer": [
                    {"ranks": ranks, "count": len(ranks), "reason": why} for why, ranks in group.silent.items()
                ]
                + ([{"ranks": [], "count": group.unnamed, "reason": OTHERWISE_NUMBERED}] if group.unnamed else []),
                "not_asked": group.unasked,
                "disagreement": None
                if disagree is None
                else {"seq": disagree[0], "op": disagree[1], "never_entered": disagree[2], "entered": disagree[3]},
                "ranks": {
                    str(rank): {
                        "entered": where.entered,
                        "completed": where.completed,
                        "last": dict(zip(("seq", "op", "sizes", "state", "age"), where.last)) if where.last else None,
                        "at": where.at,
                    }
                    for rank, where in sorted(group.ranks.items())
                },
            }
        )
    return {
        "actor": report.actor,
        "groups": groups,
        "failed": [{"ranks": ranks, "reason": why} for why, ranks in report.failed.items()],
        "recorded": report.recorded,
        "missing": [{"rank": m.rank, "reason": m.reason} for m in report.missing],
    }
