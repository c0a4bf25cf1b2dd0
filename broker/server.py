"""The broker's poll loop: one ROUTER for rank processes, shells, editors and brokers below, one PUB for
events, and the link to the broker above.

Single-threaded on purpose: every piece of state is touched by this loop only, so there is
nothing to lock. Each message goes by its sender's role to that peer's handlers, as the ZeroMQ
guide's Majordomo broker routes by peer and then by message (`routes.py`); what a message from
a role that may not send it gets is one line in the log's summary of refusals.
"""

from __future__ import annotations

import gc
import math
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TextIO, cast

import zmq

from monarch_pdb import curve, discovery, wire
from monarch_pdb.broker.audit import Audit
from monarch_pdb.broker.branches import Branches
from monarch_pdb.broker.breakpoints import BreakpointRequests
from monarch_pdb.broker.casts import CastInFlight, CastRequests, Casts
from monarch_pdb.broker.connections import Connections, Refusals
from monarch_pdb.broker.entries import Peer, Session, process_gone
from monarch_pdb.broker.events import HISTORY, EventLog
from monarch_pdb.broker.following import Followers
from monarch_pdb.broker.from_ranks import FromRanks
from monarch_pdb.broker.inflight import Request
from monarch_pdb.broker.lists import Lists
from monarch_pdb.broker.log import log
from monarch_pdb.broker.peeks import Peeks
from monarch_pdb.broker.registry import Registry
from monarch_pdb.broker.requests import Requests
from monarch_pdb.broker.routes import Routes, sender
from monarch_pdb.broker.sessions import Sessions
from monarch_pdb.broker.shells import Shells
from monarch_pdb.broker.stacks import StackRequests
from monarch_pdb.broker.stalls import STALLS, Stalls
from monarch_pdb.broker.table import Table
from monarch_pdb.broker.upstream import JOINED, UPSTREAM, NoUpstream, Upstream
from monarch_pdb.link import codec_for, zmtp_heartbeats
from monarch_pdb.settings import Settings

FREEZE_AFTER = 65536
"""New sessions since the broker last froze what it holds that make it freeze again."""
DRAIN_AT_ONCE = 1024
PIPES_SETTLE = 0.1
"""Seconds after a connection drops before the ROUTER is asked whether its peer can be reached:
the socket forgets a dropped connection a moment after the monitor tells of it."""
NOT_YOURS = "a message its sender's role may not send"
LOST_TOGETHER = 0.25
"""Seconds of quiet among dropped connections before processes found gone are told lost: the
deaths of one job's processes, a few milliseconds apart, are told in one line, not one a tick."""


@dataclass
class Broker:
    settings: Settings
    secret: str
    idle_exit: float = 0.0
    audit: TextIO | None = None
    events: EventLog = field(default_factory=EventLog)
    outbox: dict[bytes, list[wire.Message]] = field(default_factory=dict)
    pub_endpoint: str = ""
    stopping: bool = False
    listening_since: float = float("-inf")
    """When the poll loop last came back from a pause longer than a heartbeat."""
    upstream: Upstream | NoUpstream = field(default_factory=NoUpstream)
    """The link to the broker above (`start_upstream`); one that does nothing where there is none."""
    frozen_sessions: int = 0
    """How many sessions the broker held when it last froze what it holds (`freeze_long_lived`)."""
    connections: Connections = field(default_factory=Connections)

    def __post_init__(self) -> None:
        self.codec = codec_for(self.secret.encode(), self.settings)
        self.refusals = Refusals(self.codec.refused)
        self.registry = Registry(
            Table(
                history_limit=self.settings.session_history,
                sessions_per_connection=self.settings.max_sessions_per_connection,
            )
        )
        part_size = self.settings.max_message // 2
        self.requests = Requests(self.registry, self.send, self.settled)
        audit = Audit(self.registry, self.audit)
        casts = Casts(part_size=part_size)
        self.following = Followers(
            self.publish_output,
            self.send,
            self.registry.table.branches,
            lambda sess, text: self.upstream.printed(sess, text),
        )
        self.sessions = Sessions(self.registry, self.events, self.requests, casts, self.following.printed)
        self.breakpoints = BreakpointRequests(self.requests, audit, part_size)
        self.casts = CastRequests(self.requests, casts, audit, self.sessions.forward, self.sessions.tell_holders)
        self.stacks = StackRequests(self.requests, part_size, self.settings.read_timeout)
        self.stalls = Stalls(
            self.registry,
            self.events,
            self.stacks.on_stacks,
            0.0 if self.settings.upstream else self.settings.stall_after,
        )
        self.peeks = Peeks(self.requests, audit, part_size)
        self.branches = Branches(self.requests, self.sessions, self.events, self.breakpoints.started)
        routes = Routes(
            every={
                wire.Hello: self.on_hello,
                wire.Heartbeat: self.on_heartbeat,
                wire.Bye: self.on_bye,
                wire.CatchUp: self.on_catch_up,
            }
        )
        for more in (
            FromRanks(self.requests, self.sessions, self.refusals.count, self.breakpoints.started),
            Shells(self.requests, self.sessions, audit, self.breakpoints.setters),
            Lists(self.registry, self.send_parts, self.settings.max_message),
            self.following,
            self.branches,
            self.casts,
            self.stacks,
            self.peeks,
            self.breakpoints,
        ):
            routes.add(more.routes())
        self.routes = routes.tables()
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.MAXMSGSIZE, self.settings.max_message + 4096)
        # A ROUTER drops what it cannot queue without a word; a cast to thousands of sessions
        # behind one connection must not lose inputs, so its queues are unbounded.
        self.router.setsockopt(zmq.SNDHWM, 0)
        self.router.setsockopt(zmq.RCVHWM, 0)
        # A rank, shell or broker below reconnects under its own routing id (its link's), as the
        # same peer; one gone without closing its connection (its host vanished) is dropped.
        self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        zmtp_heartbeats(self.router, self.settings.heartbeat_interval)
        self.monitor = self.router.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self.pub = self.context.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, HISTORY)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)
        for sock in (self.router, self.pub):
            discovery.allow_ipv6(sock, discovery.bind_host(self.settings.host))
        if self.settings.curve:
            curve.serve(self.router, self.secret)
            curve.serve(self.pub, self.secret)

    # --- life cycle --------------------------------------------------------------------

    def bind(self) -> discovery.BrokerAddress:
        host = discovery.bind_host(self.settings.host)
        self.router.bind(discovery.endpoint(host, self.settings.port))
        self.pub.bind(discovery.endpoint(host, 0))
        router = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        pub = self.pub_endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        return discovery.BrokerAddress(
            router=router, pub=pub, secret=self.secret, pid=os.getpid(), curve=self.settings.curve
        )

    def start_upstream(self, address: str) -> None:
        """Register everything below us with the broker at `address`, and serve it."""
        self.upstream = self.sessions.upstream = Upstream(
            self.settings, address, self.secret, self.context, lambda msg: self.send(UPSTREAM, msg)
        )

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        # A signal also wakes the poll (which would otherwise sleep on, up to half a
        # heartbeat), so a stop is heard at once.
        woken, wake = os.pipe()
        os.set_blocking(wake, False)
        signal.set_wakeup_fd(wake)
        poller = zmq.Poller()
        poller.register(self.monitor, zmq.POLLIN)
        poller.register(self.router, zmq.POLLIN)
        poller.register(self.pub, zmq.POLLIN)
        poller.register(woken, zmq.POLLIN)
        poller.register(self.stacks.outside.fileno(), zmq.POLLIN)
        self.upstream.listen(poller)
        tick = max(0.05, self.settings.heartbeat_interval / 2)
        idle_since = next_tick = polled = time.monotonic()
        while not self.stopping:
            self.collect_between_requests(bool(self.requests))
            ready = dict(poller.poll(math.ceil(self.sleep_for(tick) * 1000)))
            if time.monotonic() - polled > self.settings.heartbeat_interval + tick:
                self.listening_since = time.monotonic()  # we were stopped or starved (see reap)
            if woken in ready:
                os.read(woken, 4096)
            if self.pub in ready:
                self.note_subscriptions()
            if self.monitor in ready:
                self.connections.note(self.monitor)
            if self.router in ready:
                self.drain()
            if self.stacks.outside.fileno() in ready:
                self.stacks.take_outside()
            self.hear_parent()
            now = polled = time.monotonic()
            self.stacks.read_outside(now)
            self.requests.expire(now)
            self.casts.tell_progress(now)
            ticked = now >= next_tick
            if ticked:
                next_tick = now + tick
                self.reap(now)
                self.check_dropped(now)
                self.freeze_long_lived()
                self.refusals.forget_unnamed(now)
                self.connections.forget_unmapped(now)
                self.refusals.summarize(now)
                self.stalls.tick(now, self.registry.watched())
                if trouble := self.upstream.trouble(now):
                    log(trouble)
                self.pub.send_multipart([wire.EVENT_TOPIC, *self.codec.encode(wire.Tick(seq=self.events.seq))])
            self.flush(now, ticked)
            if self.registry.table.connected():
                idle_since = now
            elif self.idle_exit and now - idle_since > self.idle_exit:
                log(f"idle for {self.idle_exit:g} s, exiting")
                break
        signal.set_wakeup_fd(-1)
        os.close(woken)
        os.close(wake)
        self.refusals.summarize(time.monotonic(), final=True)
        self.upstream.close()
        self.stacks.outside.close()
        self.router.disable_monitor()
        self.monitor.close()
        self.router.close()
        self.pub.close()
        self.context.destroy(linger=0)

    def stop(self, *_: object) -> None:
        self.stopping = True

    def sleep_for(self, most: float) -> float:
        """How long the poll may wait for a message: until the first request is due to expire
        or to tell its progress (each at its deadline, not a tick late), at most `most`: a
        broker that woke at a fixed pace while a cast was in flight would wake for nothing."""
        due = min(self.requests.next_deadline(), self.casts.next_progress(), self.stacks.next_outside_read())
        return min(most, max(0.0, due - time.monotonic()))

    def collect_between_requests(self, in_flight: bool) -> None:
        """The cyclic garbage collector passes only while no request is in flight. A cast's
        answers hold no cycles and live until it settles, and the collector going over them
        again and again as they came (a million at the root of a tree) cost as much as taking
        them in. What a request leaves is freed by reference counting as it settles; a cycle
        made meanwhile waits for the next pass."""
        if in_flight == gc.isenabled():
            (gc.disable if in_flight else gc.enable)()

    def freeze_long_lived(self) -> None:
        """Once many sessions have come, put what the broker holds out of the cyclic garbage
        collector's sight (`gc.freeze`): sessions live until their ranks go on and hold no cycles,
        and one full collection over 1,048,576 of them costs the root of a tree half a second, in
        whichever cast it falls. Their memory is still freed when they end."""
        count = len(self.registry.table.sessions)
        if count - self.frozen_sessions >= FREEZE_AFTER:
            gc.freeze()
        if count - self.frozen_sessions >= FREEZE_AFTER or count < self.frozen_sessions:
            self.frozen_sessions = count

    def note_subscriptions(self) -> None:
        """Shells subscribe to output when they follow ranks (`following.py`)."""
        while True:
            try:
                frame = self.pub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if frame[1:] == wire.OUTPUT_TOPIC:
                self.following.subscribed(frame[:1] == b"\x01")

    def publish_output(self, msg: wire.Message) -> None:
        self.pub.send_multipart([wire.OUTPUT_TOPIC, *self.codec.encode(msg)])

    def check_dropped(self, now: float) -> None:
        """A rank, shell or broker below whose connection dropped is lost (a broker below with
        its ranks), at once where its process is gone from this host, else once it has not come
        back (libzmq reconnects it under its routing id) within a few heartbeats: a broker that
        was stopped finds every connection dropped by the peers' heartbeats, and each peer back.
        Busy peers keep their connections: libzmq answers heartbeats without the GIL. Processes
        that die together are told lost together: a gone one waits while another connection
        dropped less than LOST_TOGETHER ago."""
        grace = wire.LOST_AFTER_BEATS * self.settings.heartbeat_interval
        settling = any(now - since < LOST_TOGETHER for since in self.connections.dropped.values())
        for identity, since in list(self.connections.dropped.items()):
            peer = self.registry.table.peer(identity)
            if peer is None or identity in self.connections.fd_of_peer:
                del self.connections.dropped[identity]
                if peer is None:
                    self.connections.unplaced.discard(identity)
            elif peer.host == self.registry.table.host and process_gone(peer.pid):
                if settling and now - since < grace:
                    continue
                del self.connections.dropped[identity]
                self.drop(identity, wire.Ending.LOST)
            elif now - since < PIPES_SETTLE:
                continue
            elif self.connected(identity):
                del self.connections.dropped[identity]  # reconnected (or never the one that dropped)
            elif now - since > grace:
                del self.connections.dropped[identity]
                self.drop(identity, wire.Ending.LOST)

    def drain(self) -> None:
        """Handle what has arrived, a bounded number at a time, so that answers go out between
        the bounds even while a flood comes in."""
        for _ in range(DRAIN_AT_ONCE):
            try:
                if self.refusals.unnamed or self.connections.unmapped:
                    parts = self.router.recv_multipart(zmq.NOBLOCK, copy=False)
                    frames = [part.bytes for part in parts]
                    if self.connections.unmapped:
                        self.connections.learn(frames[0], parts[0])
                    if self.refusals.unnamed:
                        self.refusals.name(frames[0], parts[-1])
                else:
                    frames = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.handle(frames)

    def handle(self, frames: list[bytes]) -> None:
        identity = frames[0]
        try:
            msgs = self.codec.decode(frames[1:])
        except wire.Dropped as refusal:
            self.refusals.note(str(refusal))
            if str(refusal) == "bad signature" and self.refusals.unsigned(identity):
                self.router.send_multipart([identity, *wire.AUTH_FAILED])
            return
        self.dispatch(identity, msgs)

    # --- by peer -----------------------------------------------------------------------

    def dispatch(self, identity: bytes, msgs: list[wire.Message]) -> None:
        """Each message to the handler its sender's role has for it: a stranger may only say
        hello, and a peer that sends what its role may not is refused in the log's summary."""
        now = time.monotonic()
        for msg in msgs:
            peer = self.heard(identity, now)
            if peer is None:
                if isinstance(msg, wire.Hello):
                    self.on_hello(identity, msg)
                else:
                    self.send(identity, wire.Unknown())
                continue
            handler = self.routes[peer.role, peer.inspects].get(type(msg))
            if handler is not None:
                handler(identity, msg)
            else:
                self.refusals.count(NOT_YOURS, f"a {type(msg).__name__} from {sender(peer)}, which may not send it")
        for gone in self.registry.table.take_found_gone():
            self.drop(gone, wire.Ending.LOST)

    def heard(self, identity: bytes, now: float) -> Peer | None:
        """A peer spoke (None for a stranger); a broker that was silent answers again, its
        sessions and ranks as they were."""
        peer = self.registry.table.heard(identity, now)
        if peer is not None and peer.silent:
            peer.silent = False
            if peer.role == wire.Role.PARENT:
                log(f"the broker above at {peer.host} answers again")
            else:
                self.branches.back(peer)
        return peer

    def hear_parent(self) -> None:
        """What the broker above sent, handled as from the peer UPSTREAM; after each welcome
        as a stranger it learns everything below us anew. One that only stalled welcomes us as
        known: it is our parent still, with all we told it and the sessions it holds here."""
        msgs: list[wire.Message] = []
        for item in self.upstream.take():
            if item is JOINED:
                self.dispatch(UPSTREAM, msgs)
                msgs = []
                self.parent_joined()
            else:
                msgs.append(cast(wire.Message, item))
        self.dispatch(UPSTREAM, msgs)
        if self.upstream.ready:
            self.heard(UPSTREAM, time.monotonic())

    def parent_joined(self) -> None:
        self.drop(UPSTREAM, wire.Ending.RECONNECTED)
        self.registry.table.join(
            Peer(
                identity=UPSTREAM,
                role=wire.Role.PARENT,
                name="parent",
                host=self.upstream.address,
                pid=0,
                user="",
                last_seen=time.monotonic(),
            )
        )
        self.upstream.rejoined(self.registry)
        self.following.parent_joined()
        log(f"registered with the broker above at {self.upstream.address}")

    def on_hello(self, identity: bytes, msg: wire.Hello) -> None:
        """Know a new connection; a hello said again on a known one keeps its sessions."""
        if msg.role not in (wire.Role.RANK, wire.Role.SHELL, wire.Role.BROKER):
            self.send(identity, wire.Error(text=f"unknown role {msg.role!r}"))
            return
        self.connections.said_hello(identity)
        joined = not self.registry.table.knows(identity, msg.role, msg.link)
        if joined:
            self.drop(identity, wire.Ending.RECONNECTED)
            first_of_job = self.registry.table.join(
                Peer(
                    identity=identity,
                    role=msg.role,
                    name=msg.job if msg.role == wire.Role.RANK else msg.client or "",
                    host=msg.host,
                    pid=msg.pid,
                    user=msg.user,
                    last_seen=time.monotonic(),
                    link=msg.link,
                )
            )
            if first_of_job:
                log(f"job {msg.job} joined ({msg.host}, pid {msg.pid})")
        self.send(
            identity,
            wire.Welcome(
                pub=self.pub_endpoint,
                heartbeat=self.settings.heartbeat_interval,
                broker_pid=os.getpid(),
                seq=self.events.seq,
                known=not joined,
            ),
        )
        if joined and msg.role == wire.Role.BROKER:
            self.branches.joined(identity, msg.host, msg.pid)
            self.following.branch_joined(identity)

    def on_heartbeat(self, identity: bytes, msg: wire.Heartbeat) -> None:
        """A shell's or a broker below's probe of whether we answer, answered. No shell is judged
        by its own: every peer lives as long as its connection (`check_dropped`); only a broker
        below's silence counts, as its ranks unreachable (`reap`)."""
        self.send(identity, wire.Heartbeat())

    def on_bye(self, identity: bytes, msg: wire.Bye) -> None:
        self.drop(identity, wire.Ending.RETURNED)

    def on_catch_up(self, identity: bytes, msg: wire.CatchUp) -> None:
        self.send(identity, wire.Events(rows=self.events.since(msg.since)))

    def reap(self, now: float) -> None:
        """Mark every broker (below, and the parent) silent for a few heartbeats while we
        listened as not answering: never lost for it. A broker that was stopped or starved
        (SIGSTOP, a swapped-out host) heard nobody: its peers' messages wait unread, so their
        silence counts from when it listens again. The parent's link looks for it for as long as
        we run, and what it holds here stays its own until it answers, or welcomes us as a
        stranger (it restarted). A broker below that does not answer has its ranks unreachable;
        it is lost with them only once its connection is gone (`check_dropped`)."""
        limit = wire.LOST_AFTER_BEATS * self.settings.heartbeat_interval
        for identity in self.registry.table.silent(now, limit, self.listening_since):
            peer = self.registry.table.peer(identity)
            assert peer is not None
            if identity == UPSTREAM:
                peer.silent = True
                log(f"the broker above at {self.upstream.address} does not answer; what it asked waits for it")
            else:
                self.branches.unreachable(peer)

    def connected(self, identity: bytes) -> bool:
        """Whether a peer's connection stands: ZeroMQ forgets a peer's name once its
        connection closes, and a ROUTER made to refuse what it cannot route says so. (A
        heartbeat goes to one that stands, which it takes as nothing.)"""
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        try:
            self.router.send_multipart([identity, *self.codec.encode(wire.Heartbeat())])
            return True
        except zmq.ZMQError as error:
            if error.errno != zmq.EHOSTUNREACH:
                raise
            return False
        finally:
            self.router.setsockopt(zmq.ROUTER_MANDATORY, 0)

    def drop(self, identity: bytes, reason: wire.Ending) -> None:
        gone = self.registry.table.leave(identity, reason)
        if gone is None:
            return
        for sess in gone.freed:
            self.sessions.publish(wire.EventKind.RELEASED, sess)
            if self.registry.table.is_branch(sess.peer):
                self.send(sess.peer, wire.Detach(session=sess.sid))
            self.sessions.hand_back(sess)
        role = gone.peer.role
        if role == wire.Role.BROKER:
            self.branches.lost(gone.peer, reason, gone.ended)
            return
        for sess in gone.ended:
            self.sessions.end(sess, "", reason)
        if role == wire.Role.RANK and reason == wire.Ending.LOST:
            self.running_lost(gone.peer, gone.ended)
        if role == wire.Role.RANK and reason != wire.Ending.RECONNECTED:
            self.requests.lost(identity, wire.Ending.LOST)
        if role == wire.Role.SHELL and reason != wire.Ending.RECONNECTED and self.breakpoints.gone(identity):
            how = "was lost" if reason == wire.Ending.LOST else "disconnected"
            log(
                f"the editor on {gone.peer.host} (pid {gone.peer.pid}) {how}: its breakpoints and exception filter "
                "are removed from every rank"
            )
        if gone.job_left:
            log(f"job {gone.peer.name} left ({reason})")
        if role == wire.Role.RANK:
            self.sessions.below_changed()

    def running_lost(self, peer: Peer, ended: list[Session]) -> None:
        """The ranks a lost process ran without a session are lost too (killed, or torn down
        with their job), and told as those with one are; the broker above learns them."""
        with_session = {(sess.job, sess.actor, sess.rank) for sess in ended}
        lost: dict[tuple[str, str], list[int]] = {}
        for job, actor, rank, *_ in peer.present:
            if (job, actor, rank) not in with_session:
                lost.setdefault((job, actor), []).append(rank)
        for (job, actor), ranks_lost in lost.items():
            self.sessions.announce_lost(job, actor, ranks_lost)

    def settled(self, request: Request) -> None:
        """A cast of the broker above has its answer: its sessions that still run are news."""
        if request.shell == UPSTREAM and isinstance(request, CastInFlight):
            self.upstream.cast_answered(self.registry, request.pending)

    # --- sending -----------------------------------------------------------------------

    def send(self, identity: bytes, msg: wire.Message) -> None:
        """Queue a message; `flush` sends each peer's queue as few signed batches (the broker
        above's through its link, which drops them where there is none). The stall watcher's
        requests are answered to it, not to a socket."""
        if identity == STALLS:
            self.stalls.take(msg)
            return
        self.outbox.setdefault(identity, []).append(msg)

    def flush(self, now: float | None = None, ticked: bool = False) -> None:
        for event in self.events.take():
            self.pub.send_multipart([wire.EVENT_TOPIC, *self.codec.encode(event)])
        up = self.upstream.outgoing(self.registry, time.monotonic() if now is None else now, ticked)
        self.upstream.post(up + self.outbox.pop(UPSTREAM, []))
        for identity, msgs in self.outbox.items():
            for frames in self.codec.encode_many(msgs):
                self.router.send_multipart([identity, *frames])
        self.outbox.clear()

    def send_parts(self, identity: bytes, parts: Iterable[wire.Message]) -> None:
        """Send the parts of a long answer now, after what was queued for the peer, each
        encoded as it is made: only one part's rows are held at a time, and the memory a whole
        answer would take at once is never taken (the allocator would keep it)."""
        if identity == UPSTREAM:
            for part in parts:
                self.send(identity, part)
            return
        if queued := self.outbox.pop(identity, None):
            for frames in self.codec.encode_many(queued):
                self.router.send_multipart([identity, *frames])
        for part in parts:
            self.router.send_multipart([identity, *self.codec.encode(part)])
