"""Requests in flight, casts, stack requests and peeks alike: each waits for its ranks' answers
until it has them all or its deadline passes, and then its result goes to the shell that asked,
once, in parts that fit a message."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, ClassVar, Generic, TypeVar

from monarch_pdb import wire
from monarch_pdb.ranks import RankSet

BELOW_MARGIN = 0.1
"""A broker below gets this much less of a request's time (at most half a second), so that
its answer, late ranks named, arrives before ours is due."""


RUNS = attrgetter("ranks.spans")
"""A group's ranks as runs: groups share no rank, so these order them by their lowest."""
HOW_MANY = attrgetter("ranks.count")


def below_timeout(timeout: float) -> float:
    return timeout - min(0.5, timeout * BELOW_MARGIN)


G = TypeVar("G")
"""The kind of group a request's answers are folded into: wire.CastGroup, StackGroup."""

PICKED_THERE = None
"""What a broker below owes when a request's selector is evaluated there: the ranks it picks."""


@dataclass(kw_only=True)
class Request(Generic[G]):
    """What every request in flight has; a kind says when it is done and what it found."""

    shell: bytes
    ref: int
    """The shell's own number for the request, given back with the result."""
    actor: str
    deadline: float
    missing: list[wire.Missing] = field(default_factory=list)
    """Each rank that will give no answer, and why."""
    id: int = 0
    refusal: Callable[[], str] | None = None
    """Why nothing was picked, for a shell whose selector was evaluated below and picked
    nothing there either (the shell is told this instead of an empty result)."""
    RESULT: ClassVar[type]
    """The message type that carries the result: wire.CastResult, StacksResult, PeekResult."""

    @property
    def done(self) -> bool:
        raise NotImplementedError

    @property
    def picked_nothing(self) -> bool:
        """Nothing answered and nothing is missing: the selector picked no rank anywhere."""
        return False

    def groups(self) -> list[G]:
        """A group for each distinct answer."""
        raise NotImplementedError

    def weight(self, group: G) -> int:
        """About the bytes a group takes in a message."""
        raise NotImplementedError

    def unanswered(self) -> list[wire.Missing]:
        """Each rank still owing an answer, and why."""
        raise NotImplementedError

    def lost(self, peer: bytes, reason: str) -> None:
        """`peer` is gone: the ranks it owed an answer are missing, for `reason`."""
        raise NotImplementedError

    def result(self, part_size: int) -> list[wire.Message]:
        """Most common answer first, in parts of about `part_size` bytes; the last part names
        the ranks without an answer and has `more` false."""
        ordered = self.groups()
        # Two stable sorts on keys read in C, not a key made in Python for each of a million
        # answers: the lowest rank first, then the most ranks first.
        ordered.sort(key=RUNS)
        ordered.sort(key=HOW_MANY, reverse=True)
        missing = sorted(self.missing + self.unanswered(), key=lambda m: (m.rank, m.reason))
        return [
            self.RESULT(ref=self.ref, actor=self.actor, groups=groups, missing=[] if more else missing, more=more)
            for groups, more in in_parts(zip(ordered, map(self.weight, ordered)), part_size)
        ]


@dataclass(kw_only=True)
class AskedOfEach(Request[G]):
    """A request asked of each process (or broker below) that runs some of its ranks, each
    answering for its own, perhaps in parts: stacks and peeks alike."""

    waiting: dict[bytes, list[int]] = field(default_factory=dict)
    """The ranks asked of each process or broker below that has not answered yet."""
    LEFT_OUT: ClassVar[str]
    """Why a rank asked of a peer that answered without it has no answer."""

    @property
    def done(self) -> bool:
        return not self.waiting

    def report(self, peer: bytes, groups: list, missing: Iterable[wire.Missing] = (), more: bool = False) -> None:
        """A peer's groups (a broker below's already merged, with the ranks it has none for,
        perhaps in parts: `more`); only the ranks asked of it count."""
        asked = set(self.waiting.pop(peer, ()))
        for group in groups:
            mine = RankSet.of(r for r in group.ranks if r in asked)
            asked.difference_update(mine)
            self.take(group, mine)
        for gone in missing:
            if gone.rank in asked:
                asked.discard(gone.rank)
                self.missing.append(gone)
        if more:
            self.waiting[peer] = sorted(asked)
        else:
            self.missing += [wire.Missing(rank, self.LEFT_OUT) for rank in sorted(asked)]

    def take(self, group, mine: RankSet) -> None:
        """Fold in one group a peer sent, for `mine`, those of its ranks it was asked for."""
        raise NotImplementedError

    def lost(self, peer: bytes, reason: str = wire.Ending.LOST) -> None:
        self.missing += [wire.Missing(rank, reason) for rank in self.waiting.pop(peer, ())]


T = TypeVar("T")


def in_parts(weighed: Iterable[tuple[T, int]], part_size: int) -> Iterator[tuple[list[T], bool]]:
    """The items, in order, cut into parts of about `part_size` bytes each (by their weights),
    each with whether more follow; always at least one part, perhaps empty. A part is cut as
    the items come, so that items made on demand are held one part at a time."""
    part: list[T] = []
    size = 0
    for item, weight in weighed:
        if part and size + weight > part_size:
            yield part, True
            part, size = [], 0
        part.append(item)
        size += weight
    yield part, False


def row_parts(rows: Iterable[wire.SessionRow], part_size: int) -> Iterator[tuple[list[wire.SessionRow], bool]]:
    """Rows of a list in parts, as `in_parts` cuts them."""
    return in_parts(((row, row_weight(row)) for row in rows), part_size)


ROW_TEXTS = attrgetter("job", "actor", "host", "function", "filename", "state", "instance")
ROW_FIXED = 8 * len(wire.SessionRow.__slots__) + 8 * 4
"""A few bytes for each field, and eight for each number and the coordinates' map."""


def row_weight(row: wire.SessionRow) -> int:
    """About the bytes a list row takes in a message: its strings, and a few for each field
    (131,072 rows are weighed for each `list` at the root)."""
    return sum(map(len, ROW_TEXTS(row))) + ROW_FIXED + 16 * len(row.coords)


R = TypeVar("R", bound=Request[Any])


class InFlight(Generic[R]):
    """The open requests of one kind, by id."""

    def __init__(self, part_size: int) -> None:
        self.part_size = part_size
        self.requests: dict[int, R] = {}
        self.next_id = secrets.randbits(40)
        """Ids start at random: an answer from a broker below to a request of ours before a
        restart (its link sends again what went unanswered) never settles one of the new."""

    def open(self, request: R) -> R:
        request.id, self.next_id = self.next_id, self.next_id + 1
        self.requests[request.id] = request
        return request

    def get(self, request_id: int) -> R | None:
        return self.requests.get(request_id)

    def __contains__(self, request_id: int) -> bool:
        return request_id in self.requests

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[R]:
        return iter(list(self.requests.values()))

    def settle(self, request: R, expired: bool = False) -> list[wire.Message]:
        """The result for the shell once the request is done (or `expired`), and never again;
        nothing before."""
        if request.id not in self.requests or not (request.done or expired):
            return []
        del self.requests[request.id]
        return request.result(self.part_size)

    def overdue(self, now: float) -> list[R]:
        return [request for request in self.requests.values() if now >= request.deadline]
