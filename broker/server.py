"""The broker's poll loop: one ROUTER for agents and shells, one PUB for events.

Single-threaded on purpose: every piece of state is touched by this loop only, so there is
nothing to lock. The ZeroMQ guide's ROUTER broker is the model.
"""

from __future__ import annotations

import gc
import getpass
import math
import os
import resource
import signal
import sys
import time
from sys import intern
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import TextIO

import zmq
from zmq.utils.monitor import recv_monitor_message

from monarch_pdb import curve, discovery, ranks, wire
from monarch_pdb.broker.casts import CastInFlight, Casts
from monarch_pdb.broker.events import HISTORY, EventLog
from monarch_pdb.broker.inflight import InFlight, Request, below_timeout, row_parts
from monarch_pdb.broker.breakpoints import Breakpoints
from monarch_pdb.broker.inspections import Inspections
from monarch_pdb.broker.list_groups import group_parts, group_rows, group_sessions
from monarch_pdb.broker.peeks import Peeks
from monarch_pdb.broker.registry import (LIVE, STOP_STATES, LiveRank, Peer, Picked, Refused, Registry,
                                         Session, State, no_match, process_gone)
from monarch_pdb.broker.stacks import StacksInFlight
from monarch_pdb.broker.upstream import JOINED, UPSTREAM, Upstream
from monarch_pdb.link import zmtp_heartbeats
from monarch_pdb.settings import Settings

PROGRESS_EVERY = 0.25
PROGRESS_UP_EVERY = 1.0
PROGRESS_HEARD_PER_SECOND = 8
"""About how many words of progress a broker asks to hear a second from its brokers below
together, however many they are: 64 telling it each second through a cast that takes 19 s on
two cores were most of the root's CPU for a cast of one answer."""
"""Seconds between two words to the broker above on how far one of its casts got here."""
FREEZE_AFTER = 65536
"""New sessions since the broker last froze what it holds that make it freeze again."""
TOLD_UNSIGNED = 4096
REFUSALS_LOGGED_EVERY = 10.0
DRAIN_AT_ONCE = 1024
PIPES_SETTLE = 0.1
"""Seconds after a connection drops before the ROUTER is asked whether its peer can be reached:
the socket forgets a dropped connection a moment after the monitor tells of it."""


def log(text: str) -> None:
    print(f"monarch-pdb broker: {text}", file=sys.stderr, flush=True)


@dataclass
class Broker:
    settings: Settings
    secret: str
    idle_exit: float = 0.0
    audit: TextIO | None = None
    events: EventLog = field(default_factory=EventLog)
    outbox: dict[bytes, list[wire.Message]] = field(default_factory=dict)
    told_unsigned: OrderedDict = field(default_factory=OrderedDict)
    """Peers already told that their signatures fail: each is told once."""
    unnamed: OrderedDict = field(default_factory=OrderedDict)
    """Those of them whose address is not yet known, and since when (see `drain`)."""
    refused_addresses: set = field(default_factory=set)
    """Addresses named in the log as sending what our secret did not sign: each is named once."""
    pub_endpoint: str = ""
    refused_logged: int = 0
    refusals_logged_at: float = float("-inf")
    latest_refusal: str = ""
    stopping: bool = False
    listening_since: float = float("-inf")
    """When the poll loop last came back from a pause longer than a heartbeat."""
    upstream: Upstream | None = None
    """The link to the broker above, if this one has one (`start_upstream`)."""
    parent_wants_output: bool = False
    attaching: dict[bytes, deque] = field(default_factory=dict)
    """For each broker below, the shells whose attach it has yet to answer, in order."""
    frozen_sessions: int = 0
    """How many sessions the broker held when it last froze what it holds (`freeze_long_lived`)."""
    unmapped: dict[int, float] = field(default_factory=dict)
    """Connections accepted whose peer is not yet known, by descriptor, and since when (see `drain`)."""
    peer_of_fd: dict[int, bytes] = field(default_factory=dict)
    fd_of_peer: dict[bytes, int] = field(default_factory=dict)
    unplaced: set = field(default_factory=set)
    """Peers that said hello on a connection not known by its descriptor (its first message came
    before the monitor said it was accepted): any connection dropped unnamed may be theirs."""
    dropped: dict[bytes, float] = field(default_factory=dict)
    """Peers whose connection dropped, and when: lost unless they reconnect (see `check_dropped`)."""

    def __post_init__(self) -> None:
        self.codec = wire.Codec(self.secret.encode(), max_body=self.settings.max_message, max_age=self.settings.max_age)
        self.registry = Registry(history_limit=self.settings.session_history,
                                 sessions_per_connection=self.settings.max_sessions_per_connection)
        self.casts = Casts(part_size=self.settings.max_message // 2)
        self.stacks: InFlight[StacksInFlight] = InFlight(part_size=self.settings.max_message // 2)
        self.inspections = Inspections()
        self.peeks = Peeks(self)
        self.breakpoints = Breakpoints(self)
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
        self.followed = False
        if self.settings.curve:
            curve.serve(self.router, self.secret)
            curve.serve(self.pub, self.secret)
        self.handlers = {
            wire.Hello: self.on_hello,
            wire.Heartbeat: self.on_heartbeat,
            wire.Bye: self.on_bye,
            wire.Prompt: self.on_prompt,
            wire.Output: self.on_output,
            wire.Ended: self.on_ended,
            wire.ListSessions: self.on_list,
            wire.ListJobs: self.on_jobs,
            wire.Attach: self.on_attach,
            wire.Detach: self.on_detach,
            wire.Send: self.on_send,
            wire.Cast: self.on_cast,
            wire.Continue: self.on_continue,
            wire.CatchUp: self.on_catch_up,
            wire.Follow: self.on_follow,
            wire.OutputSince: self.on_output_since,
            wire.Present: self.on_present,
            wire.ListAll: self.on_list_all,
            wire.Stacks: self.on_stacks,
            wire.StackReport: self.on_stack_report,
            wire.Interrupt: self.on_interrupt,
            wire.Inspect: self.on_inspect,
            wire.Inspection: self.on_inspection,
            wire.Complete: self.on_complete,
            wire.Completions: self.on_inspection,
            # from the broker above
            wire.CastDown: self.on_cast_down,
            wire.TakeStacks: self.on_take_stacks,
            wire.InterruptRanks: self.on_interrupt_ranks,
            wire.OutputWanted: self.on_output_wanted,
            # from brokers below
            wire.BranchSessions: self.on_branch_sessions,
            wire.BranchRanks: self.on_branch_ranks,
            wire.BranchEnded: self.on_branch_ended,
            wire.BranchLost: self.on_branch_lost,
            wire.BranchOutput: self.on_branch_output,
            wire.CastResult: self.on_cast_result,
            wire.CastProgress: self.on_cast_progress,
            wire.StacksResult: self.on_stacks_result,
            wire.Attached: self.on_attached,
            wire.Error: self.on_branch_error,
            wire.SessionOutput: self.on_branch_session_output,
            wire.SessionEnded: self.on_branch_session_ended,
            # peek, from each peer that takes part
            **self.peeks.handlers(),
            # an editor's breakpoints, from the editor and the agents
            **self.breakpoints.handlers(),
        }

    # --- life cycle --------------------------------------------------------------------

    def bind(self) -> discovery.Connection:
        host = discovery.bind_host(self.settings.host)
        self.router.bind(discovery.endpoint(host, self.settings.port))
        self.pub.bind(discovery.endpoint(host, 0))
        router = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        pub = self.pub_endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        return discovery.Connection(router=router, pub=pub, secret=self.secret, pid=os.getpid(), curve=self.settings.curve)

    def start_upstream(self, address: str) -> None:
        """Register everything below us with the broker at `address`, and serve it."""
        self.upstream = Upstream(self.settings, address, self.secret, self.context,
                                 lambda msg: self.send(UPSTREAM, msg))

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
        if self.upstream is not None:
            poller.register(self.upstream.woken, zmq.POLLIN)
        tick = max(0.05, self.settings.heartbeat_interval / 2)
        idle_since = next_tick = polled = time.monotonic()
        while not self.stopping:
            in_flight = self.casts or self.stacks or self.peeks.table or self.breakpoints.table
            self.collect_between_requests(bool(in_flight))
            ready = dict(poller.poll(math.ceil(self.sleep_for(tick) * 1000)))
            if time.monotonic() - polled > self.settings.heartbeat_interval + tick:
                self.listening_since = time.monotonic()  # we were stopped or starved (see reap)
            if woken in ready:
                os.read(woken, 4096)
            if self.pub in ready:
                self.note_subscriptions()
            if self.monitor in ready:
                self.note_connections()
            if self.router in ready:
                self.drain()
            if self.upstream is not None:
                self.hear_parent()
            now = polled = time.monotonic()
            self.expire(now)
            ticked = now >= next_tick
            if ticked:
                next_tick = now + tick
                self.reap(now)
                self.check_dropped(now)
                self.freeze_long_lived()
                self.forget_unnamed(now)
                self.forget_unmapped(now)
                self.summarize_refusals(now)
                if self.upstream is not None and (trouble := self.upstream.trouble(now)):
                    log(trouble)
                self.pub.send_multipart([wire.EVENT_TOPIC, *self.codec.encode(wire.Tick(seq=self.events.seq))])
            self.flush(now, ticked)
            if self.registry.connected():
                idle_since = now
            elif self.idle_exit and now - idle_since > self.idle_exit:
                log(f"idle for {self.idle_exit:g} s, exiting")
                break
        signal.set_wakeup_fd(-1)
        os.close(woken)
        os.close(wake)
        self.summarize_refusals(time.monotonic(), final=True)
        if self.upstream is not None:
            self.upstream.close()
        self.router.disable_monitor()
        self.monitor.close()
        self.router.close()
        self.pub.close()
        self.context.destroy(linger=0)

    def stop(self, *_: object) -> None:
        self.stopping = True

    def sleep_for(self, most: float) -> float:
        """How long the poll may wait for a message: until the first request is due to expire
        or to tell its progress (each at its deadline, not a tick late), at most `most`. A
        broker that woke at a fixed pace while a cast was in flight woke eight times a second
        through a long one, for nothing."""
        due = [request.deadline for table in (self.casts, self.stacks, self.peeks.table, self.breakpoints.table)
               for request in table]
        due += [cast.next_progress for cast in self.casts]
        return min(most, max(0.0, min(due, default=math.inf) - time.monotonic()))

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
        count = len(self.registry.sessions)
        if count - self.frozen_sessions >= FREEZE_AFTER:
            gc.freeze()
        if count - self.frozen_sessions >= FREEZE_AFTER or count < self.frozen_sessions:
            self.frozen_sessions = count

    def note_subscriptions(self) -> None:
        """Output is published only while some shell follows ranks, so casts cost nothing extra
        otherwise; each new follower is told when its subscription is live. (A verbose XPUB
        passes every subscription, and the last unsubscription.)"""
        while True:
            try:
                frame = self.pub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if frame[1:] == wire.OUTPUT_TOPIC:
                was_wanted = self.output_wanted
                self.followed = frame[:1] == b"\x01"
                if self.followed:
                    self.pub.send_multipart([wire.OUTPUT_TOPIC, *self.codec.encode(wire.OutputLive())])
                self.tell_branches_output(was_wanted)

    @property
    def output_wanted(self) -> bool:
        """Some shell follows ranks, here or above: brokers below send what they print."""
        return self.followed or self.parent_wants_output

    def tell_branches_output(self, was_wanted: bool) -> None:
        if self.output_wanted != was_wanted:
            for branch in self.registry.branches():
                self.send(branch.identity, wire.OutputWanted(on=self.output_wanted))

    def note_connections(self) -> None:
        """Connections come and go (the socket monitor's events, each in order before anything
        the new connection sends): a dropped one is looked at by `check_dropped`. A connection
        is known by its descriptor until its peer's first message names it (`drain`)."""
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            fd = event["value"]
            if event["event"] == zmq.EVENT_ACCEPTED:
                self.unmapped[fd] = time.monotonic()
                continue
            self.unmapped.pop(fd, None)
            identity = self.peer_of_fd.pop(fd, None)
            if identity is None:
                for unplaced in self.unplaced:
                    self.dropped.setdefault(unplaced, time.monotonic())
            elif self.fd_of_peer.get(identity) == fd:
                del self.fd_of_peer[identity]
                self.dropped[identity] = time.monotonic()

    def check_dropped(self, now: float) -> None:
        """A rank, shell or broker below whose connection dropped is lost (a broker below with
        its ranks), at once where its process is gone from this host, else once it has not come
        back (libzmq reconnects it under its routing id) within a few heartbeats: a broker that
        was stopped finds every connection dropped by the peers' heartbeats, and each peer back.
        Busy peers keep their connections: libzmq answers heartbeats without the GIL."""
        grace = wire.LOST_AFTER_BEATS * self.settings.heartbeat_interval
        for identity, since in list(self.dropped.items()):
            peer = self.registry.peer(identity)
            if peer is None or identity in self.fd_of_peer:
                del self.dropped[identity]
                if peer is None:
                    self.unplaced.discard(identity)
            elif peer.host == self.registry.host and process_gone(peer.pid):
                del self.dropped[identity]
                self.drop(identity, wire.Ending.LOST)
            elif now - since < PIPES_SETTLE:
                continue
            elif self.connected(identity):
                del self.dropped[identity]  # reconnected (or never the one that dropped)
            elif now - since > grace:
                del self.dropped[identity]
                self.drop(identity, wire.Ending.LOST)

    def learn_connection(self, identity: bytes, frame: zmq.Frame) -> None:
        """The peer on a connection not yet known, from its first message."""
        try:
            fd = frame.get(zmq.SRCFD)
        except zmq.ZMQError:  # a message that carries no descriptor (its connection is gone)
            return
        if self.unmapped.pop(fd, None) is not None:
            self.peer_of_fd[fd] = identity
            self.fd_of_peer[identity] = fd
            self.dropped.pop(identity, None)
            self.unplaced.discard(identity)

    def forget_unmapped(self, now: float) -> None:
        """A connection that said nothing for a while (a port probe that stays) stays unknown."""
        while self.unmapped and now - next(iter(self.unmapped.values())) > REFUSALS_LOGGED_EVERY:
            self.unmapped.pop(next(iter(self.unmapped)))

    def drain(self) -> None:
        """Handle what has arrived, a bounded number at a time, so that answers go out between
        the bounds even while a flood comes in."""
        for _ in range(DRAIN_AT_ONCE):
            try:
                if self.unnamed or self.unmapped:
                    parts = self.router.recv_multipart(zmq.NOBLOCK, copy=False)
                    frames = [part.bytes for part in parts]
                    if self.unmapped:
                        self.learn_connection(frames[0], parts[0])
                    if self.unnamed:
                        self.name_refused(frames[0], parts[-1])
                else:
                    frames = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.handle(frames)

    def name_refused(self, identity: bytes, frame: zmq.Frame) -> None:
        """Name, once, the address of a peer whose signature failed, from its next message:
        a message carries its connection's address only as a frame, which costs more than bytes
        to receive, so frames are taken only while some refused peer is still unnamed."""
        if self.unnamed.pop(identity, None) is None:
            return
        try:
            address = frame.get("Peer-Address")
        except zmq.ZMQError:
            return
        if address not in self.refused_addresses and len(self.refused_addresses) < TOLD_UNSIGNED:
            self.refused_addresses.add(address)
            log(f"refused a peer at {address}: what it sends is not signed with our secret (is the secret the same?)")

    def handle(self, frames: list[bytes]) -> None:
        identity = frames[0]
        try:
            msgs = self.codec.decode(frames[1:])
        except wire.Refused as refusal:
            self.note_refusal(str(refusal))
            if str(refusal) == "bad signature" and identity not in self.told_unsigned:
                self.told_unsigned[identity] = None
                self.unnamed[identity] = time.monotonic()
                for table in (self.told_unsigned, self.unnamed):
                    if len(table) > TOLD_UNSIGNED:
                        table.popitem(last=False)
                self.router.send_multipart([identity, *wire.AUTH_FAILED])
            return
        self.dispatch(identity, msgs)

    def hear_parent(self) -> None:
        """What the broker above sent, handled as from the peer UPSTREAM; after each welcome
        as a stranger it learns everything below us anew. One that only stalled welcomes us as
        known: it is our parent still, with all we told it and the sessions it holds here."""
        assert self.upstream is not None
        msgs = []
        for item in self.upstream.take():
            if item is JOINED:
                self.dispatch(UPSTREAM, msgs)
                msgs = []
                self.parent_joined()
            else:
                msgs.append(item)
        self.dispatch(UPSTREAM, msgs)
        if self.upstream.ready:
            self.heard(UPSTREAM, time.monotonic())

    def parent_joined(self) -> None:
        assert self.upstream is not None
        was_wanted = self.output_wanted
        self.drop(UPSTREAM, wire.Ending.RECONNECTED)
        self.registry.join(self.parent_peer())
        self.upstream.rejoined(self.registry)
        self.parent_wants_output = False
        self.tell_branches_output(was_wanted)
        log(f"registered with the broker above at {self.upstream.address}")

    def parent_peer(self) -> Peer:
        assert self.upstream is not None
        return Peer(identity=UPSTREAM, role=wire.Role.PARENT, name="parent", host=self.upstream.address, pid=0,
                    user="", last_seen=time.monotonic())

    def dispatch(self, identity: bytes, msgs: list[wire.Message]) -> None:
        now = time.monotonic()
        for msg in msgs:
            if self.heard(identity, now) is None and not isinstance(msg, wire.Hello):
                self.send(identity, wire.Unknown())
                continue
            handler = self.handlers.get(type(msg))
            if handler is not None:
                handler(identity, msg)
        for gone in self.registry.take_found_gone():
            self.drop(gone, wire.Ending.LOST)

    def heard(self, identity: bytes, now: float) -> Peer | None:
        """A peer spoke (None for a stranger); a broker that was silent answers again, its
        sessions and ranks as they were."""
        peer = self.registry.heard(identity, now)
        if peer is not None and peer.silent:
            peer.silent = False
            if peer.role == wire.Role.PARENT:
                log(f"the broker above at {peer.host} answers again")
            else:
                self.events.add_broker(wire.EventKind.BROKER_BACK, peer.host, ranks_below(peer))
                log(f"the broker below on {peer.host} (pid {peer.pid}) answers again")
        return peer

    def note_refusal(self, reason: str) -> None:
        """At most one summary line every REFUSALS_LOGGED_EVERY seconds, never one per message."""
        self.latest_refusal = reason
        self.summarize_refusals(time.monotonic())

    def forget_unnamed(self, now: float) -> None:
        """Refused peers that said nothing more within a summary's time stay unnamed."""
        while self.unnamed and now - next(iter(self.unnamed.values())) > REFUSALS_LOGGED_EVERY:
            self.unnamed.popitem(last=False)

    def summarize_refusals(self, now: float, final: bool = False) -> None:
        total = sum(self.codec.refused.values())
        if total == self.refused_logged or (now - self.refusals_logged_at < REFUSALS_LOGGED_EVERY and not final):
            return
        self.refused_logged, self.refusals_logged_at = total, now
        counts = ", ".join(f"{n} {why}" for why, n in self.codec.refused.most_common())
        log(f"dropped {total} bad messages so far ({counts}); latest: {self.latest_refusal}")

    def reap(self, now: float) -> None:
        """Mark every broker (below, and the parent) silent for a few heartbeats while we
        listened as not answering: never lost for it. A broker that was stopped or starved
        (SIGSTOP, a swapped-out host) heard nobody: its peers' messages wait unread, so their
        silence counts from when it listens again. The parent's link looks for it for as long as
        we run, and what it holds here stays its own until it answers, or welcomes us as a
        stranger (it restarted). A broker below that does not answer has its ranks unreachable;
        it is lost with them only once its connection is gone (`check_dropped`)."""
        limit = wire.LOST_AFTER_BEATS * self.settings.heartbeat_interval
        for identity in self.registry.silent(now, limit, self.listening_since):
            peer = self.registry.peer(identity)
            if identity == UPSTREAM:
                peer.silent = True
                log(f"the broker above at {self.upstream.address} does not answer; what it asked waits for it")
            else:
                self.unreachable(peer)

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

    def unreachable(self, peer: Peer) -> None:
        """A broker below does not answer: one event that names its host, and nothing waits
        for it; its sessions stay, held as they were, and lines sent to them wait for it."""
        peer.silent = True
        why = unreachable_because(peer.host)
        for table in (self.casts, self.stacks, self.peeks.table, self.breakpoints.table):
            for request in table:
                request.lost(peer.identity, why)
                self.settle(table, request)
        count = ranks_below(peer)
        self.events.add_broker(wire.EventKind.BROKER_SILENT, peer.host, count)
        log(f"the broker below on {peer.host} (pid {peer.pid}) does not answer; its {count} ranks are unreachable")

    def skip_unreachable(self, request: Request) -> None:
        """Ask nothing of a broker below that does not answer: its ranks are named at once."""
        for branch in self.registry.branches():
            if branch.silent:
                request.lost(branch.identity, unreachable_because(branch.host))

    def drop(self, identity: bytes, reason: wire.Ending) -> None:
        branch = self.registry.is_branch(identity)
        gone = self.registry.leave(identity, reason)
        if gone is None:
            return
        for sess in gone.freed:
            self.publish(wire.EventKind.RELEASED, sess)
            if self.registry.is_branch(sess.peer):
                self.send(sess.peer, wire.Detach(session=sess.sid))
            self.hand_back(sess)
        if branch:
            self.lose_branch(gone.peer, reason, gone.ended)
            return
        for sess in gone.ended:
            self.end_session(sess, "", reason)
        if gone.peer.role == wire.Role.AGENT and reason == wire.Ending.LOST:
            self.running_lost(gone.peer, gone.ended)
        if gone.peer.role == wire.Role.AGENT and reason != wire.Ending.RECONNECTED:
            for table in (self.stacks, self.peeks.table, self.breakpoints.table):
                for request in table:
                    request.lost(identity)
                    self.settle(table, request)
        if gone.peer.role == wire.Role.SHELL and reason != wire.Ending.RECONNECTED and self.breakpoints.gone(identity):
            how = "was lost" if reason == wire.Ending.LOST else "disconnected"
            log(f"the editor on {gone.peer.host} (pid {gone.peer.pid}) {how}: its breakpoints and exception filter "
                "are removed from every rank")
        if gone.job_left:
            log(f"job {gone.peer.name} left ({reason})")
        if gone.peer.role == wire.Role.AGENT:
            self.below_changed()

    def running_lost(self, peer: Peer, ended: list[Session]) -> None:
        """The ranks a lost process ran without a session are lost too (killed, or torn down
        with their job), and told as those with one are; the broker above learns them."""
        with_session = {(sess.job, sess.actor, sess.rank) for sess in ended}
        lost: dict[tuple[str, str], list[int]] = {}
        for job, actor, rank, *_ in peer.present:
            if (job, actor, rank) not in with_session:
                lost.setdefault((job, actor), []).append(rank)
        for (job, actor), ranks_lost in lost.items():
            self.announce_lost(job, actor, ranks_lost)

    def announce_lost(self, job: str, actor: str, ranks_lost: list[int]) -> None:
        for rank in ranks_lost:
            self.events.add(wire.EventKind.LOST, job, actor, rank, "", wire.Ending.LOST)
        if self.upstream is not None:
            self.send(UPSTREAM, wire.BranchLost(job=job, actor=actor, ranks=ranks_lost))

    def lose_branch(self, peer: Peer, reason: wire.Ending, ended: list[Session]) -> None:
        """A broker below is gone: its ranks are lost, in one event that names its host, and
        nothing waits for it any more."""
        host = peer.host
        why = f"lost with the broker on {host}"
        for sess in ended:
            if sess.holder is not None:
                self.send(sess.holder, wire.SessionEnded(session=sess.id, text="", reason=wire.Ending.LOST))
            if self.upstream is not None:
                self.upstream.ended(sess, "", wire.Ending.LOST)
        for table in (self.casts, self.stacks, self.peeks.table, self.breakpoints.table):
            for request in table:
                request.lost(peer.identity, why)
                self.settle(table, request)
        self.attaching.pop(peer.identity, None)
        ranks_lost = ranks_below(peer, ended)
        stopped = "stopped answering" if reason == wire.Ending.LOST else "shut down"
        self.events.add_broker(wire.EventKind.BROKER_LOST, host, ranks_lost, stopped)
        log(f"the broker below on {host} (pid {peer.pid}) {stopped}; {ranks_lost} ranks lost with it")
        self.below_changed()

    # --- requests in flight --------------------------------------------------------------

    def settle(self, table: InFlight, request: Request, expired: bool = False) -> None:
        """Send a request's result to its shell once it is done (or `expired`)."""
        parts = table.settle(request, expired)
        if parts and request.refusal and request.picked_nothing:
            parts = [wire.Error(text=request.refusal())]
        for part in parts:
            self.send(request.shell, part)
        if parts and request.shell == UPSTREAM and isinstance(request, CastInFlight):
            self.upstream.cast_answered(self.registry, request.pending)

    def expire(self, now: float) -> None:
        for table in (self.casts, self.stacks, self.peeks.table, self.breakpoints.table):
            for request in table.overdue(now):
                self.settle(table, request, expired=True)
        for cast in self.casts.progress_due(now, PROGRESS_EVERY, PROGRESS_UP_EVERY):
            self.send(cast.shell, wire.CastProgress(ref=cast.ref, answered=cast.answered, total=cast.expected))

    # --- sending -----------------------------------------------------------------------

    def send(self, identity: bytes, msg: wire.Message) -> None:
        """Queue a message; `flush` sends each peer's queue as few signed batches."""
        self.outbox.setdefault(identity, []).append(msg)

    def flush(self, now: float | None = None, ticked: bool = False) -> None:
        for event in self.events.take():
            self.pub.send_multipart([wire.EVENT_TOPIC, *self.codec.encode(event)])
        if self.upstream is not None:
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

    def publish(self, kind: wire.EventKind, sess: Session, detail: str = "") -> None:
        where = intern(f"{os.path.basename(sess.filename)}:{sess.lineno}") if sess.filename else ""
        self.events.add(kind, sess.job, sess.actor, sess.rank, where, detail)

    def record_output(self, sess: Session, text: str) -> None:
        """Keep a chunk of a session's output, and publish it when some shell follows ranks
        (here, or above: then it goes up too)."""
        if not text:
            return
        seq = self.registry.output_log(sess).add(text)
        if self.followed:
            printed = wire.Printed(session=sess.id, seq=seq, job=sess.job, actor=sess.actor, rank=sess.rank, text=text)
            self.pub.send_multipart([wire.OUTPUT_TOPIC, *self.codec.encode(printed)])
        if self.upstream is not None:
            self.upstream.printed(sess, text)

    def end_session(self, sess: Session, text: str, reason: str) -> None:
        if reason != wire.Ending.LOST and sess.cast in self.casts:
            self.record_output(sess, text)
        for cast in self.casts.ended(sess, reason):
            self.settle(self.casts, cast)
        self.to_holder(sess, wire.SessionEnded(session=sess.id, text=text, reason=reason))
        if self.upstream is not None:
            self.upstream.ended(sess, text, reason)
        self.registry.end(sess, reason)
        self.publish(wire.EventKind.LOST if reason == wire.Ending.LOST else wire.EventKind.ENDED, sess, reason)

    def forward(self, sess: Session, line: str, release: bool = False, colour: bool = False) -> None:
        """Hand one line to a session's pdb. The broker above learns that it runs on, unless
        the line is of its own cast, whose result tells it."""
        self.send(sess.peer, wire.Input(sid=sess.sid, cmd=sess.resume(release), line=line, release=release,
                                        colour=colour))
        cast = self.casts.get(sess.cast)
        if self.upstream is not None and (cast is None or cast.shell != UPSTREAM):
            self.upstream.sent_line(sess, time.monotonic())

    def tell_holders(self, sessions: list[Session], by: bytes, release: bool = False) -> None:
        """The client that holds each session, unless it is `by` (whose line it is), learns
        that the session runs: what it shows of it is past."""
        for sess in sessions:
            if sess.holder is not None and sess.holder != by:
                holder = self.registry.peer(sess.holder)
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
        if editor is not None and self.registry.peer(editor) is not None and sess.holder is None:
            self.registry.hold(editor, sess)
            self.now_held(editor, sess)

    def below_changed(self) -> None:
        """The ranks without a session changed: the broker above learns them again."""
        if self.upstream is not None:
            self.upstream.ranks_due = True

    def selected(self, identity: bytes, job: str, actor: str, selector: str, live: bool = False) -> tuple[list, list]:
        """What a selector picks (`Registry.select`); nothing after telling the shell why."""
        try:
            return self.registry.select(job, actor, selector, live)
        except Refused as refusal:
            self.send(identity, wire.Error(text=str(refusal)))
            return [], []

    # --- every peer --------------------------------------------------------------------

    def on_hello(self, identity: bytes, msg: wire.Hello) -> None:
        """Know a new connection; a hello said again on a known one keeps its sessions."""
        if msg.role not in (wire.Role.AGENT, wire.Role.SHELL, wire.Role.BROKER):
            self.send(identity, wire.Error(text=f"unknown role {msg.role!r}"))
            return
        if identity not in self.fd_of_peer:
            self.unplaced.add(identity)
        joined = not self.registry.knows(identity, msg.role, msg.link)
        if joined:
            self.drop(identity, wire.Ending.RECONNECTED)
            first_of_job = self.registry.join(Peer(
                identity=identity, role=msg.role, name=msg.job if msg.role == wire.Role.AGENT else msg.client or "",
                host=msg.host, pid=msg.pid, user=msg.user, last_seen=time.monotonic(), link=msg.link,
            ))
            if first_of_job:
                log(f"job {msg.job} joined ({msg.host}, pid {msg.pid})")
        self.send(identity, wire.Welcome(pub=self.pub_endpoint, heartbeat=self.settings.heartbeat_interval,
                                         broker_pid=os.getpid(), seq=self.events.seq, known=not joined))
        if joined and msg.role == wire.Role.BROKER:
            self.attaching[identity] = deque()
            if self.output_wanted:
                self.send(identity, wire.OutputWanted(on=True))
            self.events.add_broker(wire.EventKind.BROKER_JOINED, msg.host, 0)
            log(f"a broker below joined from {msg.host} (pid {msg.pid})")

    def record(self, identity: bytes, job: str, actor: str, ranks_sent: Iterable[int], line: str,
               below: str = "") -> None:
        """The audit log: one line per command sent to ranks (and the selector that picks
        more below, where it is evaluated there), and who sent it."""
        if self.audit is None:
            return
        shell = self.registry.peer(identity)
        who = shell.describe() if shell is not None else "unknown shell"
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        there = f" and {below} below" if below else ""
        self.audit.write(f"{when} {who} job={job} actor={actor} ranks={ranks.format_ranks(ranks_sent)}{there} "
                         f"command={line!r}\n")
        self.audit.flush()

    def on_follow(self, identity: bytes, msg: wire.Follow) -> None:
        chosen, _ = self.selected(identity, msg.job, msg.actor, msg.selector)
        if chosen:
            self.send(identity, wire.Following(job=chosen[0].job, actor=msg.actor,
                                               sessions=[wire.FollowedSession(s.id, s.rank, s.log.seq) for s in chosen]))

    def on_output_since(self, identity: bytes, msg: wire.OutputSince) -> None:
        sess = self.registry.session_at(msg.session)
        self.send(identity, wire.OutputLog(session=msg.session, rows=sess.log.since(msg.since) if sess else []))

    def on_catch_up(self, identity: bytes, msg: wire.CatchUp) -> None:
        self.send(identity, wire.Events(rows=self.events.since(msg.since)))

    def on_heartbeat(self, identity: bytes, msg: wire.Heartbeat) -> None:
        """A shell's or a broker below's probe of whether we answer, answered. No shell is judged
        by its own: every peer lives as long as its connection (`check_dropped`); only a broker
        below's silence counts, as its ranks unreachable (`reap`)."""
        self.send(identity, wire.Heartbeat())

    def on_bye(self, identity: bytes, msg: wire.Bye) -> None:
        self.drop(identity, wire.Ending.RETURNED)

    # --- agents ------------------------------------------------------------------------

    def on_prompt(self, identity: bytes, msg: wire.Prompt) -> None:
        try:
            sess, news = self.registry.prompt(identity, msg)
        except Refused as refusal:
            self.send(identity, wire.Dismiss(sid=msg.sid, text=str(refusal)))
            self.codec.refused["too many sessions on one connection"] += 1
            self.note_refusal("too many sessions on one connection")
            return
        if sess is None:
            return
        self.name_twins()
        if self.upstream is not None:
            self.upstream.touched(sess, news)
            if news:
                self.below_changed()
        self.record_output(sess, msg.output)
        if (cast := self.casts.stopped(sess)) is not None:
            self.settle(self.casts, cast)
        self.to_holder(sess, wire.SessionOutput(session=sess.id, text=msg.output, paused=True, prompt=msg.prompt))
        if news:
            self.publish(wire.EventKind(msg.reason), sess, msg.exc)
        if (line := self.casts.next_line(sess)) is not None:
            self.forward(sess, line)

    def on_output(self, identity: bytes, msg: wire.Output) -> None:
        sess = self.registry.session_of(identity, msg.sid)
        if sess is None:
            return
        self.record_output(sess, msg.text)
        self.to_holder(sess, wire.SessionOutput(session=sess.id, text=msg.text, paused=False))

    # --- a broker below: what it tells of its ranks, and its answers ----------------------

    def on_branch_sessions(self, identity: bytes, msg: wire.BranchSessions) -> None:
        if not self.registry.is_branch(identity):
            return
        for item in msg.sessions:
            known = self.registry.session_of(identity, item.id) is not None
            if not known:
                self.forget_moved(item.row)
            sess = self.registry.mirror(identity, item)
            if item.news and sess.paused:
                self.publish(wire.EventKind(sess.reason), sess, item.detail)
            if self.upstream is not None:
                self.upstream.touched(sess, item.news)
                if not known:
                    self.below_changed()
        self.name_twins()

    def name_twins(self) -> None:
        """Ranks that two processes run (one started again while the first runs on): both stay
        listed, and every shell is told once."""
        for first, second in self.registry.take_twins():
            detail = f"pid {first.pid} on {first.host} and pid {second.pid} on {second.host}"
            self.publish(wire.EventKind.TWICE, second, detail)
            log(f"{second.actor} {second.rank} of job {second.job} is run by two processes ({detail}); both are listed")

    def forget_moved(self, row: wire.SessionRow) -> None:
        """A broker below tells of a rank that another session below still stands for in the
        same process: the rank moved (its host broker was replaced before the old one was
        declared lost). The old session is forgotten without an event, and a shell attached to
        it attaches again. Another process's is the rank started twice (`Registry._stand`)."""
        old = self.registry.session_for(row.job, row.actor, row.rank)
        if old is None or not self.registry.is_branch(old.peer) or (old.host, old.pid) != (row.host, row.pid):
            return
        if old.holder is not None:
            self.send(old.holder, wire.SessionEnded(session=old.id, text="", reason=wire.Ending.UNKNOWN))
        if self.upstream is not None:
            self.upstream.forget(old)
        self.registry.end(old, wire.Ending.RECONNECTED)

    def on_branch_ranks(self, identity: bytes, msg: wire.BranchRanks) -> None:
        if self.registry.is_branch(identity):
            self.registry.set_below(identity, msg.rows, msg.jobs, msg.added)
            self.breakpoints.started(identity)
            self.below_changed()

    def on_branch_ended(self, identity: bytes, msg: wire.BranchEnded) -> None:
        sess = self.registry.session_of(identity, msg.id) if self.registry.is_branch(identity) else None
        if sess is not None:
            self.end_session(sess, msg.output, msg.reason)

    def on_branch_lost(self, identity: bytes, msg: wire.BranchLost) -> None:
        if self.registry.is_branch(identity):
            self.announce_lost(msg.job, msg.actor, msg.ranks)

    def on_branch_output(self, identity: bytes, msg: wire.BranchOutput) -> None:
        sess = self.registry.session_of(identity, msg.id) if self.registry.is_branch(identity) else None
        if sess is not None:
            self.record_output(sess, msg.text)

    def on_cast_result(self, identity: bytes, msg: wire.CastResult) -> None:
        cast = self.casts.get(msg.ref)
        if cast is not None and identity in cast.owed:
            cast.merge(identity, msg.groups, msg.missing, msg.more)
            self.settle(self.casts, cast)

    def on_cast_progress(self, identity: bytes, msg: wire.CastProgress) -> None:
        cast = self.casts.get(msg.ref)
        if cast is not None and identity in cast.owed:
            cast.answered_below[identity] = msg.answered
            cast.picked_there_count(identity, msg.total)

    def on_stacks_result(self, identity: bytes, msg: wire.StacksResult) -> None:
        request = self.stacks.get(msg.ref)
        if request is not None and self.registry.is_branch(identity) and identity in request.waiting:
            request.report(identity, msg.groups, msg.missing, msg.more)
            self.settle(self.stacks, request)

    def on_attached(self, identity: bytes, msg: wire.Attached) -> None:
        """A broker below holds a session for one of our shells now: that shell is attached."""
        waiting = self.attaching.get(identity)
        if not waiting:
            return
        shell, sess_id, taken_from = waiting.popleft()
        sess = self.registry.session_of(identity, msg.session)
        if sess is None or sess.id != sess_id or sess.holder != shell:
            self.send(identity, wire.Detach(session=msg.session))
            return
        self.send(shell, wire.Attached(session=sess.id, job=sess.job, actor=sess.actor, rank=sess.rank,
                                       host=sess.host, replay=msg.replay, resumed=msg.resumed, paused=msg.paused,
                                       prompt=msg.prompt, taken_from=taken_from or msg.taken_from))

    def on_branch_error(self, identity: bytes, msg: wire.Error) -> None:
        """A broker below refused an attach (the session ended meanwhile): tell the shell."""
        waiting = self.attaching.get(identity)
        if waiting:
            shell, sess_id, _ = waiting.popleft()
            self.registry.release(shell, sess_id)
            self.send(shell, msg)

    def on_branch_session_output(self, identity: bytes, msg: wire.SessionOutput) -> None:
        sess = self.registry.session_of(identity, msg.session) if self.registry.is_branch(identity) else None
        if sess is not None:
            self.to_holder(sess, wire.SessionOutput(session=sess.id, text=msg.text, paused=msg.paused, prompt=msg.prompt))

    def on_branch_session_ended(self, identity: bytes, msg: wire.SessionEnded) -> None:
        """A session taken from us below (attach --force there): our shell holds it no more.
        A session that ended is told by `BranchEnded`."""
        sess = self.registry.session_of(identity, msg.session) if self.registry.is_branch(identity) else None
        if sess is not None and sess.holder is not None and msg.reason in (wire.Ending.TAKEN, wire.Ending.UNKNOWN):
            holder = sess.holder
            self.registry.release(holder, sess.id)
            self.send(holder, wire.SessionEnded(session=sess.id, text=msg.text, reason=msg.reason, by=msg.by))

    def on_ended(self, identity: bytes, msg: wire.Ended) -> None:
        sess = self.registry.session_of(identity, msg.sid)
        if sess is not None:
            self.end_session(sess, msg.output, msg.reason)

    # --- shells ------------------------------------------------------------------------

    # --- the broker above: its requests for ranks below us ---------------------------------

    def on_cast_down(self, identity: bytes, msg: wire.CastDown) -> None:
        """The parent's cast, for the ranks it names here or those its selector picks here; a
        selector that picks none here is answered with no groups."""
        if identity != UPSTREAM:
            return
        if not msg.selector:
            chosen, absent = self.registry.pick(msg.job, msg.actor, list(msg.ranks))
            picked = Picked(msg.job, chosen, absent, {}, ranks.Selection())
        else:
            try:
                picked = self.registry.pick_for_cast(msg.job, msg.actor, msg.selector)
            except Refused:
                picked = Picked(msg.job, [], [], {}, ranks.Selection())
        self.start_cast(identity, msg.ref, msg.actor, picked, msg.line, msg.timeout, msg.selector, msg.progress_every)

    def on_take_stacks(self, identity: bytes, msg: wire.TakeStacks) -> None:
        """The parent's stacks, of the ranks it names here or of the live ranks its selector
        picks here; a selector that picks none here is answered with no groups."""
        if identity != UPSTREAM:
            return
        if msg.selector:
            try:
                picked = self.registry.pick_live(msg.job, msg.actor, msg.selector)
            except Refused:
                picked = Picked(msg.job, [], [], {}, ranks.Selection())
        else:
            chosen, absent = self.registry.pick(msg.job, msg.actor, list(msg.ranks), live=True)
            picked = Picked(msg.job, chosen, absent, {}, ranks.Selection())
        self.start_stacks(identity, msg.ref, msg.actor, picked, msg.timeout, msg.threads, msg.locals, msg.selector)

    def on_interrupt_ranks(self, identity: bytes, msg: wire.InterruptRanks) -> None:
        if identity == UPSTREAM:
            chosen, _ = self.registry.pick(msg.job, msg.actor, msg.ranks, live=True)
            self.interrupt(identity, msg.job, msg.actor, chosen)

    def on_output_wanted(self, identity: bytes, msg: wire.OutputWanted) -> None:
        if identity == UPSTREAM:
            was_wanted = self.output_wanted
            self.parent_wants_output = self.upstream.wants_output = msg.on
            self.tell_branches_output(was_wanted)

    # --- shells ------------------------------------------------------------------------

    def on_list(self, identity: bytes, msg: wire.ListSessions) -> None:
        """`list`: its rows, or past `groups_above` sessions their groups, made straight
        from the sessions."""
        if msg.groups_above is not None:
            paused = self.registry.paused()
            if len(paused) > msg.groups_above:
                self.send_groups(identity, group_sessions(paused, STOP_STATES))
                return
        self.send_list(identity, self.registry.rows(), msg.groups_above)

    def send_groups(self, identity: bytes, groups: list[wire.SessionGroup]) -> None:
        part_size = min(wire.BATCH_BYTES, self.settings.max_message // 2)
        self.send_parts(identity, (wire.SessionGroups(groups=part, more=more)
                                   for part, more in group_parts(groups, part_size)))

    def send_list(self, identity: bytes, rows: Iterable[wire.SessionRow], groups_above: int | None) -> None:
        """A list in parts of a batch each: 65,536 rows are more than 8 MB, and the rows are
        made as each part is sent. Past `groups_above` rows, their groups instead."""
        part_size = min(wire.BATCH_BYTES, self.settings.max_message // 2)
        rows = iter(rows)
        if groups_above is not None:
            first: list[wire.SessionRow] = []
            for row in rows:
                first.append(row)
                if len(first) > groups_above:
                    self.send_groups(identity, group_rows(chain(first, rows)))
                    return
            rows = iter(first)
        self.send_parts(identity, (wire.SessionList(rows=part, more=more) for part, more in row_parts(rows, part_size)))

    def on_jobs(self, identity: bytes, msg: wire.ListJobs) -> None:
        self.send(identity, wire.JobList(rows=self.registry.job_rows()))

    def on_attach(self, identity: bytes, msg: wire.Attach) -> None:
        try:
            sess = self.registry.find(msg.job, msg.actor, msg.rank)
            if (below := self.registry.peer(sess.peer)).silent:
                raise Refused(f"{sess.actor} {sess.rank} is {unreachable_because(below.host)}")
            taken_from = self.registry.hold(identity, sess, force=msg.force)
        except Refused as refusal:
            self.send(identity, wire.Error(text=str(refusal)))
            return
        if taken_from is not None:
            taker = self.registry.peer(identity)
            self.send(taken_from.identity, wire.SessionEnded(session=sess.id, text="", reason=wire.Ending.TAKEN,
                                                             by=taker.attached_in()))
            self.publish(wire.EventKind.TAKEN, sess, taker.describe())
        self.now_held(identity, sess, taken_from.attached_in() if taken_from is not None else "")

    def now_held(self, identity: bytes, sess: Session, taken_from: str = "") -> None:
        """Tell `identity` it holds `sess` (taken from whom, if anyone), once the broker below
        that has it holds it for us."""
        if self.registry.is_branch(sess.peer):
            # Held here; below, it is held by us for whichever shell up here holds it.
            self.attaching[sess.peer].append((identity, sess.id, taken_from))
            self.send(sess.peer, wire.Attach(job=sess.job, actor=sess.actor, rank=sess.rank, force=True))
            return
        self.send(identity, wire.Attached(
            session=sess.id, job=sess.job, actor=sess.actor, rank=sess.rank, host=sess.host,
            replay=sess.log.replay(), resumed=sess.resumed, paused=sess.paused, prompt=sess.prompt,
            taken_from=taken_from,
        ))

    def on_detach(self, identity: bytes, msg: wire.Detach) -> None:
        sess = self.registry.held(identity, msg.session)
        if sess is not None and self.registry.is_branch(sess.peer):
            self.send(sess.peer, wire.Detach(session=sess.sid))
        self.registry.release(identity, msg.session)
        self.send(identity, wire.Detached(session=msg.session))
        if sess is not None:
            self.hand_back(sess)
        elif (watched := self.registry.session_at(msg.session)) is not None and watched.watcher == identity:
            watched.watcher = None

    def on_send(self, identity: bytes, msg: wire.Send) -> None:
        sess = self.registry.held(identity, msg.session)
        if sess is None:
            reason = wire.Ending.UNKNOWN if self.registry.session_at(msg.session) is None else wire.Ending.TAKEN
            self.send(identity, wire.SessionEnded(session=msg.session, text="", reason=reason))
            return
        self.record(identity, sess.job, sess.actor, [sess.rank], msg.line)
        if sess.watcher is not None:
            self.send(sess.watcher, wire.Resumed(session=sess.id))
        if self.registry.is_branch(sess.peer):
            self.send(sess.peer, wire.Send(session=sess.sid, line=msg.line, colour=msg.colour))
        else:
            self.forward(sess, msg.line, colour=msg.colour)

    def on_complete(self, identity: bytes, msg: wire.Complete) -> None:
        """Pass a Tab at the held session's prompt to its process (or to the broker below that
        has it); the paused thread answers, and the answer comes back as an inspection's does."""
        sess = self.registry.held(identity, msg.session)
        if sess is None:
            self.send(identity, wire.Completions(ref=msg.ref, matches=[], error="this shell does not hold the session"))
            return
        self.send(sess.peer, replace(msg, ref=self.inspections.number(identity, msg.ref), session=sess.sid))

    def on_cast(self, identity: bytes, msg: wire.Cast) -> None:
        try:
            picked = self.registry.pick_for_cast(msg.job, msg.actor, msg.selector)
        except Refused as refusal:
            self.send(identity, wire.Error(text=str(refusal)))
            return
        self.start_cast(identity, msg.ref, msg.actor, picked, msg.line, msg.timeout, msg.selector,
                        0.0 if msg.progress else math.inf)

    def start_cast(self, shell: bytes, ref: int, actor: str, picked: Picked, line: str, timeout: float,
                   selector: str = "", progress_every: float = 0.0) -> None:
        """Run one line on the picked sessions: ours one by one, each broker below's in one
        message (the ranks it names there, or the selector to evaluate there); the answers go to
        `shell` grouped, once all are in or the time is up. A shell whose selector picked
        nothing anywhere is told why, as when it picks nothing here. Progress goes to `shell`
        as often as `progress_every` says (never when infinite), and from below as seldom."""
        job = picked.job
        evaluated_below = any(asked is None for asked in picked.below.values())
        self.record(shell, job, actor, [s.rank for s in picked.sessions], line, selector if evaluated_below else "")
        self.tell_holders([sess for sess in picked.sessions if sess.paused], shell)
        now = time.monotonic()
        quiet = progress_every == math.inf
        cast = CastInFlight(shell=shell, ref=ref, actor=actor, deadline=now + timeout,
                            total=len(picked.sessions) + len(picked.absent) + sum(
                                len(asked) for asked in picked.below.values() if asked is not None),
                            missing=picked.absent, estimate=picked.estimate, progress_every=progress_every,
                            next_progress=math.inf if quiet else now + (
                                max(PROGRESS_UP_EVERY, progress_every) if shell == UPSTREAM else PROGRESS_EVERY))
        if evaluated_below:
            branches = {peer.identity: peer for peer in self.registry.branches()}
            cast.picked_there = lambda branch: self.registry.picked_below(branches[branch], job, actor,
                                                                          picked.selection)
            if shell != UPSTREAM:
                cast.refusal = lambda: self.nothing_picked(job, actor, picked.selection)
        for sess in self.casts.start(cast, line, picked.sessions):
            self.forward(sess, line)
        for branch, asked in picked.below.items():
            peer = self.registry.peer(branch)
            cast.owe(branch, peer.host, asked)
            if peer.silent:
                cast.lost(branch, unreachable_because(peer.host))
                continue
            self.send(branch, wire.CastDown(ref=cast.id, job=job, actor=actor, ranks=asked or ranks.RankSet(),
                                            line=line, timeout=below_timeout(timeout),
                                            selector=selector if asked is None else "",
                                            progress_every=math.inf if quiet else
                                            len(picked.below) / PROGRESS_HEARD_PER_SECOND))
        if shell != UPSTREAM and not cast.done:
            sent = ranks.RankSet.joined([ranks.RankSet.of(cast.pending.values()),
                                         *(asked for asked in cast.owed.values() if asked is not None)])
            self.send(shell, wire.CastStarted(ref=ref, ranks=sent,
                                              below=sorted({cast.hosts[b] for b, asked in cast.owed.items() if asked is None})))
        self.settle(self.casts, cast)

    def nothing_picked(self, job: str, actor: str, selection: ranks.Selection, live: bool = False) -> str:
        """Why a selector evaluated below picked no session (with `live`, no live rank)
        anywhere, as `Registry.select` says."""
        try:
            if live:
                return no_match(actor, selection, self.registry.live_ranks(job, actor), "that runs")
            return no_match(actor, selection, self.registry.actor_sessions(job, actor), "with a session")
        except Refused as refusal:
            return str(refusal)

    def on_continue(self, identity: bytes, msg: wire.Continue) -> None:
        """Release every paused rank (of one job, one actor and its selector, as far as named)
        after clearing its breakpoints; each broker below releases its own, told once."""
        released: dict[tuple[str, str], list[int]] = {}
        branches = set()
        chosen = self.registry.paused(msg.job)
        if msg.actor:
            chosen = [sess for sess in chosen if sess.actor == msg.actor]
        if msg.selector:
            try:
                selection = ranks.parse_selector(msg.selector)
            except ranks.SelectorError as error:
                self.send(identity, wire.Error(text=str(error)))
                return
            picked = set(ranks.select(selection, ((sess.rank, sess.coords) for sess in chosen)))
            chosen = [sess for sess in chosen if sess.rank in picked]
        self.tell_holders(chosen, identity, release=True)
        for sess in chosen:
            self.publish(wire.EventKind.RESUMED, sess)
            released.setdefault((sess.job, sess.actor), []).append(sess.rank)
            if self.registry.is_branch(sess.peer):
                branches.add(sess.peer)
                sess.state = State.RELEASED
            else:
                self.forward(sess, "continue", release=True)
        for branch in branches:
            self.send(branch, wire.Continue(job=msg.job, actor=msg.actor, selector=msg.selector))
        by_actor: dict[str, list[int]] = {}
        for (job, actor), ranks_released in released.items():
            self.record(identity, job, actor, ranks_released, "continue (top level)")
            by_actor.setdefault(actor, []).extend(ranks_released)
        self.send(identity, wire.Continued(released=[wire.Released(a, sorted(r)) for a, r in sorted(by_actor.items())]))

    # --- presence, stacks and interrupts -----------------------------------------------

    def on_present(self, identity: bytes, msg: wire.Present) -> None:
        self.registry.set_present(identity, msg.ranks, msg.added)
        self.breakpoints.started(identity)
        self.below_changed()

    def on_list_all(self, identity: bytes, msg: wire.ListAll) -> None:
        self.send_list(identity, self.registry.all_rows(), msg.groups_above)

    def on_stacks(self, identity: bytes, msg: wire.Stacks) -> None:
        try:
            picked = self.registry.pick_live(msg.job, msg.actor, msg.selector)
        except Refused as refusal:
            self.send(identity, wire.Error(text=str(refusal)))
            return
        self.start_stacks(identity, msg.ref, msg.actor, picked, msg.timeout, msg.threads, msg.locals, msg.selector)

    def start_stacks(self, shell: bytes, ref: int, actor: str, picked: Picked, timeout: float, threads: wire.Threads,
                     with_locals: bool, selector: str = "") -> None:
        """Ask each process (or broker below) for its picked ranks' stacks (and their locals),
        merged as they come: a broker below that evaluates the selector is sent the selector.
        A shell whose selector picked nothing anywhere is told why, as when it picks nothing here."""
        job = picked.job
        request = self.stacks.open(StacksInFlight(shell=shell, ref=ref, actor=actor,
                                                  deadline=time.monotonic() + timeout, missing=picked.absent))
        for live in picked.sessions:
            request.waiting.setdefault(live.peer, []).append(live.rank)
        if picked.below:
            branches = {peer.identity: peer for peer in self.registry.branches()}
            request.picked_there = lambda branch: self.registry.picked_live_below(branches[branch], job, actor,
                                                                                  picked.selection)
            if shell != UPSTREAM:
                request.refusal = lambda: self.nothing_picked(job, actor, picked.selection, live=True)
            for branch in picked.below:
                request.pick_there(branch)
        self.skip_unreachable(request)
        for peer, asked in request.waiting.items():
            there = peer in request.picking
            self.send(peer, wire.TakeStacks(ref=request.id, actor=actor, ranks=ranks.RankSet.of(asked),
                                            threads=threads, job=job, timeout=below_timeout(timeout),
                                            locals=with_locals, selector=selector if there else ""))
        self.settle(self.stacks, request)

    def on_stack_report(self, identity: bytes, msg: wire.StackReport) -> None:
        request = self.stacks.get(msg.ref)
        if request is not None and identity in request.waiting:
            request.report(identity, msg.groups)
            self.settle(self.stacks, request)

    def on_interrupt(self, identity: bytes, msg: wire.Interrupt) -> None:
        """Ask the processes of the selected ranks to stop them; ranks already paused are left."""
        chosen, _ = self.selected(identity, msg.job, msg.actor, msg.selector, live=True)
        if chosen:
            asked = self.interrupt(identity, chosen[0].job, msg.actor, chosen)
            self.send(identity, wire.Interrupting(job=chosen[0].job, actor=msg.actor, ranks=asked))

    def interrupt(self, shell: bytes, job: str, actor: str, chosen: list[LiveRank]) -> list[int]:
        """Ask each process (or broker below) to stop its chosen ranks that run; those asked."""
        by_peer: dict[bytes, list[int]] = {}
        for live in chosen:
            if not self.registry.is_paused(live.job, live.actor, live.rank):
                by_peer.setdefault(live.peer, []).append(live.rank)
        asked = sorted(rank for peer_ranks in by_peer.values() for rank in peer_ranks)
        self.record(shell, job, actor, asked, "interrupt")
        for peer, peer_ranks in by_peer.items():
            self.send(peer, wire.InterruptRanks(actor=actor, ranks=peer_ranks, job=job))
        return asked


    # --- an editor's questions about a paused session ----------------------------------

    def on_inspect(self, identity: bytes, msg: wire.Inspect) -> None:
        """Pass a question to the paused thread of the rank, or to the broker below that has
        it (which passes it on as to a shell's); the answer comes back the same way."""
        try:
            sess = self.registry.find(msg.job, msg.actor, msg.rank)
            if (below := self.registry.peer(sess.peer)).silent:
                raise Refused(f"{sess.actor} {sess.rank} is {unreachable_because(below.host)}")
        except Refused as refusal:
            self.send(identity, wire.Inspection(ref=msg.ref, items=[], error=str(refusal)))
            return
        ask = self.inspections.ask(identity, msg, sess.sid)
        if msg.query == wire.Query.BREAKPOINTS:
            self.breakpoints.setters.add(ask.owner)
        self.send(sess.peer, ask)

    def on_inspection(self, identity: bytes, msg: wire.Inspection | wire.Completions) -> None:
        if (answer := self.inspections.answered(msg)) is not None:
            self.send(*answer)


def ranks_below(branch: Peer, sessions: list[Session] | None = None) -> int:
    """The live ranks of a broker below: those of its sessions (or of `sessions`, once it is
    gone), and those it runs without one, each once (a rank that just stopped may be in both
    until the broker below says it has a session now)."""
    held = branch.owned.values() if sessions is None else sessions
    return len({(s.job, s.actor, s.rank) for s in held}
               | {(row.job, row.actor, row.rank) for row in branch.below if row.state in LIVE})


def unreachable_because(host: str) -> str:
    return f"unreachable (the broker on {host} does not answer)"


def raise_open_file_limit() -> str:
    """Each rank process and shell is a connection: take as many descriptors as allowed, and
    say how many connections that makes when it is few."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= 65536:
        return ""
    return f"can serve about {max(soft - 64, 0)} rank processes and shells (open-file limit {soft}; raise it with ulimit -n)"


def broker_secret(settings: Settings) -> str:
    """The configured secret; else that of the broker that last served this port, if its file
    is still here (ranks and shells that knew it reconnect to a restarted broker without a
    word); else a new one."""
    configured = discovery.secret_of(settings)
    if configured is not None:
        return configured
    previous = discovery.read_connection_file(settings)
    return previous.secret if previous is not None else discovery.new_secret()


def run(settings: Settings, embedded: bool, idle_exit: float, audit: str | None = None) -> int:
    """Run a broker in this process until stopped; 0 also when another broker already runs."""
    try:
        lock = discovery.take_broker_lock(settings)
        secret = broker_secret(settings)
    except discovery.Insecure as problem:
        log(str(problem))
        return 2
    if lock is None:
        if not embedded:
            log(f"another broker already serves port {settings.port} (see {discovery.connection_file(settings)})")
            return 1
        return 0
    if discovery.secret_of(settings) is None and not discovery.is_local(settings.host):
        log(f"refusing to listen on {settings.host} without a secret: set MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE")
        return 2
    if discovery.secret_of(settings) is None and settings.upstream:
        log(f"cannot register with the broker above ({settings.upstream}) without the secret it was given: "
            "set MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE")
        return 2
    unresolved = discovery.does_not_resolve(discovery.bind_host(settings.host))
    if unresolved:
        log(f"cannot listen on {settings.host}:{settings.port}: {unresolved}")
        return 2
    capacity = raise_open_file_limit()
    audit_file = open(audit, "a", encoding="utf-8") if audit else None
    broker = Broker(settings, secret, idle_exit, audit_file)
    try:
        conn = broker.bind()
    except zmq.ZMQError as error:
        log(f"cannot listen on {settings.host}:{settings.port}: {error}")
        return 1
    try:
        discovery.write_connection(settings, conn)
    except discovery.Insecure as problem:
        log(str(problem))
        broker.context.destroy(linger=0)
        return 2
    encrypted = ", encrypted with CURVE" if settings.curve else ""
    log(f"listening on {conn.router} (events on {conn.pub}){encrypted} as {getpass.getuser()}, pid {os.getpid()}")
    if capacity:
        log(capacity)
    if settings.upstream and discovery.reaches_itself(settings.upstream, conn.router):
        log(f"the broker above ({settings.upstream}) is this broker itself: it serves as the root, with none above")
    elif settings.upstream:
        broker.start_upstream(settings.upstream)
    try:
        broker.serve()
    finally:
        discovery.remove_connection(settings, conn)
        if audit_file is not None:
            audit_file.close()
    return 0
