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

    def result(self, part_size: int) -> list[wire.CastResult]:
        """Most common answer first, in parts of about `part_size` characters of output;
        ranks still pending are named as still running."""
        missing = self.missing + [[rank, "still running"] for rank in self.pending.values()]
        ordered = sorted(self.answers.items(), key=lambda item: (-len(item[1]), min(item[1])))
        parts: list[list] = [[]]
        size = 0
        for (output, outcome), ranks in ordered:
            if parts[-1] and size + len(output) > part_size:
                parts.append([])
                size = 0
            parts[-1].append([output, outcome, sorted(ranks)])
            size += len(output) + 8 * len(ranks)
        last = len(parts) - 1
        return [
            wire.CastResult(ref=self.ref, actor=self.actor, groups=groups,
                            missing=sorted(missing) if n == last else [], more=n != last)
            for n, groups in enumerate(parts)
        ]
