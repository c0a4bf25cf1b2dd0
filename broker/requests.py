"""Every request in flight through one broker, of every kind (casts, stacks, peeks,
breakpoints), in one holder: what happens to all of them at once (a peer is lost, time runs
out, a result is due) is written once here, not once per kind."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from monarch_pdb import ranks, wire
from monarch_pdb.broker.entries import CannotServe
from monarch_pdb.broker.inflight import InFlight, Request
from monarch_pdb.broker.registry import no_match

if TYPE_CHECKING:
    from monarch_pdb.broker.registry import Registry

Send = Callable[[bytes, wire.Message], None]
"""Queue a message for a peer (`Broker.send`)."""
T = TypeVar("T", bound=InFlight)


def unreachable_because(host: str) -> str:
    return f"unreachable (the broker on {host} does not answer)"


class Requests:
    """The tables of requests in flight, one per kind, and the result of each sent once."""

    def __init__(self, registry: Registry, send: Send, settled: Callable[[Request], None]) -> None:
        """`settled` is told of each request whose result went out."""
        self.registry = registry
        self.send = send
        self.settled = settled
        self.tables: list[InFlight] = []

    def add(self, table: T) -> T:
        self.tables.append(table)
        return table

    def __bool__(self) -> bool:
        return any(self.tables)

    def __iter__(self) -> Iterator[tuple[InFlight, Request]]:
        return ((table, request) for table in self.tables for request in table)

    def next_deadline(self) -> float:
        return min((request.deadline for _, request in self), default=math.inf)

    def settle(self, table: InFlight, request: Request, expired: bool = False) -> None:
        """Send a request's result to its shell once it is done (or `expired`)."""
        parts = table.settle(request, expired)
        if parts and request.refusal and request.picked_nothing:
            parts = [wire.Error(text=request.refusal())]
        for part in parts:
            self.send(request.shell, part)
        if parts:
            self.settled(request)

    def expire(self, now: float) -> None:
        for table in self.tables:
            for request in table.overdue(now):
                self.settle(table, request, expired=True)

    def lost(self, peer: bytes, why: str) -> None:
        """`peer` will answer nothing more: each request names what it owed as missing, for `why`."""
        for table in self.tables:
            for request in table:
                request.lost(peer, why)
                self.settle(table, request)

    def skip_unreachable(self, request: Request) -> None:
        """Ask nothing of a broker below that does not answer: its ranks are named at once."""
        for branch in self.registry.table.branches():
            if branch.silent:
                request.lost(branch.identity, unreachable_because(branch.host))

    def selected(self, asker: bytes, job: str, actor: str, selector: str, live: bool = False) -> tuple[list, list]:
        """What a selector picks (`Registry.select`); nothing after telling the asker why."""
        try:
            return self.registry.select(job, actor, selector, live)
        except CannotServe as refusal:
            self.send(asker, wire.Error(text=str(refusal)))
            return [], []

    def nothing_picked(self, job: str, actor: str, selection: ranks.Selection, live: bool = False) -> str:
        """Why a selector evaluated below picked no session (with `live`, no live rank)
        anywhere, as `Registry.select` says."""
        try:
            if live:
                return no_match(actor, selection, self.registry.live_ranks(job, actor), "that runs")
            return no_match(actor, selection, self.registry.actor_sessions(job, actor), "with a session")
        except CannotServe as refusal:
            return str(refusal)
