"""A stall says so by itself: the top broker takes the merged stacks of every actor's running
ranks a few times per `stall_after` (as a shell's `stacks` would, through the tree), and when
some ranks' stacks have stayed the same that long it tells the shells once, folded, with how
long they have stood there and where the actor's other ranks are: "train ranks[3] has been at
train.py:41 next_batch for 900 s; ranks[0-2] wait in all_reduce".

It looks whether or not anyone watches, so that a shell or an editor that connects to a job
stuck for a quarter of an hour hears how long, not how long since it connected; it tells only
while one is connected (someone to tell), each of them once. It never looks at a paused rank: a
session stands still on purpose. Its requests are a shell's, sent on behalf of the peer STALLS,
whose results the server hands here instead of to a socket.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.broker.events import EventLog
from monarch_pdb.broker.registry import Registry
from monarch_pdb.places import place
from monarch_pdb.ranks import format_ranks

STALLS = b"\0stalls"
"""The peer the watcher's requests are sent for: no socket has this identity."""
SAMPLES_PER_STALL = 4
"""Stacks taken per `stall_after`: a stall is told at most a quarter of it late."""
SAMPLE_TIMEOUT = 5.0


@dataclass
class Still:
    """A rank's stack as last seen, and since when it has been so."""

    stack: tuple
    place: str
    call: str
    since: float


@dataclass
class Sample:
    job: str
    actor: str
    running: set[int]
    at: float
    groups: list[wire.StackGroup] = field(default_factory=list)


def places(group: wire.StackGroup) -> tuple[str, str]:
    """A group's place in its program (`train.py:41 next_batch`), and the function of its
    innermost Python frame: the call it waits in, when that is a library's."""
    frames = group.threads[0].frames if group.threads else []
    python = [f for f in frames if not f.native]
    return place(frames), python[-1].function if python else ""


def elsewhere(ranks: list[int], at: str, call: str) -> str:
    """`ranks[0-2] wait in all_reduce` where their innermost call is a library's, else
    `ranks[0-2] are at train.py:30 step`."""
    if call and not at.endswith(f" {call}"):
        return f"ranks[{format_ranks(ranks)}] wait in {call}"
    return f"ranks[{format_ranks(ranks)}] are at {at}"


class Stalls:
    def __init__(
        self, registry: Registry, events: EventLog, ask: Callable[[bytes, wire.Stacks], None], stall_after: float
    ) -> None:
        self.registry = registry
        self.events = events
        self.ask = ask
        """Sends a `wire.Stacks` as if from a shell: the StackRequests handler's `on_stacks`."""
        self.stall_after = stall_after
        self.next_at = time.monotonic() + stall_after / SAMPLES_PER_STALL
        self.refs = itertools.count(1)
        self.asked: dict[int, Sample] = {}
        self.seen: dict[tuple[str, str], dict[int, Still]] = {}
        self.told: dict[tuple[str, str], set[int]] = {}
        """The ranks of each actor already told of, until they move or nobody watches."""
        self.watching = False

    def tick(self, now: float, watching: bool) -> None:
        """Take the stacks of every actor's running ranks, when it is time."""
        if not self.stall_after:
            return
        self.watching = watching
        if not watching:
            self.told.clear()  # whoever connects next hears of every stall
        if now < self.next_at:
            return
        period = self.stall_after / SAMPLES_PER_STALL
        self.next_at = now + period
        self.asked = {ref: s for ref, s in self.asked.items() if now - s.at < SAMPLE_TIMEOUT + self.stall_after}
        running = self.registry.running()
        for key in set(self.seen) - set(running):
            del self.seen[key]
            self.told.pop(key, None)
        for (job, actor), ranks in running.items():
            ref = next(self.refs)
            self.asked[ref] = Sample(job, actor, ranks, now)
            self.ask(STALLS, wire.Stacks(ref=ref, actor=actor, selector="ranks(:)", timeout=SAMPLE_TIMEOUT, job=job))

    def take(self, msg: wire.Message) -> None:
        """A part of a sample's stacks (a refusal, when the actor's ranks went meanwhile, is dropped)."""
        if not isinstance(msg, wire.StacksResult) or msg.ref not in self.asked:
            return
        sample = self.asked[msg.ref]
        sample.groups += msg.groups
        if not msg.more:
            del self.asked[msg.ref]
            self.judge(sample)

    def judge(self, sample: Sample) -> None:
        """Each running rank's stack against the last one seen; while someone watches, the
        ranks still for `stall_after` and not yet told of are told, once."""
        key = (sample.job, sample.actor)
        seen = self.seen.setdefault(key, {})
        for group in sample.groups:
            stack = tuple(thread.key() for thread in group.threads)
            at, call = places(group)
            for rank in group.ranks:
                if rank in sample.running and (rank not in seen or seen[rank].stack != stack):
                    seen[rank] = Still(stack, at, call, sample.at)
        for rank in set(seen) - sample.running:
            del seen[rank]
        if not self.watching:
            return
        still = {rank: s for rank, s in seen.items() if sample.at - s.since >= self.stall_after}
        told = self.told.setdefault(key, set()) & set(still)
        self.told[key] = told
        if not set(still) - told:
            return
        self.tell(sample.job, sample.actor, seen, still, sample.at)
        told |= set(still)

    def tell(self, job: str, actor: str, seen: dict[int, Still], still: dict[int, Still], now: float) -> None:
        """One event for the fewest ranks still at one place (the odd ones out), naming how long
        each of them has stood there at least (since the first sample that found it there),
        where the others wait and which ranks moved."""
        by_place: dict[tuple[str, str], list[int]] = {}
        for rank, s in sorted(still.items()):
            by_place.setdefault((s.place, s.call), []).append(rank)
        ordered = sorted(by_place.items(), key=lambda item: (len(item[1]), item[1]))
        (at, _), ranks = ordered[0]
        others = [elsewhere(r, *at) for at, r in ordered[1:]]
        moved = sorted(set(seen) - set(still))
        if moved:
            others.append(f"ranks[{format_ranks(moved)}] moved")
        stood = now - max(still[rank].since for rank in ranks)
        detail = f"for {stood:.0f} s" + "".join(f"; {other}" for other in others)
        for rank in ranks:
            self.events.add(wire.EventKind.STALLED, job, actor, rank, where=at, detail=detail)
