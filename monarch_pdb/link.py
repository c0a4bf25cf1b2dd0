"""A connection to the broker, owned by one background thread: the rank process's and the shell's.

The thread finds the broker, says hello, and when the connection drops looks for it again, so
both a rank and a shell outlive a broker restart; a broker that is still the one to talk to (it
only stalled) is reconnected to under the same routing id, which it takes as the same peer.
Every link's liveness is libzmq's ZMTP heartbeat, answered by its I/O thread without the GIL:
a rank busy in C code is never taken for gone, and an idle rank's link does no work; a link whose
other end is gone (its process, or its host without closing TCP) is dropped by libzmq, and the
broker's socket monitor sees it. A shell's and a host broker's links also beat in Python (see
`Link.beats`). Other threads never touch a socket: they `post` messages, and the owner's `LinkOwner`
callbacks run on the link's thread.
"""

from __future__ import annotations

import atexit
import getpass
import math
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol, cast
from urllib.parse import urlsplit

import zmq

from monarch_pdb import curve, discovery, wire
from monarch_pdb.settings import Settings

# Messages about the connection itself; everything else a broker that restarted and answers
# Unknown never saw, and is sent again after the new handshake (waiting prompts are re-sent by
# the rank process itself).
CONNECTION_MESSAGES = frozenset({"hello", "heartbeat", "bye", "catch_up"})
"""Their wire names (a rank process never loads the shells' messages, among them `CatchUp`)."""


def codec_for(key: bytes, settings: Settings) -> wire.Codec:
    """The codec of every conversation with a broker, on both ends: signed with `key`, its
    size and age limits those the settings give."""
    return wire.Codec(key, max_body=settings.max_message, max_age=settings.max_age)


class LinkOwner(Protocol):
    """What the owner of a link does with it; every method runs on the link's thread."""

    def welcomed(self, broker_pid: int) -> list[wire.Message]:
        """Messages to send after each handshake (a new broker must learn what the old knew);
        `broker_pid` tells one broker from the next."""

    def received(self, msg: wire.Message) -> None: ...

    def published(self, msg: wire.Event | wire.Printed | wire.OutputLive) -> None:
        """An event, in order and without gaps; or, for a shell that follows ranks, output."""

    def idle_delay(self) -> float | None:
        """How soon `tick` has work, or None."""

    def tick(self, now: float) -> list[wire.Message]: ...


LOOK_AGAIN = 0.1
"""Seconds between looks for a broker that is not running yet: a shell or a rank opened first
connects within this much of the broker's start, and a look is only a lock test and a file read."""

REJECTED = wire.Error(text="authentication failed")
"""Stands for the broker's unsigned `AUTH_FAILED` answer among decoded messages."""


def _messages(sock: zmq.Socket, codec: wire.Codec) -> Iterator[wire.Message]:
    """Every message waiting on `sock` that passes the codec's checks; refused ones are counted."""
    while True:
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        if frames == wire.AUTH_FAILED:
            yield REJECTED
            continue
        try:
            yield from codec.decode(frames)
        except wire.Dropped:
            continue


def _encoded(codec: wire.Codec, msgs: list[wire.Message]) -> tuple[list[wire.Message], list[list[bytes]]]:
    """The messages that can be encoded and their frames. One that cannot (a value msgpack
    cannot carry) is left out with one line on stderr: the link's thread, and every session
    it carries, goes on."""
    try:
        return msgs, codec.encode_many(msgs)
    except Exception:  # one of them cannot go: each on its own, to find which
        kept, bodies = [], []
    for msg in msgs:
        try:
            bodies.append(codec.encode(msg))
        except Exception as error:
            print(
                f"monarch-pdb: a message ({msg.TYPE}) could not be sent to the debug broker and is left out: "
                f"{type(error).__name__}: {error}",
                file=sys.stderr,
                flush=True,
            )
        else:
            kept.append(msg)
    return kept, bodies


def pub_address(router: str, pub: str) -> str:
    """The broker's PUB endpoint as reachable from here: its port at the router's host."""
    return discovery.endpoint(urlsplit(router).hostname or "127.0.0.1", cast(int, urlsplit(pub).port))


PINGS_EVERY = 10
"""Beats between libzmq's pings on a link. A ping only starts the count for a peer gone without
closing its connection (its host vanished, its process stopped): any word from the other end
disarms the timeout it arms, so such a peer is dropped 30 to 40 beats after its last word. A
process that exits closes its connection, and is seen gone at once. At 1,024 idle ranks
(benchmarks/idle.py) pinging every beat cost the broker several times the CPU of pinging every
ten."""


def monitor_event(monitor: zmq.Socket) -> int:
    """The next event of a socket's monitor, without waiting (zmq.Again when none): its first
    frame starts with the event's 16-bit id (libzmq's `zmq_socket_monitor`). pyzmq's own reader
    imports asyncio, which a rank that never stops should not pay for."""
    frames = monitor.recv_multipart(zmq.NOBLOCK)
    return int.from_bytes(frames[0][:2], sys.byteorder)


def zmtp_heartbeats(sock: zmq.Socket, beat: float) -> None:
    """Ask libzmq to ping the other end every PINGS_EVERY `beat`s, and to drop the connection
    after DROPPED_AFTER_BEATS beats without a word from the other: how a vanished host, or a
    process stopped (SIGSTOP), is told from one that is busy, whose I/O thread answers without
    the GIL. Both ends of a link ask it: libzmq 4.3 drops a connection on its own pings' timeout
    only, not on the TTL the other end asks for. The limit is long, so that a broker stopped for
    a while (a swapped-out host) finds its connections as they were when it goes on: a
    connection dropped and made again would lose what was on its way."""
    ivl = max(1, round(beat * 1000))
    sock.setsockopt(zmq.HEARTBEAT_IVL, ivl * PINGS_EVERY)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, ivl * wire.DROPPED_AFTER_BEATS)
    sock.setsockopt(zmq.HEARTBEAT_TTL, ivl * wire.DROPPED_AFTER_BEATS)


def routing_id(link: bytes) -> bytes:
    """The routing id a link's connections carry: its own id, which ZeroMQ takes from a peer
    only when it does not start with a zero byte."""
    return b"\x01" + link[1:] if link[:1] == b"\x00" else link


def beat_due(sent: float, beaten: float, heard: float, beat: float) -> float:
    """When the next heartbeat is due: a beat after we last sent anything, or, while the broker
    has said nothing for a beat, a beat after our last heartbeat. The broker answers heartbeats,
    not what it is told, so a peer that never stops talking (a broker below telling its parent
    of a long storm of ranks) still asks for a sign of life, and does not take the broker for
    silent."""
    return min(sent, max(beaten, heard)) + beat


class Link:
    def __init__(
        self,
        settings: Settings,
        role: wire.Role,
        peer: LinkOwner,
        locate: Callable[[], discovery.BrokerAddress | None],
        events: bool = False,
        context: zmq.Context | None = None,
        job: str = "",
        client: wire.Client | None = None,
    ) -> None:
        self.settings = settings
        self.role, self.job, self.client = role, job, client
        self.peer = peer
        self.locate = locate
        self.events = events
        self.pid = os.getpid()
        self.id = routing_id(os.urandom(8))
        self.beats = role != wire.Role.RANK
        """Whether this link also beats in Python, as a probe of whether the other end's Python
        loop answers, never of whether it lives: a shell's (and so an editor's), to tell its user
        at once when the broker does not answer (which judges no shell by them); a host broker's,
        by whose silence the broker above names its ranks unreachable while the connection
        stands. ZMTP cannot tell that: a broker stopped (SIGSTOP) stops its I/O thread too, and
        libzmq's heartbeats would say so only at their timeout, when a stall is no different from
        a vanished host; a broker starved in Python has its pings answered all along. Never a
        rank's: a rank holding the GIL is not silent."""
        self.ready = threading.Event()
        self.rejected = threading.Event()
        self.rejection = ""
        self.connection: discovery.BrokerAddress | None = None
        self.problem = ""
        self._own_context = context is None
        self.context = context or zmq.Context()
        self._outbox: queue.SimpleQueue[wire.Message] = queue.SimpleQueue()
        self._lock = threading.Lock()
        wake = f"inproc://monarch-pdb-wake-{id(self)}"
        self._wake_rx = self.context.socket(zmq.PAIR)
        self._wake_rx.bind(wake)
        self._wake_tx = self.context.socket(zmq.PAIR)
        self._wake_tx.connect(wake)
        self._wake_pending = False
        self._stopping = False
        self._closed = False
        """Set once the thread has ended and let go of its sockets: nothing wakes it again."""
        self.follow_output = False
        """Set by the owner: receive published output too (the link thread subscribes)."""
        self._subscribed = ""
        self._unanswered: list[wire.Message] = []
        self._resend: list[wire.Message] = []
        self._broker_pid = 0
        self._seq = 0
        self._catching_up = False
        self._thread = threading.Thread(target=self._run, name=f"monarch-pdb-{role}", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def post(self, msg: wire.Message | None = None) -> None:
        """Queue a message for the broker (or, with None, just wake the thread)."""
        if msg is not None:
            self._outbox.put(msg)
        with self._lock:
            if not self._wake_pending and not self._closed:
                self._wake_pending = True
                self._wake_tx.send(b"")

    def close(self) -> None:
        """Say goodbye, so the broker forgets this peer at once rather than after a timeout."""
        if self._stopping or os.getpid() != self.pid:
            return
        self._stopping = True
        self.post()
        if self.ready.is_set():  # else there is no one to tell, and nothing to wait for
            self._thread.join(timeout=1.0)

    def join(self, timeout: float) -> None:
        """Wait for the link's thread to end after `close` (its sockets closed with it)."""
        self._thread.join(timeout)

    # --- the link's thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            self._let_go()

    def _let_go(self) -> None:
        """Close what the link opened, so that a process that opens many links over its life
        (an editor's adapter, a notebook, a test run) does not keep a context's descriptors
        for each."""
        with self._lock:
            self._closed = True
            self._wake_tx.close(linger=0)
        self._wake_rx.close(linger=0)
        if self._own_context:
            self.context.destroy(linger=0)

    def _serve(self) -> None:
        while not self._stopping:
            try:
                self.connection = self.locate()
            except discovery.NotFound as problem:
                self.problem = f" ({problem})"
                self.connection = None
            except discovery.Insecure as problem:
                self.refuse(str(problem))
                self.connection = None
            if self.connection is None:
                self._idle(LOOK_AGAIN)
                continue
            self._converse(self.connection)

    def refuse(self, why: str) -> None:
        """Nothing will work until the user fixes something: say what, where they will see it."""
        self.problem = f" ({why})"
        self.rejection = why
        self.rejected.set()

    def _idle(self, seconds: float) -> None:
        if self._wake_rx.poll(int(seconds * 1000)):
            self._drain_wake()

    def _drain_wake(self) -> None:
        """Take the wake-ups; the next `post` wakes us again, and one that comes meanwhile is
        seen by the work that follows this call."""
        while True:
            try:
                self._wake_rx.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
        with self._lock:
            self._wake_pending = False

    def _hello(self) -> wire.Hello:
        return wire.Hello(
            role=self.role,
            job=self.job,
            client=self.client,
            host=socket.gethostname(),
            pid=os.getpid(),
            user=getpass.getuser(),
            link=self.id,
        )

    def _take_outgoing(self) -> list[wire.Message]:
        out: list[wire.Message] = []
        while True:
            try:
                out.append(self._outbox.get_nowait())
            except queue.Empty:
                return out

    def _converse(self, conn: discovery.BrokerAddress) -> None:
        """Talk to one broker until it goes silent or we stop."""
        codec = codec_for(conn.key, self.settings)
        self._subscribed = ""
        self._owe_again()
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.SNDHWM, 0)
        dealer.setsockopt(zmq.RCVHWM, 0)
        discovery.allow_ipv6(dealer)
        dealer.setsockopt(zmq.ROUTING_ID, self.id)
        zmtp_heartbeats(dealer, self.settings.heartbeat_interval)
        monitor = dealer.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        if conn.curve:
            curve.connect(dealer, conn.secret)
        dealer.connect(conn.router)
        sub = self.context.socket(zmq.SUB) if self.events else None
        if sub is not None:
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, wire.EVENT_TOPIC)
            discovery.allow_ipv6(sub)
            zmtp_heartbeats(sub, self.settings.heartbeat_interval)
            if conn.curve:
                curve.connect(sub, conn.secret)
        sub_codec = codec_for(conn.key, self.settings)
        poller = zmq.Poller()
        for sock in (dealer, self._wake_rx, sub, monitor):
            if sock is not None:
                poller.register(sock, zmq.POLLIN)
        beat = self.settings.heartbeat_interval
        silent_limit = max(wire.LOST_AFTER_BEATS * beat, self.settings.connect_timeout)
        looked = time.monotonic()

        def send(*msgs: wire.Message) -> None:
            if not msgs:
                return
            kept, bodies = _encoded(codec, list(msgs))
            for frames in bodies:
                dealer.send_multipart(frames, copy=False)
            self._unanswered += [m for m in kept if m.TYPE not in CONNECTION_MESSAGES]

        heard = sent = beaten = time.monotonic()
        following = False
        try:
            while True:
                delay = self.peer.idle_delay() if self.ready.is_set() else None
                if self.beats:
                    due = beat_due(sent, beaten, heard, beat)
                else:  # while no broker welcomes us, look every beat whether another took its place
                    due = math.inf if self.ready.is_set() else looked + beat
                wait = min(max(0.0, due - time.monotonic()), math.inf if delay is None else delay)
                events = dict(poller.poll(None if wait == math.inf else int(wait * 1000)))
                if monitor in events and not self._connection_changed(monitor, send) and not self.beats:
                    # A broker restarted on its port takes us back under our routing id: look for
                    # another (and start one) only once it has had the time a silent one had.
                    looked = time.monotonic() + silent_limit - beat
                if self._wake_rx in events:
                    self._drain_wake()
                if self.events and self.follow_output != following:
                    following = self.follow_output
                    assert sub is not None
                    sub.setsockopt(zmq.SUBSCRIBE if following else zmq.UNSUBSCRIBE, wire.OUTPUT_TOPIC)
                if self._stopping:
                    if self.ready.is_set():
                        dealer.setsockopt(zmq.LINGER, 500)
                        send(wire.Bye())
                    return
                if dealer in events:
                    heard = time.monotonic()
                    send(*self._receive_all(dealer, codec, sub, conn))
                if sub is not None and sub in events:
                    send(*self._receive_events(sub, sub_codec))
                if self.ready.is_set():
                    outgoing = self._take_outgoing() + self.peer.tick(time.monotonic())
                    if outgoing:
                        send(*outgoing)
                        sent = time.monotonic()
                now = time.monotonic()
                if not self.beats:
                    if not self.ready.is_set() and now >= looked + beat:
                        looked = now
                        if not self._still_located(conn):
                            return
                    continue
                if now >= beat_due(sent, beaten, heard, beat):
                    if not self.ready.is_set() and not self._still_located(conn):
                        return  # a broker replacing a dead one holds its lock before it rewrites the file
                    send(wire.Heartbeat() if self.ready.is_set() else self._hello())
                    sent = beaten = now
                if now - heard > silent_limit:
                    self.ready.clear()
                    self.problem = " (the broker stopped answering)"
                    if not self._still_located(conn):
                        return
                    heard = now
        finally:
            dealer.disable_monitor()
            monitor.close()
            dealer.close()
            if sub is not None:
                sub.close()

    def _connection_changed(self, monitor: zmq.Socket, send: Callable[..., None]) -> bool:
        """Say hello on each new connection (libzmq reconnects by itself, under our routing id);
        a connection that dropped (the broker gone, or silent past its ZMTP heartbeats) leaves us
        unwelcome until the next: False then, for the caller to look whether the broker is still
        the one to talk to."""
        standing = True
        while True:
            try:
                event = monitor_event(monitor)
            except zmq.Again:
                return standing
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                standing = True
                send(self._hello())
            elif event == zmq.EVENT_DISCONNECTED:
                standing = False
                self.ready.clear()
                self.problem = " (the connection to the broker dropped)"

    def _still_located(self, conn: discovery.BrokerAddress) -> bool:
        """Whether a silent broker is still the one to talk to. One that only stalls (stopped,
        starved) keeps our connection, and with it what we sent and say meanwhile, in order:
        on a new one we would be a stranger whose old socket still speaks for us."""
        try:
            return self.locate() == conn
        except (discovery.NotFound, discovery.Insecure):
            return False

    def _owe_again(self) -> None:
        """What the broker never answered goes again to the one that welcomes us next: a broker
        that restarted, or a new one where the last died, never saw it (prompts the rank process sends
        again itself)."""
        self._resend += [m for m in self._unanswered if not isinstance(m, wire.Prompt)]
        self._unanswered = []

    def _receive_all(
        self, dealer: zmq.Socket, codec: wire.Codec, sub: zmq.Socket | None, conn: discovery.BrokerAddress
    ) -> list[wire.Message]:
        replies: list[wire.Message] = []
        for msg in _messages(dealer, codec):
            if msg is REJECTED:
                self.refuse(
                    "authentication failed: the broker refuses our messages; its secret is not the one "
                    f"we use (from {discovery.secret_source(self.settings)})"
                )
                continue
            if not isinstance(msg, wire.Unknown):
                self._unanswered.clear()
            if isinstance(msg, wire.Welcome):
                address = pub_address(conn.router, msg.pub)
                if self.events and address != self._subscribed:
                    assert sub is not None
                    sub.connect(address)
                    self._subscribed = address
                if msg.broker_pid != self._broker_pid:
                    self._broker_pid, self._seq, self._catching_up = msg.broker_pid, msg.seq, False
                replies.extend(self._catch_up_to(msg.seq))
                self.problem = ""
                self.rejected.clear()
                if not self.ready.is_set():  # else it answers a hello we said again: no news
                    self.ready.set()
                    if not msg.known:  # a broker that knew us has all we told it
                        replies.extend(self.peer.welcomed(msg.broker_pid))
                    replies.extend(self._resend)
                    self._resend = []
            elif self.events and isinstance(msg, wire.Events):
                self._catching_up = False
                for row in msg.rows:
                    self._deliver(wire.Event.from_row(row))
            elif isinstance(msg, wire.Unknown):
                self.ready.clear()
                self._owe_again()
                replies.append(self._hello())
            elif not isinstance(msg, wire.Heartbeat):
                self.peer.received(msg)
        return replies

    def _receive_events(self, sub: zmq.Socket, codec: wire.Codec) -> list[wire.Message]:
        """Deliver published events in order; a gap in their numbers asks for the missing ones."""
        requests: list[wire.Message] = []
        for msg in _messages(sub, codec):
            if isinstance(msg, (wire.Printed, wire.OutputLive)):
                self.peer.published(msg)
            elif isinstance(msg, wire.Event) and msg.seq == self._seq + 1:
                self._deliver(msg)
            elif isinstance(msg, (wire.Event, wire.Tick)):
                requests.extend(self._catch_up_to(msg.seq))
        return requests

    def _catch_up_to(self, seq: int) -> list[wire.Message]:
        if seq <= self._seq or self._catching_up or not self.events:
            return []
        self._catching_up = True
        return [wire.CatchUp(since=self._seq)]

    def _deliver(self, event: wire.Event) -> None:
        if event.seq > self._seq:
            self._seq = event.seq
            self.peer.published(event)
