"""What happens to a session, told to whoever must know: the client that holds it (and the
editor a shell took it from), the shells that follow ranks, the events, and the broker above.
Every peer's handlers share these; none of them needs to know the others."""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from sys import intern
from typing import TYPE_CHECKING

from monarch_pdb import wire
from monarch_pdb.broker.casts import Casts
from monarch_pdb.broker.events import EventLog
from monarch_pdb.broker.log import log
from monarch_pdb.broker.requests import Requests
from monarch_pdb.broker.upstream import UPSTREAM, NoUpstream

if TYPE_CHECKING:
    from monarch_pdb.broker.entries import Session
    from monarch_pdb.broker.registry import Registry
    from monarch_pdb.broker.upstream import Upstream


class Sessions:
    def __init__(
        self,
        registry: Registry,
        events: EventLog,
        requests: Requests,
        casts: Casts,
        publish_output: Callable[[Session, int, str], None],
    ) -> None:
        """`publish_output` passes a chunk of output, numbered as kept, to whoever follows ranks."""
        self.registry = registry
        self.events = events
        self.requests = requests
        self.send = requests.send
        self.casts = casts
        self.publish_output = publish_output
        self.upstream: Upstream | NoUpstream = NoUpstream()
        self.attaching: dict[bytes, deque] = {}
        """For each broker below, the shells whose attach it has yet to answer, in order."""

    def publish(self, kind: wire.EventKind, sess: Session, detail: str = "") -> None:
        where = intern(f"{os.path.basename(sess.filename)}:{sess.lineno}") if sess.filename else ""
        self.events.add(kind, sess.job, sess.actor, sess.rank, where, detail)

    def record_output(self, sess: Session, text: str) -> None:
        """Keep a chunk of a session's output, and pass it on to whoever follows ranks."""
        if not text:
            return
        seq = self.registry.table.output_log(sess).add(text)
        self.publish_output(sess, seq, text)

    def end(self, sess: Session, text: str, reason: str) -> None:
        if reason != wire.Ending.LOST and self.casts.running(sess) is not None:
            self.record_output(sess, text)
        for cast in self.casts.ended(sess, reason):
            self.requests.settle(self.casts, cast)
        self.to_holder(sess, wire.SessionEnded(session=sess.id, text=text, reason=reason))
        self.upstream.ended(sess, text, reason)
        self.registry.table.end(sess, reason)
        self.publish(wire.EventKind.LOST if reason == wire.Ending.LOST else wire.EventKind.ENDED, sess, reason)

    def announce_lost(self, job: str, actor: str, ranks_lost: list[int]) -> None:
        """Ranks without a session are lost: every shell is told, and the broker above."""
        for rank in ranks_lost:
            self.events.add(wire.EventKind.LOST, job, actor, rank, "", wire.Ending.LOST)
        self.send(UPSTREAM, wire.BranchLost(job=job, actor=actor, ranks=ranks_lost))

    def forward(self, sess: Session, line: str, release: bool = False, colour: bool = False) -> None:
        """Hand one line to a session's pdb. The broker above learns that it runs on, unless
        the line is of its own cast, whose result tells it."""
        self.send(
            sess.peer, wire.Input(sid=sess.sid, cmd=sess.resume(release), line=line, release=release, colour=colour)
        )
        cast = self.casts.running(sess)
        if cast is None or cast.shell != UPSTREAM:
            self.upstream.sent_line(sess, time.monotonic())

    def tell_holders(self, sessions: list[Session], by: bytes, release: bool = False) -> None:
        """The client that holds each session, unless it is `by` (whose line it is), learns
        that the session runs: what it shows of it is past."""
        for sess in sessions:
            if sess.holder is not None and sess.holder != by:
                holder = self.registry.table.peer(sess.holder)
                if holder is not None and holder.role == wire.Role.SHELL:
                    self.send(sess.holder, wire.Resumed(session=sess.id, release=release))

    def to_holder(self, sess: Session, msg: wire.Message) -> None:
        """What the session's holder hears, and the editor a shell took it from."""
        for peer in (sess.holder, sess.watcher):
            if peer is not None:
                self.send(peer, msg)

    def hand_back(self, sess: Session) -> None:
        """A shell let go of a session it took from an editor: the editor holds it again."""
        editor, sess.watcher = sess.watcher, None
        if editor is not None and self.registry.table.peer(editor) is not None and sess.holder is None:
            self.registry.table.hold(editor, sess)
            self.now_held(editor, sess)

    def now_held(self, identity: bytes, sess: Session, taken_from: str = "") -> None:
        """Tell `identity` it holds `sess` (taken from whom, if anyone), once the broker below
        that has it holds it for us."""
        if self.registry.table.is_branch(sess.peer):
            # Held here; below, it is held by us for whichever shell up here holds it.
            self.attaching[sess.peer].append((identity, sess.id, taken_from))
            self.send(sess.peer, wire.Attach(job=sess.job, actor=sess.actor, rank=sess.rank, force=True))
            return
        self.send(
            identity,
            wire.Attached(
                session=sess.id,
                job=sess.job,
                actor=sess.actor,
                rank=sess.rank,
                host=sess.host,
                replay=sess.log.replay(),
                resumed=sess.resumed,
                paused=sess.paused,
                prompt=sess.prompt,
                taken_from=taken_from,
            ),
        )

    def touched(self, sess: Session, news: bool, new: bool) -> None:
        """A session stopped or changed (`news`: it stopped somewhere new; `new`: the broker
        above has not heard of it): the broker above learns it."""
        self.upstream.touched(sess, news)
        if new:
            self.below_changed()

    def below_changed(self) -> None:
        """The ranks without a session changed: the broker above learns them again."""
        self.upstream.ranks_due = True

    def name_twins(self) -> None:
        """Ranks that two processes run (one started again while the first runs on): both stay
        listed, and every shell is told once."""
        for first, second in self.registry.table.take_twins():
            detail = f"pid {first.pid} on {first.host} and pid {second.pid} on {second.host}"
            self.publish(wire.EventKind.TWICE, second, detail)
            log(f"{second.actor} {second.rank} of job {second.job} is run by two processes ({detail}); both are listed")
