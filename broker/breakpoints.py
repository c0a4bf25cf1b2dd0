"""An editor's breakpoints through the broker: asked of each process that runs some of the
selected ranks, paused or not, since a breakpoint lives in a process's code, which all its
ranks share, and of each broker below that holds some, which selects its own; and each log
point's message on its way back to the editor that set it.

The handlers of its messages live here, one for each peer that takes part: the editor (or
the broker above) that asks, the agents and brokers below that answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from monarch_pdb import wire
from monarch_pdb.broker.inflight import InFlight, Request, below_timeout
from monarch_pdb.broker.registry import Refused
from monarch_pdb.broker.upstream import UPSTREAM

if TYPE_CHECKING:
    from monarch_pdb.broker.registry import LiveRank
    from monarch_pdb.broker.server import Broker

NO_ANSWER = "its process sent no answer in time"


@dataclass(kw_only=True)
class BreakpointsInFlight(Request):
    waiting: dict[bytes, list[tuple[str, int]]] = field(default_factory=dict)
    """The (actor, rank) of each process that has not answered yet."""
    answers: dict[tuple[str, tuple[str, ...], str], list[int]] = field(default_factory=dict)
    """The ranks of each (actor, reasons, why missing)."""
    RESULT = wire.BreakpointsResult

    @property
    def done(self) -> bool:
        return not self.waiting

    def take(self, peer: bytes, reasons: list[str], missing: str = "") -> None:
        for actor, rank in self.waiting.pop(peer, ()):
            self.answers.setdefault((actor, tuple(reasons), missing), []).append(rank)

    def take_below(self, peer: bytes, groups: list[wire.BreakGroup]) -> None:
        """A broker below answers for the ranks it selected itself (those it found paused
        take the breakpoints as pdb's, and are not among them)."""
        if self.waiting.pop(peer, None) is not None:
            for group in groups:
                self.answers.setdefault((group.actor, tuple(group.reasons), group.missing), []).extend(group.ranks)

    def lost(self, peer: bytes, reason: str = wire.Ending.LOST) -> None:
        self.take(peer, [], reason)

    def result(self, part_size: int) -> list[wire.Message]:
        for peer in list(self.waiting):
            self.take(peer, [], NO_ANSWER)
        return [wire.BreakpointsResult(ref=self.ref, groups=[
            wire.BreakGroup(actor, sorted(ranks), list(reasons), missing)
            for (actor, reasons, missing), ranks in self.answers.items()])]


def audited(msg: wire.Breakpoints) -> str:
    """The request as the audit log keeps it: its conditions and log messages run in the ranks."""
    spots = ", ".join(f"{spot.line}" + (f" if {spot.condition}" if spot.condition else "")
                      + (f" log {spot.log!r}" if spot.log else "") for spot in msg.spots)
    uncaught = "" if msg.uncaught is None else f" uncaught={msg.uncaught}"
    return f"breakpoints {msg.path} [{spots}]{uncaught}" if msg.path else f"breakpoints{uncaught}"


class Breakpoints:
    """The editors' breakpoint requests in flight through one broker, and the handlers of
    their messages."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.table: InFlight[BreakpointsInFlight] = InFlight(part_size=broker.settings.max_message // 2)

    def handlers(self) -> dict:
        return {wire.Breakpoints: self.on_breakpoints, wire.BreakReport: self.on_break_report,
                wire.BreakpointsResult: self.on_breakpoints_result, wire.Logged: self.on_logged}

    def chosen(self, msg: wire.Breakpoints) -> list[LiveRank]:
        """The live ranks the editor selects: of its actor, else of every actor of the job."""
        registry = self.broker.registry
        selector = msg.selector or "ranks(:)"
        if msg.actor:
            return registry.select(msg.job, msg.actor, selector, live=True)[0]
        actors = {a for peer in registry.peers.values() for j, a, *_ in peer.present if not msg.job or j == msg.job}
        actors |= {s.actor for s in registry.sessions.values() if not msg.job or s.job == msg.job}
        actors |= {row.actor for peer in registry.branches() for row in peer.below if not msg.job or row.job == msg.job}
        found = []
        for actor in sorted(actors):
            try:
                found += registry.select(msg.job, actor, selector, live=True)[0]
            except Refused:
                continue
        if not found:
            raise Refused("no running rank is known to the broker")
        return found

    def on_breakpoints(self, shell: bytes, msg: wire.Breakpoints) -> None:
        """From an editor, or the broker above: each selected rank's process is asked once,
        and each broker below that holds some, for its own; for a file's breakpoints, only
        those of ranks that run (a paused one takes them as pdb's, asked of its session with
        `Inspect`)."""
        try:
            chosen = self.chosen(msg)
        except Refused as refusal:
            if shell == UPSTREAM:
                self.broker.send(shell, wire.BreakpointsResult(ref=msg.ref, groups=[]))
            else:
                self.broker.send(shell, wire.Error(text=str(refusal)))
            return
        request = self.table.open(BreakpointsInFlight(shell=shell, ref=msg.ref, actor=msg.actor,
                                                      deadline=time.monotonic() + msg.timeout))
        registry = self.broker.registry
        for live in chosen:
            if not msg.path or not registry.is_paused(live.job, live.actor, live.rank):
                request.waiting.setdefault(live.peer, []).append((live.actor, live.rank))
        self.broker.skip_unreachable(request)
        self.broker.record(shell, msg.job, msg.actor, [live.rank for live in chosen], audited(msg))
        owner = UPSTREAM + msg.owner if shell == UPSTREAM else shell
        for peer in request.waiting:
            if registry.is_branch(peer):
                self.broker.send(peer, replace(msg, ref=request.id, owner=owner, timeout=below_timeout(msg.timeout)))
            else:
                self.broker.send(peer, wire.BreakRanks(ref=request.id, path=msg.path, spots=msg.spots,
                                                       uncaught=msg.uncaught, owner=owner))
        self.broker.settle(self.table, request)

    def on_break_report(self, identity: bytes, msg: wire.BreakReport) -> None:
        """From an agent."""
        request = self.table.get(msg.ref)
        if request is not None and identity in request.waiting:
            request.take(identity, msg.reasons)
            self.broker.settle(self.table, request)

    def on_breakpoints_result(self, identity: bytes, msg: wire.BreakpointsResult) -> None:
        """From a broker below: its ranks' answers, grouped there."""
        request = self.table.get(msg.ref)
        if request is not None and self.broker.registry.is_branch(identity) and identity in request.waiting:
            request.take_below(identity, msg.groups)
            self.broker.settle(self.table, request)

    def on_logged(self, identity: bytes, msg: wire.Logged) -> None:
        """From an agent, or a broker below: to the editor that set the log point, if it is
        still connected."""
        if msg.owner.startswith(UPSTREAM):
            if self.broker.upstream is not None:
                self.broker.send(UPSTREAM, replace(msg, owner=msg.owner[len(UPSTREAM):]))
        elif self.broker.registry.peer(msg.owner) is not None:
            self.broker.send(msg.owner, msg)
