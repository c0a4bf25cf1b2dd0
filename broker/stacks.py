"""Stack requests in flight: which processes (or brokers below) still owe their ranks' stacks,
and the stacks merged as they come, identical ones sharing one entry however many processes
sent them, their ranks merged as runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.broker.inflight import AskedOfEach
from monarch_pdb.ranks import RankSet


@dataclass(kw_only=True)
class StacksInFlight(AskedOfEach):
    merged: dict[tuple, tuple[list[wire.ThreadStack], list[RankSet]]] = field(default_factory=dict)
    """For each distinct stack, its threads as they first came, and the rank sets that have it."""
    locals: dict[tuple, dict[tuple[str, str], list[int]]] = field(default_factory=dict)
    """For each merged stack, each (name, value) of its locals and the ranks that hold it."""
    picking: dict[bytes, list[RankSet]] = field(default_factory=dict)
    """The brokers below that evaluate the selector (owing whichever live ranks it picks there),
    and the ranks each sent so far."""
    picked_there: Callable[[bytes], list[int]] = lambda branch: []
    """The ranks a broker below picks with the selector, from what it told us: looked up only
    when it fails us, to name them."""
    RESULT = wire.StacksResult
    LEFT_OUT = "its process sent no stack for it"

    @property
    def picked_nothing(self) -> bool:
        return not self.merged and not self.missing

    def pick_there(self, branch: bytes) -> None:
        """`branch` evaluates the selector and sends the stacks of the live ranks it picks."""
        self.waiting[branch] = []
        self.picking[branch] = []

    def report(self, peer: bytes, groups: list, missing: list[wire.Missing] = (), more: bool = False) -> None:
        if peer not in self.picking:
            super().report(peer, groups, missing, more)
            return
        for group in groups:
            if group.ranks:
                self.take(group, group.ranks)
                self.picking[peer].append(group.ranks)
        self.missing += missing
        if not more:
            self.waiting.pop(peer, None)
            del self.picking[peer]

    def take(self, group: wire.StackGroup, mine: RankSet) -> None:
        if not mine:
            return
        key = tuple(thread.key() for thread in group.threads)
        self.merged.setdefault(key, (group.threads, []))[1].append(mine)
        if group.locals:
            self.fold_locals(key, group.locals, set(mine))

    def fold_locals(self, key: tuple, values: list[wire.LocalValue], mine: set[int]) -> None:
        """A group's locals (`stacks --locals`) joined to those of the same stack from other
        processes: a value that several hold is one entry with all their ranks."""
        folded = self.locals.setdefault(key, {})
        for value in values:
            ranks = [r for r in value.ranks if r in mine]
            if ranks:
                folded.setdefault((value.name, value.value), []).extend(ranks)

    def groups(self) -> list[wire.StackGroup]:
        return [wire.StackGroup(threads, sets[0] if len(sets) == 1 else RankSet.joined(sets),
                                [wire.LocalValue(name, value, sorted(ranks))
                                 for (name, value), ranks in self.locals.get(key, {}).items()])
                for key, (threads, sets) in self.merged.items()]

    def weight(self, group: wire.StackGroup) -> int:
        return (8 * len(group.ranks.spans) + sum(len(f.file) + len(f.function) + 12 for t in group.threads for f in t.frames)
                + sum(len(v.name) + len(v.value) + 8 * len(v.ranks) for v in group.locals))

    def still_picked(self, branch: bytes) -> list[int]:
        """The ranks a broker below that evaluates the selector has sent no stack for yet."""
        answered = set().union(*self.picking.get(branch, ()))
        return [rank for rank in self.picked_there(branch) if rank not in answered]

    def lost(self, peer: bytes, reason: str = wire.Ending.LOST) -> None:
        if peer in self.picking:
            self.missing += [wire.Missing(rank, reason) for rank in self.still_picked(peer)]
            self.waiting.pop(peer, None)
            del self.picking[peer]
            return
        super().lost(peer, reason)

    def unanswered(self) -> list[wire.Missing]:
        return [wire.Missing(rank, "no answer in time") for peer, ranks in self.waiting.items()
                for rank in (self.still_picked(peer) if peer in self.picking else ranks)]
