"""Stack requests in flight: which processes still owe their ranks' stacks, and the stacks
merged as they come, identical ones sharing one entry however many processes sent them."""

from __future__ import annotations

from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.broker.inflight import AskedOfEach


@dataclass(kw_only=True)
class StacksInFlight(AskedOfEach):
    merged: dict[tuple, wire.StackGroup] = field(default_factory=dict)
    locals: dict[tuple, dict[tuple[str, str], list[int]]] = field(default_factory=dict)
    """For each merged stack, each (name, value) of its locals and the ranks that hold it."""
    RESULT = wire.StacksResult
    LEFT_OUT = "its process sent no stack for it"

    def take(self, group: wire.StackGroup, mine: list[int]) -> None:
        key = tuple(thread.key() for thread in group.threads)
        if key in self.merged:
            self.merged[key].ranks.extend(mine)
        elif mine:
            self.merged[key] = wire.StackGroup(group.threads, mine)
        if mine and group.locals:
            self.fold_locals(key, group.locals, set(mine))

    def fold_locals(self, key: tuple, values: list[wire.LocalValue], mine: set[int]) -> None:
        """A group's locals (`stacks --locals`) joined to those of the same stack from other
        processes: a value that several hold is one entry with all their ranks."""
        folded = self.locals.setdefault(key, {})
        for value in values:
            ranks = [r for r in value.ranks if r in mine]
            if ranks:
                folded.setdefault((value.name, value.value), []).extend(ranks)

    def groups(self) -> list[tuple[wire.StackGroup, int]]:
        out = []
        for key, group in self.merged.items():
            values = [wire.LocalValue(name, value, sorted(ranks)) for (name, value), ranks in self.locals.get(key, {}).items()]
            weight = (8 * len(group.ranks) + sum(len(f.file) + len(f.function) + 12 for t in group.threads for f in t.frames)
                      + sum(len(v.name) + len(v.value) + 8 * len(v.ranks) for v in values))
            out.append((wire.StackGroup(group.threads, sorted(group.ranks), values), weight))
        return out

    def unanswered(self) -> list[wire.Missing]:
        return [wire.Missing(rank, "no answer in time") for ranks in self.waiting.values() for rank in ranks]
