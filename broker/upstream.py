"""A broker's link to the broker above it (`--upstream HOST:PORT`), and what it tells it.

The link is the one ranks and shells use, on its own thread: libzmq's heartbeats keep its
connection, under the link's own routing id, so that one made again is the same broker to the
parent, and one gone (this host vanished) is dropped there; it says hello, beats in Python too
(by which the parent tells a stalled broker, see `Link.beats`), and says hello again after the
parent restarts. The broker's loop never waits on it: it posts
what the parent should learn, and takes what the parent sent as requests from the peer
`UPSTREAM`, which its registry knows as a shell that holds sessions for shells up there.

What goes up is folded, so that the parent's work grows with the brokers below it and the
distinct answers, not with the ranks:
- a session only when it is new or stands somewhere else: one that ran a line for a moment and
  stopped where it was (a cast of `p rank`) is not news, and one still running after
  RUNNING_AFTER is, or, running a line of the parent's own cast, when that cast is answered
  (a cast's ranks answer over a second on a busy host, and the result says how each did);
- the ranks without a session, whole, when they changed, at most once a tick;
- output only while the parent asks for it (some shell up there follows ranks).
"""

from __future__ import annotations

import os
import queue
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import zmq

from monarch_pdb import discovery, wire
from monarch_pdb.broker import table_rows
from monarch_pdb.broker.inflight import in_parts, row_parts, row_weight
from monarch_pdb.link import Link
from monarch_pdb.settings import Settings

if TYPE_CHECKING:
    from monarch_pdb.broker.entries import Session
    from monarch_pdb.broker.registry import Registry

UPSTREAM = b"\x00upstream"
"""The parent among this broker's peers. ZeroMQ names a connection by a zero byte and four
more, and takes no name of a peer's own that starts with a zero byte: no peer can pose as it."""

JOINED = object()
"""Put in the inbox when the parent welcomed us as a stranger (the first time, or after it
restarted or forgot us): it knows nothing of us yet."""

RUNNING_AFTER = 0.5
"""A session still running a line after this long is told up as running."""
TROUBLE_EVERY = 30.0
"""Seconds between two lines saying the parent still does not take us."""


class Upstream:
    """The parent link, and what the parent has been told."""

    def __init__(
        self, settings: Settings, address: str, secret: str, context: zmq.Context, send: Callable[[wire.Message], None]
    ) -> None:
        """`send` queues a message for the parent in order with the broker's answers to it."""
        self.address = address
        self.send = send
        self.part_size = settings.max_message // 2
        self.ranks_every = max(0.05, settings.heartbeat_interval / 2)
        parent = discovery.BrokerAddress(
            router=discovery.endpoint(*address.rsplit(":", 1)), pub="", secret=secret, pid=0, curve=settings.curve
        )
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.woken, self._wake = os.pipe()
        os.set_blocking(self.woken, False)
        os.set_blocking(self._wake, False)
        self.told: dict[int, tuple] = {}
        """Each session the parent knows, and where it stood when told."""
        self.changed: dict[int, tuple[bool, str]] = {}
        """Sessions to look at before the next flush: whether news, and its detail."""
        self.running: dict[int, float] = {}
        """Sessions sent a line, and when: told up as running if they run on."""
        self.ranks_due = True
        self.ranks_sent_at = float("-inf")
        self.patience = settings.connect_timeout
        self.beat = settings.heartbeat_interval
        self.unwelcome_since = float("inf")
        """Since when the parent has not welcomed us (inf while it has)."""
        self.complained = ("", float("-inf"))
        """What we last said of the parent not taking us, and when."""
        self.link = Link(settings, wire.Role.BROKER, self, lambda: parent, context=context)

    # --- the link's callbacks, on its thread: hand over and wake the broker ---------------

    def welcomed(self, broker_pid: int) -> list[wire.Message]:
        self._put(JOINED)
        return []

    def received(self, msg: wire.Message) -> None:
        self._put(msg)

    def published(self, msg: wire.Message) -> None:
        pass

    def idle_delay(self) -> float | None:
        return None

    def tick(self, now: float) -> list[wire.Message]:
        return []

    def _put(self, item: object) -> None:
        self.inbox.put(item)
        try:
            os.write(self._wake, b"!")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    # --- the broker's thread ---------------------------------------------------------------

    def listen(self, poller: zmq.Poller) -> None:
        """Wake the broker's poll when the parent sent something."""
        poller.register(self.woken, zmq.POLLIN)

    @property
    def ready(self) -> bool:
        return self.link.ready.is_set()

    def trouble(self, now: float) -> str:
        """A line for the log while the parent does not take us, else "": at once when it
        refuses our signature, after the connect timeout when it does not answer, and again
        every TROUBLE_EVERY seconds while it lasts; our ranks are out of its sight meanwhile."""
        if self.ready:
            self.unwelcome_since, self.complained = float("inf"), ("", float("-inf"))
            return ""
        self.unwelcome_since = min(self.unwelcome_since, now)
        if self.link.rejected.is_set():
            why = "refused our signature: is the secret the same? (MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE)"
        elif now - self.unwelcome_since >= self.patience:
            why = f"does not answer; trying again every {self.beat:g} s"
        else:
            return ""
        said, at = self.complained
        if why == said and now - at < TROUBLE_EVERY:
            return ""
        self.complained = (why, now)
        return f"the broker above ({self.address}) {why}"

    def take(self) -> list[object]:
        """What the parent sent since last asked (JOINED for a new welcome)."""
        try:
            while os.read(self.woken, 4096):
                pass
        except BlockingIOError:
            pass
        items = []
        while True:
            try:
                items.append(self.inbox.get_nowait())
            except queue.Empty:
                return items

    def rejoined(self, registry: Registry) -> None:
        """A parent that welcomed us knows nothing of us: tell it everything, each paused
        session as news (a restarted broker hears every waiting rank again, so shells there do)."""
        self.told.clear()
        self.running.clear()
        self.changed = {sess.id: (sess.paused, sess.detail) for sess in registry.table.sessions.values()}
        self.ranks_due = True
        self.ranks_sent_at = float("-inf")

    def touched(self, sess: Session, news: bool = False) -> None:
        """A session stopped or changed: look at it at the next flush."""
        was_news, detail = self.changed.get(sess.id, (False, ""))
        self.changed[sess.id] = (was_news or news, sess.detail if news else detail)
        self.running.pop(sess.id, None)

    def sent_line(self, sess: Session, now: float) -> None:
        self.running[sess.id] = now

    def cast_answered(self, registry: Registry, still_running: Iterable[int]) -> None:
        """A cast of the parent's has its answer: its sessions that still run are news now."""
        for sess_id in still_running:
            sess = registry.table.session_at(sess_id)
            if sess is not None:
                self.touched(sess)

    def ended(self, sess: Session, text: str, reason: str) -> None:
        self.changed.pop(sess.id, None)
        self.running.pop(sess.id, None)
        if self.told.pop(sess.id, None) is not None:
            self.send(wire.BranchEnded(id=sess.id, output=text, reason=reason))
        self.ranks_due = True

    def forget(self, sess: Session) -> None:
        """A session replaced by a newer one of its rank: the parent replaces it the same way
        when told of the new one, with nothing to say of the old."""
        self.changed.pop(sess.id, None)
        self.running.pop(sess.id, None)
        self.told.pop(sess.id, None)

    def printed(self, sess: Session, text: str) -> None:
        """A chunk of output, while the parent wants it (`following.py`): of a session it knows."""
        if sess.id in self.told:
            self.send(wire.BranchOutput(id=sess.id, text=text))

    def outgoing(self, registry: Registry, now: float, ticked: bool) -> list[wire.Message]:
        """What the parent should learn of the sessions and ranks now: sent ahead of what
        was queued, which may name a session the parent learns of here."""
        if ticked:
            for sess_id, since in list(self.running.items()):
                sess = registry.table.session_at(sess_id)
                if sess is None or sess.paused:
                    del self.running[sess_id]
                elif now - since >= RUNNING_AFTER:
                    del self.running[sess_id]
                    self.changed.setdefault(sess_id, (False, ""))
        items = []
        for sess_id, (news, detail) in self.changed.items():
            sess = registry.table.session_at(sess_id)
            if sess is None:
                continue
            where = (sess.paused, sess.reason, sess.function, sess.filename, sess.lineno, sess.prompt)
            if news or self.told.get(sess_id) != where:
                self.told[sess_id] = where
                row = sess.row()
                item = wire.BranchSession(id=sess_id, row=row, prompt=sess.prompt, news=news, detail=detail)
                items.append((item, row_weight(row) + len(sess.prompt) + len(detail)))
        self.changed.clear()
        out: list[wire.Message] = [
            wire.BranchSessions(sessions=part) for part, _ in in_parts(items, self.part_size) if part
        ]
        if self.ranks_due and now - self.ranks_sent_at >= self.ranks_every:
            self.ranks_due, self.ranks_sent_at = False, now
            jobs = table_rows.job_rows(registry.table)
            parts = row_parts(table_rows.rows_without_session(registry.table), self.part_size)
            out += [wire.BranchRanks(rows=part, jobs=jobs, added=n > 0) for n, (part, _) in enumerate(parts)]
        return out

    def post(self, msgs: list[wire.Message]) -> None:
        for msg in msgs:
            self.link.post(msg)

    def close(self) -> None:
        """Say goodbye, and wait for the link's thread to be done with its sockets."""
        self.link.close()
        self.link.join(timeout=1.0)


class NoUpstream:
    """The broker above of a broker that has none (the root, or a broker on its own): it
    hears nothing and is told nothing, so no caller asks whether there is a parent."""

    address = ""
    ready = False
    ranks_due = False

    def listen(self, poller: zmq.Poller) -> None:
        pass

    def trouble(self, now: float) -> str:
        return ""

    def take(self) -> list[object]:
        return []

    def rejoined(self, registry: Registry) -> None:
        pass

    def touched(self, sess: Session, news: bool = False) -> None:
        pass

    def sent_line(self, sess: Session, now: float) -> None:
        pass

    def cast_answered(self, registry: Registry, still_running: Iterable[int]) -> None:
        pass

    def ended(self, sess: Session, text: str, reason: str) -> None:
        pass

    def forget(self, sess: Session) -> None:
        pass

    def printed(self, sess: Session, text: str) -> None:
        pass

    def outgoing(self, registry: Registry, now: float, ticked: bool) -> list[wire.Message]:
        return []

    def post(self, msgs: list[wire.Message]) -> None:
        pass

    def close(self) -> None:
        pass
