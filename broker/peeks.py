"""`peek` through the broker: an expression evaluated in running ranks, asked of each process
(or broker below) that runs some of the selected ranks, and its answers grouped as a cast's are.

The handlers of its messages live here, one for each peer that takes part: the shell that asks,
the broker above that asks for ranks below us, the rank processes that answer, and the brokers below
that answer for theirs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from monarch_pdb import wire
from monarch_pdb.broker.inflight import AskedOfEach, InFlight, below_timeout
from monarch_pdb.broker.routes import Routes
from monarch_pdb.ranks import RankSet

if TYPE_CHECKING:
    from monarch_pdb.broker.audit import Audit
    from monarch_pdb.broker.entries import LiveRank
    from monarch_pdb.broker.requests import Requests

HOLDS_THE_GIL = "holds the GIL in C code (its process sent nothing in time)"
"""Why a rank gave no answer: its rank process's thread could not run, since the rank's own
thread holds the interpreter's lock (a C call that does not release it), or the process is
stopped."""


@dataclass(kw_only=True)
class PeekInFlight(AskedOfEach[wire.CastGroup]):
    answers: dict[str, list[int]] = field(default_factory=dict)
    """Each distinct answer and the ranks that gave it."""
    RESULT = wire.PeekResult
    LEFT_OUT = "its process sent no answer for it"

    def take(self, group: wire.CastGroup, mine: RankSet) -> None:
        if mine:
            self.answers.setdefault(group.output, []).extend(mine)

    def groups(self) -> list[wire.CastGroup]:
        return [wire.CastGroup(output, "", RankSet.of(ranks)) for output, ranks in self.answers.items()]

    def weight(self, group: wire.CastGroup) -> int:
        return len(group.output) + 8 * len(group.ranks)

    def unanswered(self) -> list[wire.Missing]:
        return [wire.Missing(rank, HOLDS_THE_GIL) for ranks in self.waiting.values() for rank in ranks]


class Peeks:
    """The peeks in flight through one broker, and the handlers of their messages."""

    def __init__(self, requests: Requests, audit: Audit, part_size: int) -> None:
        self.requests = requests
        self.registry = requests.registry
        self.audit = audit
        self.table: InFlight[PeekInFlight] = requests.add(InFlight(part_size=part_size))

    def routes(self) -> Routes:
        return Routes(
            shell={wire.Peek: self.on_peek},
            parent={wire.PeekRanks: self.on_peek_ranks},
            rank={wire.PeekReport: self.on_peek_report},
            branch={wire.PeekResult: self.on_peek_result},
        )

    def on_peek(self, shell: bytes, msg: wire.Peek) -> None:
        """From a shell: the selected live ranks, paused or not."""
        chosen, absent = self.requests.selected(shell, msg.job, msg.actor, msg.selector, live=True)
        if chosen:
            ask = wire.PeekRanks(
                ref=0,
                actor=msg.actor,
                ranks=[],
                expression=msg.expression,
                limit=msg.limit,
                function=msg.function,
                up=msg.up,
                job=chosen[0].job,
                reading=msg.reading,
            )
            self.start(shell, msg.ref, chosen, absent, ask, msg.limit + wire.PEEK_MARGIN)

    def on_peek_ranks(self, identity: bytes, msg: wire.PeekRanks) -> None:
        """From the broker above: its ranks below us."""
        chosen, absent = self.registry.pick(msg.job, msg.actor, msg.ranks, live=True)
        self.start(identity, msg.ref, chosen, absent, msg, msg.timeout)

    def start(
        self,
        shell: bytes,
        ref: int,
        chosen: list[LiveRank],
        absent: list[wire.Missing],
        ask: wire.PeekRanks,
        window: float,
    ) -> None:
        """Ask each process (or broker below) for its chosen ranks' answers, within `window`
        seconds: `ask` as each is asked, but for its own ranks, our request's id and the time
        left below. The expression runs in the ranks, so it goes into the audit log."""
        request = self.table.open(
            PeekInFlight(shell=shell, ref=ref, actor=ask.actor, deadline=time.monotonic() + window, missing=absent)
        )
        for live in chosen:
            request.waiting.setdefault(live.peer, []).append(live.rank)
        self.requests.skip_unreachable(request)
        said = f"peek {ask.expression}" if ask.reading == wire.Reading.EXPRESSION else f"peek ({ask.reading})"
        self.audit.record(shell, ask.job, ask.actor, [live.rank for live in chosen], said)
        for peer, asked in request.waiting.items():
            self.requests.send(
                peer,
                wire.PeekRanks(
                    ref=request.id,
                    actor=ask.actor,
                    ranks=asked,
                    expression=ask.expression,
                    limit=ask.limit,
                    function=ask.function,
                    up=ask.up,
                    job=ask.job,
                    timeout=below_timeout(window),
                    reading=ask.reading,
                ),
            )
        self.requests.settle(self.table, request)

    def on_peek_report(self, identity: bytes, msg: wire.PeekReport) -> None:
        """From a rank process."""
        request = self.table.get(msg.ref)
        if request is not None and identity in request.waiting:
            request.report(identity, msg.groups)
            self.requests.settle(self.table, request)

    def on_peek_result(self, identity: bytes, msg: wire.PeekResult) -> None:
        """From a broker below: its ranks' answers, grouped there."""
        request = self.table.get(msg.ref)
        if request is not None and identity in request.waiting:
            request.report(identity, msg.groups, msg.missing, msg.more)
            self.requests.settle(self.table, request)
