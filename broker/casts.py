"""Casts in flight: which ranks still owe an answer, and the answers grouped as they come."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from monarch_pdb import wire


@dataclass
class CastInFlight:
    id: int
    shell: bytes
    ref: int
    actor: str
    deadline: float
    total: int
    pending: dict[int, int] = field(default_factory=dict)
    answers: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    missing: list[list] = field(default_factory=list)
    next_progress: float = 0.0

    @property
    def answered(self) -> int:
        return self.total - len(self.pending) - len(self.missing)

    def answer(self, session_id: int, output: str, outcome: str) -> None:
        rank = self.pending.pop(session_id, None)
        if rank is not None:
            self.answers[(output, outcome)].append(rank)

    def give_up(self, session_id: int, reason: str) -> None:
        rank = self.pending.pop(session_id, None)
        if rank is not None:
            self.missing.append([rank, reason])

    def result(self) -> wire.CastResult:
        """Most common answer first; ranks still pending are named as still running."""
        missing = self.missing + [[rank, "still running"] for rank in self.pending.values()]
        groups = sorted(self.answers.items(), key=lambda item: (-len(item[1]), min(item[1])))
        return wire.CastResult(
            ref=self.ref, actor=self.actor,
            groups=[[output, outcome, sorted(ranks)] for (output, outcome), ranks in groups],
            missing=sorted(missing),
        )
