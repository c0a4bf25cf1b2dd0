"""The broker's events, folded: what happens to many ranks at once is one event.

A storm of 16,384 ranks stopping at one line, or a broker below telling of 256 stops in one
message, is a handful of events instead of one per rank. Each pass of the poll loop folds what
it heard and publishes the result (`take`); the shell folds what it receives once more into lines.
Events are numbered when published, and the latest are kept for a shell that missed some (the
ZeroMQ guide's Clone pattern: numbered updates and catch-up).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.ranks import format_ranks

HISTORY = 16384


@dataclass
class Fold:
    """Ranks of one actor that one thing happened to, in one pass of the loop."""

    kind: wire.EventKind
    job: str
    actor: str
    where: str
    detail: str
    ranks: list[int] = field(default_factory=list)
    count: int = 0
    """How many ranks a broker below had, for an event about a broker."""


@dataclass
class EventLog:
    seq: int = 0
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    """The last events as `Event.row()` records, a third of an Event's size."""
    pending: list[Fold] = field(default_factory=list)
    open: dict[tuple, int] = field(default_factory=dict)
    """For each kind of event, the pending fold that the next rank of that kind may join."""
    last_of: dict[tuple[str, str, int], int] = field(default_factory=dict)
    """The pending fold that each rank is last in."""

    def add(self, kind: wire.EventKind, job: str, actor: str, rank: int, where: str = "", detail: str = "") -> None:
        """A rank's event joins the pending one of its kind, unless the rank is in a later one:
        what each rank went through is told in order."""
        key = (kind, job, actor, where, detail)
        at = self.open.get(key)
        if at is None or self.last_of.get((job, actor, rank), -1) > at:
            at = self.open[key] = len(self.pending)
            self.pending.append(Fold(kind, job, actor, where, detail))
        self.pending[at].ranks.append(rank)
        self.last_of[(job, actor, rank)] = at

    def add_broker(self, kind: wire.EventKind, host: str, ranks: int, detail: str = "") -> None:
        """An event about a broker below and the `ranks` it had."""
        self.pending.append(Fold(kind, "", "", host, detail, count=ranks))
        self.open.clear()

    def take(self) -> list[wire.Event]:
        """The pending events, numbered and kept; none pending afterwards."""
        events = []
        for fold in self.pending:
            self.seq += 1
            ranks = sorted(set(fold.ranks))
            events.append(
                wire.Event(
                    seq=self.seq,
                    kind=fold.kind,
                    job=fold.job,
                    actor=fold.actor,
                    ranks=format_ranks(ranks),
                    count=len(ranks) or fold.count,
                    where=fold.where,
                    detail=fold.detail,
                )
            )
            self.history.append(events[-1].row())
        self.pending, self.open, self.last_of = [], {}, {}
        return events

    def since(self, seq: int) -> list[wire.EventRow]:
        return [row for row in self.history if row.seq > seq]
