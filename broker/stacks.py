"""Stack requests in flight: which processes (or brokers below) still owe their ranks' stacks,
and the stacks merged as they come, identical ones sharing one entry however many processes
sent them, their ranks merged as runs.

The handlers of its messages live here, one for each peer that takes part: the shell that asks,
the broker above that asks for ranks below us, the rank processes that answer, and the brokers below
that answer for theirs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from monarch_pdb import ranks, wire
from monarch_pdb.broker.entries import CannotServe
from monarch_pdb.broker.host_reads import Asked, OutsideReads
from monarch_pdb.broker.inflight import AskedOfEach, InFlight, below_timeout
from monarch_pdb.broker.registry import Picked
from monarch_pdb.broker.routes import Routes
from monarch_pdb.broker.upstream import UPSTREAM
from monarch_pdb.ranks import RankSet

if TYPE_CHECKING:
    from monarch_pdb.broker.requests import Requests

READ_OUTSIDE_AFTER = 1.0
"""Seconds a process of this host gets to answer `stacks` before it is read from outside."""


@dataclass(kw_only=True)
class StacksInFlight(AskedOfEach[wire.StackGroup]):
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
    read_outside_at: float = math.inf
    """When the processes of this host that have not answered yet are read from outside."""
    asked: Asked = Asked(every_thread=False, native=False, locals=False)
    RESULT = wire.StacksResult
    LEFT_OUT = "its process sent no stack for it"

    @property
    def picked_nothing(self) -> bool:
        return not self.merged and not self.missing

    def pick_there(self, branch: bytes) -> None:
        """`branch` evaluates the selector and sends the stacks of the live ranks it picks."""
        self.waiting[branch] = []
        self.picking[branch] = []

    def report(self, peer: bytes, groups: list, missing: Iterable[wire.Missing] = (), more: bool = False) -> None:
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
        key = (group.outside, *(thread.key() for thread in group.threads))
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
        return [
            wire.StackGroup(
                threads,
                sets[0] if len(sets) == 1 else RankSet.joined(sets),
                [
                    wire.LocalValue(name, value, sorted(ranks))
                    for (name, value), ranks in self.locals.get(key, {}).items()
                ],
                outside=key[0],
            )
            for key, (threads, sets) in self.merged.items()
        ]

    def weight(self, group: wire.StackGroup) -> int:
        return (
            8 * len(group.ranks.spans)
            + sum(len(f.file) + len(f.function) + 12 for t in group.threads for f in t.frames)
            + sum(len(v.name) + len(v.value) + 8 * len(v.ranks) for v in group.locals)
        )

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
        return [
            wire.Missing(rank, "no answer in time")
            for peer, ranks in self.waiting.items()
            for rank in (self.still_picked(peer) if peer in self.picking else ranks)
        ]


class StackRequests:
    """The stack requests in flight through one broker, and the handlers of their messages."""

    def __init__(self, requests: Requests, part_size: int, read_timeout: float) -> None:
        self.requests = requests
        self.registry = requests.registry
        self.send = requests.send
        self.table: InFlight[StacksInFlight] = requests.add(InFlight(part_size=part_size))
        self.outside = OutsideReads(read_timeout)

    def next_outside_read(self) -> float:
        return min((request.read_outside_at for request in self.table), default=math.inf)

    def read_outside(self, now: float) -> None:
        """The processes of this host that have not answered a request a moment after it was
        asked are read from outside (their rank processes cannot run: C code holds the GIL), and those
        of a request for native frames at once (no rank process sees them)."""
        for request in self.table:
            if request.read_outside_at > now:
                continue
            request.read_outside_at = math.inf
            here = [(identity, pid) for identity in request.waiting if (pid := self.pid_here(identity))]
            if here:
                self.outside.start(request.id, here, request.asked)

    def pid_here(self, identity: bytes) -> int:
        """The pid of a peer that is a rank process on this host, which this broker can read
        from outside; 0 for any other."""
        peer = self.registry.table.peers.get(identity)
        if peer is None or peer.role != wire.Role.RANK or peer.host != self.registry.table.host:
            return 0
        return peer.pid

    def take_outside(self) -> None:
        """Each process read from outside answers for the ranks it still owes: with the stack
        read, marked as read from outside, or with why it could not be read."""
        for done in self.outside.taken():
            request = self.table.get(done.ref)
            if request is None or done.peer not in request.waiting:
                continue  # settled, or its rank process answered after all
            owed = RankSet.of(request.waiting[done.peer])
            if done.found is not None:
                values = [wire.LocalValue(name, value, list(owed)) for name, value in done.found.locals.items()]
                request.report(done.peer, [wire.StackGroup(done.found.threads, owed, values, outside=True)])
            else:
                asked = "" if request.asked.native else "its process sent nothing in time, and "
                why = f"{asked}reading it from outside failed: {done.why}"
                request.report(done.peer, [], [wire.Missing(rank, why) for rank in owed])
            self.requests.settle(self.table, request)

    def routes(self) -> Routes:
        return Routes(
            shell={wire.Stacks: self.on_stacks},
            parent={wire.TakeStacks: self.on_take_stacks},
            rank={wire.StackReport: self.on_stack_report},
            branch={wire.StacksResult: self.on_stacks_result},
        )

    def on_stacks(self, shell: bytes, msg: wire.Stacks) -> None:
        """From a shell: the stacks of the live ranks its selector picks."""
        try:
            picked = self.registry.pick_live(msg.job, msg.actor, msg.selector)
        except CannotServe as refusal:
            self.send(shell, wire.Error(text=str(refusal)))
            return
        self.start(shell, msg, picked)

    def on_take_stacks(self, parent: bytes, msg: wire.TakeStacks) -> None:
        """From the broker above: the stacks of the ranks it names here, or of the live ranks
        its selector picks here; a selector that picks none here is answered with no groups."""
        if msg.selector:
            try:
                picked = self.registry.pick_live(msg.job, msg.actor, msg.selector)
            except CannotServe:
                picked = Picked(msg.job, [], [], {}, ranks.Selection())
        else:
            chosen, absent = self.registry.pick(msg.job, msg.actor, list(msg.ranks), live=True)
            picked = Picked(msg.job, chosen, absent, {}, ranks.Selection())
        self.start(parent, msg, picked)

    def start(self, shell: bytes, msg: wire.Stacks | wire.TakeStacks, picked: Picked) -> None:
        """Ask each process (or broker below) for its picked ranks' stacks (and their locals),
        merged as they come: a broker below that evaluates the selector is sent the selector.
        The processes of this host are read from outside instead when native frames are asked
        for. A shell whose selector picked nothing anywhere is told why, as when it picks
        nothing here."""
        job, actor = picked.job, msg.actor
        now = time.monotonic()
        request = self.table.open(
            StacksInFlight(
                shell=shell,
                ref=msg.ref,
                actor=actor,
                deadline=now + msg.timeout,
                missing=picked.absent,
                read_outside_at=now + (0 if msg.native else min(READ_OUTSIDE_AFTER, msg.timeout / 2)),
                asked=Asked(msg.threads == wire.Threads.ALL, msg.native, msg.locals, now + msg.timeout),
            )
        )
        for live in picked.sessions:
            request.waiting.setdefault(live.peer, []).append(live.rank)
        if picked.below:
            branches = {peer.identity: peer for peer in self.registry.table.branches()}
            request.picked_there = lambda branch: self.registry.picked_live_below(
                branches[branch], job, actor, picked.selection
            )
            if shell != UPSTREAM:
                request.refusal = lambda: self.requests.nothing_picked(job, actor, picked.selection, live=True)
            for branch in picked.below:
                request.pick_there(branch)
        self.requests.skip_unreachable(request)
        for peer, asked in request.waiting.items():
            there = peer in request.picking
            if msg.native and self.pid_here(peer):
                continue
            self.send(
                peer,
                wire.TakeStacks(
                    ref=request.id,
                    actor=actor,
                    ranks=RankSet.of(asked),
                    threads=msg.threads,
                    job=job,
                    timeout=below_timeout(msg.timeout),
                    locals=msg.locals,
                    selector=msg.selector if there else "",
                    native=msg.native,
                ),
            )
        self.requests.settle(self.table, request)

    def on_stack_report(self, rank_process: bytes, msg: wire.StackReport) -> None:
        request = self.table.get(msg.ref)
        if request is not None and rank_process in request.waiting:
            request.report(rank_process, msg.groups)
            self.requests.settle(self.table, request)

    def on_stacks_result(self, branch: bytes, msg: wire.StacksResult) -> None:
        request = self.table.get(msg.ref)
        if request is not None and branch in request.waiting:
            request.report(branch, msg.groups, msg.missing, msg.more)
            self.requests.settle(self.table, request)
