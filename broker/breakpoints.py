"""An editor's breakpoints through the broker: asked of each process that runs some of the
selected ranks, paused or not, since a breakpoint lives in a process's code, which all its
ranks share, and of each broker below that holds some, which selects its own; and each log
point's message on its way back to the editor that set it.

The handlers of its messages live here, one for each peer that takes part: the editor (or
the broker above) that asks, the rank processes and brokers below that answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from monarch_pdb import ranks, wire
from monarch_pdb.broker.entries import CannotServe
from monarch_pdb.broker.inflight import InFlight, Request, below_timeout
from monarch_pdb.broker.routes import Routes
from monarch_pdb.broker.upstream import UPSTREAM

if TYPE_CHECKING:
    from monarch_pdb.broker.audit import Audit
    from monarch_pdb.broker.entries import LiveRank
    from monarch_pdb.broker.requests import Requests

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
        return [
            wire.BreakpointsResult(
                ref=self.ref,
                groups=[
                    wire.BreakGroup(actor, sorted(answered), list(reasons), missing)
                    for (actor, reasons, missing), answered in self.answers.items()
                ],
            )
        ]


def audited(msg: wire.Breakpoints) -> str:
    """The request as the audit log keeps it: its conditions and log messages run in the ranks."""
    spots = ", ".join(
        f"{spot.line}"
        + (f" if {spot.condition}" if spot.condition else "")
        + (f" log {spot.log!r}" if spot.log else "")
        for spot in msg.spots
    )
    uncaught = "" if msg.uncaught is None else f" uncaught={msg.uncaught}"
    return f"breakpoints {msg.path} [{spots}]{uncaught}" if msg.path else f"breakpoints{uncaught}"


def cleared(msg: wire.Breakpoints) -> wire.Breakpoints:
    """What a process that runs none of the selected ranks is asked instead: the file with no
    breakpoints, the filter off."""
    return replace(msg, spots=[], uncaught=None if msg.uncaught is None else False)


def standing_key(msg: wire.Breakpoints) -> str | None:
    """Where a request stands: by its file, "" for the `uncaught` filter."""
    return msg.path if msg.path else "" if msg.uncaught is not None else None


@dataclass
class Standing:
    """The latest breakpoints of one file (or the latest `uncaught` filter), kept for the
    processes that start later: the request as this broker was asked, the editor as it names
    it, and the processes that were asked already."""

    ask: wire.Breakpoints
    owner: bytes
    asked: set[bytes]


class BreakpointRequests:
    """The editors' breakpoint requests in flight through one broker, the latest of each file
    for processes that start later, and the handlers of their messages."""

    def __init__(self, requests: Requests, audit: Audit, part_size: int) -> None:
        self.requests = requests
        self.registry = requests.registry
        self.send = requests.send
        self.audit = audit
        self.table: InFlight[BreakpointsInFlight] = requests.add(InFlight(part_size=part_size))
        self.standing: dict[str | None, Standing] = {}
        """By file; "" for the `uncaught` filter. As in a process, the latest editor to set a
        file's breakpoints sets them for all."""
        self.setters: set[bytes] = set()
        """The editors (as this broker names them) that set breakpoints or the filter here,
        in running ranks or paused ones: each one's go when it does."""

    def routes(self) -> Routes:
        return Routes(
            editor={wire.Breakpoints: self.on_breakpoints},
            parent={wire.Breakpoints: self.on_parent_breakpoints, wire.EditorGone: self.on_editor_gone},
            rank={wire.BreakReport: self.on_break_report, wire.Logged: self.on_logged},
            branch={wire.BreakpointsResult: self.on_breakpoints_result, wire.Logged: self.on_logged},
        )

    def chosen(self, msg: wire.Breakpoints) -> list[LiveRank]:
        """The live ranks the editor selects: of its actor, else of every actor of the job.
        None yet is no refusal (the request stands for the ranks that start later); a selector
        that cannot be read, or an actor's that picks none of its running ranks, is."""
        registry = self.registry
        selector = msg.selector or "ranks(:)"
        ranks.parse_selector(selector)  # SelectorError, for the editor to tell
        if msg.actor:
            try:
                return registry.select(msg.job, msg.actor, selector, live=True)[0]
            except CannotServe:
                if registry.live_ranks(msg.job, msg.actor):
                    raise
                return []
        actors = {
            a for peer in registry.table.peers.values() for j, a, *_ in peer.present if not msg.job or j == msg.job
        }
        actors |= {s.actor for s in registry.table.sessions.values() if not msg.job or s.job == msg.job}
        actors |= {
            row.actor for peer in registry.table.branches() for row in peer.below if not msg.job or row.job == msg.job
        }
        found = []
        for actor in sorted(actors):
            try:
                found += registry.select(msg.job, actor, selector, live=True)[0]
            except CannotServe:
                continue
        return found

    def on_breakpoints(self, editor: bytes, msg: wire.Breakpoints) -> None:
        """From an editor: a selector that cannot be read, or picks nothing, is refused."""
        self.ask(editor, editor, msg, lambda refusal: wire.Error(text=refusal))

    def on_parent_breakpoints(self, parent: bytes, msg: wire.Breakpoints) -> None:
        """From the broker above, for an editor it names: a selector that picks nothing here
        still takes the file's breakpoints from the processes that had them, and is answered
        with no groups."""
        self.ask(parent, UPSTREAM + msg.owner, msg, None)

    def ask(
        self, shell: bytes, owner: bytes, msg: wire.Breakpoints, refused: Callable[[str], wire.Message] | None
    ) -> None:
        """Each selected rank's process is asked once, and each broker below that holds some,
        for its own; for a file's breakpoints, only those of ranks that run (a paused one takes
        them as pdb's, asked of its session with `Inspect`). A process that had the file's last
        breakpoints and runs no selected rank now has them cleared, never given the new ones.
        With no `refused` (the broker above asks), a selector that picks nothing here selects no
        rank, and is no refusal."""
        self.setters.add(owner)
        try:
            chosen = self.chosen(msg)
        except (CannotServe, ranks.SelectorError) as refusal:
            if refused is not None:
                self.send(shell, refused(str(refusal)))
                return
            chosen = []
        request = self.table.open(
            BreakpointsInFlight(shell=shell, ref=msg.ref, actor=msg.actor, deadline=time.monotonic() + msg.timeout)
        )
        registry = self.registry
        for live in chosen:
            if not msg.path or not registry.table.is_paused(live.job, live.actor, live.rank):
                request.waiting.setdefault(live.peer, []).append((live.actor, live.rank))
        selecting = {live.peer for live in chosen}
        before = self.standing.get(standing_key(msg))
        for peer in before.asked if before is not None else ():
            if registry.table.peer(peer) is not None:  # had the last ones: its ranks may all be paused now
                request.waiting.setdefault(peer, [])
                if registry.table.is_branch(peer):
                    selecting.add(peer)  # a broker below clears its own processes
        self.requests.skip_unreachable(request)
        self.audit.record(shell, msg.job, msg.actor, [live.rank for live in chosen], audited(msg))
        for peer in request.waiting:
            self.send(peer, self.ask_of(peer, request.id, msg if peer in selecting else cleared(msg), owner))
        self.keep(msg, owner, set(request.waiting) & selecting)
        self.requests.settle(self.table, request)

    def ask_of(self, peer: bytes, ref: int, msg: wire.Breakpoints, owner: bytes) -> wire.Message:
        """The request as a process is asked (for all its code), or a broker below (which
        selects its own ranks)."""
        if self.registry.table.is_branch(peer):
            return replace(msg, ref=ref, owner=owner, timeout=below_timeout(msg.timeout))
        return wire.BreakRanks(ref=ref, path=msg.path, spots=msg.spots, uncaught=msg.uncaught, owner=owner)

    def keep(self, msg: wire.Breakpoints, owner: bytes, asked: set[bytes]) -> None:
        """The request stands for processes that start later, until a file's breakpoints are
        all removed or the filter is cleared (each broker below keeps what it was asked)."""
        key = standing_key(msg)
        if key is None:
            return
        if msg.spots or msg.uncaught:
            self.standing[key] = Standing(msg, owner, asked)
        else:
            self.standing.pop(key, None)

    def started(self, identity: bytes) -> None:
        """A process (or a broker below) said which ranks it runs: it is asked of each standing
        request that selects some of them, once, and at once, so that what a shell asks of it
        next comes after (a broker below keeps the request, for the processes that start below
        it later). The answers go to no editor: it was answered when it asked."""
        registry = self.registry
        for wish in self.standing.values():
            if identity in wish.asked:
                continue
            try:
                chosen = [
                    live
                    for live in self.chosen(wish.ask)
                    if live.peer == identity
                    and not (wish.ask.path and registry.table.is_paused(live.job, live.actor, live.rank))
                ]
            except (CannotServe, ranks.SelectorError):
                continue
            if chosen:
                self.send(identity, self.ask_of(identity, 0, wish.ask, wish.owner))
                wish.asked.add(identity)
                self.audit.record(
                    UPSTREAM if wish.owner.startswith(UPSTREAM) else wish.owner,
                    wish.ask.job,
                    wish.ask.actor,
                    [live.rank for live in chosen],
                    audited(wish.ask),
                )

    def on_break_report(self, identity: bytes, msg: wire.BreakReport) -> None:
        """From a rank process."""
        request = self.table.get(msg.ref)
        if request is not None and identity in request.waiting:
            request.take(identity, msg.reasons)
            self.requests.settle(self.table, request)

    def on_breakpoints_result(self, identity: bytes, msg: wire.BreakpointsResult) -> None:
        """From a broker below: its ranks' answers, grouped there."""
        request = self.table.get(msg.ref)
        if request is not None and identity in request.waiting:
            request.take_below(identity, msg.groups)
            self.requests.settle(self.table, request)

    def on_editor_gone(self, identity: bytes, msg: wire.EditorGone) -> None:
        """From the broker above: one of its editors is gone."""
        self.gone(UPSTREAM + msg.owner)

    def gone(self, owner: bytes) -> bool:
        """An editor disconnected or was lost: what it set stands no more, here, in every
        process (running or paused, each forgets that editor's own) and below. Whether it
        had set any."""
        if owner not in self.setters:
            return False
        self.setters.discard(owner)
        self.standing = {key: wish for key, wish in self.standing.items() if wish.owner != owner}
        for peer in list(self.registry.table.peers.values()):
            if peer.role in (wire.Role.RANK, wire.Role.BROKER):
                self.send(peer.identity, wire.EditorGone(owner=owner))
        return True

    def on_logged(self, identity: bytes, msg: wire.Logged) -> None:
        """From a rank process, or a broker below: to the editor that set the log point, if it is
        still connected."""
        if msg.owner.startswith(UPSTREAM):
            self.send(UPSTREAM, replace(msg, owner=msg.owner[len(UPSTREAM) :]))
        elif self.registry.table.peer(msg.owner) is not None:
            self.send(msg.owner, msg)
