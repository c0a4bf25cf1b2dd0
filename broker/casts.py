"""Casts in flight: which ranks still owe an answer, and the answers grouped as they come."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.broker.inflight import Request


@dataclass(kw_only=True)
class CastInFlight(Request):
    total: int = 0
    pending: dict[int, int] = field(default_factory=dict)
    """Session id -> rank, for each session whose answer is awaited."""
    answers: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    next_progress: float = 0.0
    RESULT = wire.CastResult

    @property
    def done(self) -> bool:
        return not self.pending

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

    def groups(self) -> list[tuple[list, int]]:
        return [([output, outcome, sorted(ranks)], len(output) + 8 * len(ranks))
                for (output, outcome), ranks in self.answers.items()]

    def unanswered(self) -> list[list]:
        return [[rank, "still running"] for rank in self.pending.values()]
