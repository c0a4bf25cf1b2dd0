"""Stack requests in flight: which processes still owe their ranks' stacks, and the stacks
merged as they come, identical ones sharing one entry however many processes sent them."""

from __future__ import annotations

from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.broker.inflight import Request


@dataclass(kw_only=True)
class StacksInFlight(Request):
    waiting: dict[bytes, list[int]] = field(default_factory=dict)
    """The ranks asked of each process that has not answered yet."""
    merged: dict[tuple, wire.StackGroup] = field(default_factory=dict)
    RESULT = wire.StacksResult

    @property
    def done(self) -> bool:
        return not self.waiting

    def report(self, peer: bytes, groups: list[wire.StackGroup], missing: list[wire.Missing] = (),
               more: bool = False) -> None:
        """One process's stacks (or a broker below's, merged there, with the ranks it has none
        for, perhaps in parts: `more`); only the ranks asked of it count."""
        asked = set(self.waiting.pop(peer, ()))
        for group in groups:
            key = tuple(thread.key() for thread in group.threads)
            mine = [r for r in group.ranks if r in asked]
            asked.difference_update(mine)
            if key in self.merged:
                self.merged[key].ranks.extend(mine)
            elif mine:
                self.merged[key] = wire.StackGroup(group.threads, mine)
        for gone in missing:
            if gone.rank in asked:
                asked.discard(gone.rank)
                self.missing.append(gone)
        if more:
            self.waiting[peer] = sorted(asked)
        else:
            self.missing += [wire.Missing(rank, "its process sent no stack for it") for rank in sorted(asked)]

    def lost(self, peer: bytes, reason: str = wire.Ending.LOST) -> None:
        self.missing += [wire.Missing(rank, reason) for rank in self.waiting.pop(peer, ())]

    def groups(self) -> list[tuple[wire.StackGroup, int]]:
        return [(wire.StackGroup(group.threads, sorted(group.ranks)),
                 8 * len(group.ranks) + sum(len(f.file) + len(f.function) + 12 for t in group.threads for f in t.frames))
                for group in self.merged.values()]

    def unanswered(self) -> list[wire.Missing]:
        return [wire.Missing(rank, "no answer in time") for ranks in self.waiting.values() for rank in ranks]
