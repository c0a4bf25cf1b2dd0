"""The broker's poll loop: one ROUTER for agents and shells, one PUB for events.

Single-threaded on purpose: every piece of state is touched by this loop only, so there is
nothing to lock. The ZeroMQ guide's ROUTER broker is the model.
"""

from __future__ import annotations

import getpass
import os
import resource
import signal
import sys
import time
from sys import intern
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TextIO

import zmq

from monarch_pdb import curve, discovery, ranks, wire
from monarch_pdb.broker.casts import CastInFlight, Casts
from monarch_pdb.broker.inflight import InFlight, Request, in_parts
from monarch_pdb.broker.registry import Peer, Refused, Registry, Session
from monarch_pdb.broker.stacks import StacksInFlight
from monarch_pdb.settings import Settings

PROGRESS_EVERY = 0.25
EVENT_HISTORY = 16384
TOLD_UNSIGNED = 4096
REFUSALS_LOGGED_EVERY = 10.0
DRAIN_AT_ONCE = 1024


def log(text: str) -> None:
    print(f"monarch-pdb broker: {text}", file=sys.stderr, flush=True)


@dataclass
class Broker:
    settings: Settings
    secret: str
    idle_exit: float = 0.0
    audit: TextIO | None = None
    event_seq: int = 0
    history: deque = field(default_factory=lambda: deque(maxlen=EVENT_HISTORY))
    """The last events as `Event.row()` records, a third of an Event's size."""
    outbox: dict[bytes, list[wire.Message]] = field(default_factory=dict)
    told_unsigned: OrderedDict = field(default_factory=OrderedDict)
    """Peers already told that their signatures fail: each is told once."""
    pub_endpoint: str = ""
    refused_logged: int = 0
    refusals_logged_at: float = float("-inf")
    latest_refusal: str = ""
    stopping: bool = False
    listening_since: float = float("-inf")
    """When the poll loop last came back from a pause longer than a heartbeat."""

    def __post_init__(self) -> None:
        self.codec = wire.Codec(self.secret.encode(), max_body=self.settings.max_message, max_age=self.settings.max_age)
        self.registry = Registry(history_limit=self.settings.session_history,
                                 sessions_per_connection=self.settings.max_sessions_per_connection)
        self.casts = Casts(part_size=self.settings.max_message // 2)
        self.stacks: InFlight[StacksInFlight] = InFlight(part_size=self.settings.max_message // 2)
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.MAXMSGSIZE, self.settings.max_message + 4096)
        # A ROUTER drops what it cannot queue without a word; a cast to thousands of sessions
        # behind one connection must not lose inputs, so its queues are unbounded.
        self.router.setsockopt(zmq.SNDHWM, 0)
        self.router.setsockopt(zmq.RCVHWM, 0)
        self.pub = self.context.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, EVENT_HISTORY)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)
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
        }

    # --- life cycle --------------------------------------------------------------------

    def bind(self) -> discovery.Connection:
        host = discovery.bind_host(self.settings.host)
        self.router.bind(f"tcp://{host}:{self.settings.port}")
        self.pub.bind(f"tcp://{host}:0")
        router = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        pub = self.pub_endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        return discovery.Connection(router=router, pub=pub, secret=self.secret, pid=os.getpid(), curve=self.settings.curve)

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        # A signal also wakes the poll (which would otherwise sleep on, up to half a
        # heartbeat), so a stop is heard at once.
        woken, wake = os.pipe()
        os.set_blocking(wake, False)
        signal.set_wakeup_fd(wake)
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        poller.register(self.pub, zmq.POLLIN)
        poller.register(woken, zmq.POLLIN)
        tick = max(0.05, self.settings.heartbeat_interval / 2)
        idle_since = next_tick = polled = time.monotonic()
        while not self.stopping:
            ready = dict(poller.poll((PROGRESS_EVERY / 2 if self.casts else tick) * 1000))
            if time.monotonic() - polled > self.settings.heartbeat_interval + tick:
                self.listening_since = time.monotonic()  # we were stopped or starved (see reap)
            if woken in ready:
                os.read(woken, 4096)
            if self.pub in ready:
                self.note_subscriptions()
            if self.router in ready:
                self.drain()
            now = polled = time.monotonic()
            self.expire(now)
            if now >= next_tick:
                next_tick = now + tick
                self.reap(now)
                self.summarize_refusals(now)
                self.pub.send_multipart([wire.EVENT_TOPIC, *self.codec.encode(wire.Tick(seq=self.event_seq))])
            self.flush()
            if self.registry.connected():
                idle_since = now
            elif self.idle_exit and now - idle_since > self.idle_exit:
                log(f"idle for {self.idle_exit:g} s, exiting")
                break
        signal.set_wakeup_fd(-1)
        os.close(woken)
        os.close(wake)
        self.summarize_refusals(time.monotonic(), final=True)
        self.router.close()
        self.pub.close()
        self.context.term()

    def stop(self, *_: object) -> None:
        self.stopping = True

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
                self.followed = frame[:1] == b"\x01"
                if self.followed:
                    self.pub.send_multipart([wire.OUTPUT_TOPIC, *self.codec.encode(wire.OutputLive())])

    def drain(self) -> None:
        """Handle what has arrived, a bounded number at a time, so that answers go out between
        the bounds even while a flood comes in."""
        for _ in range(DRAIN_AT_ONCE):
            try:
                frames = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.handle(frames)

    def handle(self, frames: list[bytes]) -> None:
        identity = frames[0]
        try:
            msgs = self.codec.decode(frames[1:])
        except wire.Refused as refusal:
            self.note_refusal(str(refusal))
            if str(refusal) == "bad signature" and identity not in self.told_unsigned:
                self.told_unsigned[identity] = None
                if len(self.told_unsigned) > TOLD_UNSIGNED:
                    self.told_unsigned.popitem(last=False)
                self.router.send_multipart([identity, *wire.AUTH_FAILED])
            return
        now = time.monotonic()
        for msg in msgs:
            if self.registry.heard(identity, now) is None and not isinstance(msg, wire.Hello):
                self.send(identity, wire.Unknown())
                continue
            handler = self.handlers.get(type(msg))
            if handler is not None:
                handler(identity, msg)

    def note_refusal(self, reason: str) -> None:
        """At most one summary line every REFUSALS_LOGGED_EVERY seconds, never one per message."""
        self.latest_refusal = reason
        self.summarize_refusals(time.monotonic())

    def summarize_refusals(self, now: float, final: bool = False) -> None:
        total = sum(self.codec.refused.values())
        if total == self.refused_logged or (now - self.refusals_logged_at < REFUSALS_LOGGED_EVERY and not final):
            return
        self.refused_logged, self.refusals_logged_at = total, now
        counts = ", ".join(f"{n} {why}" for why, n in self.codec.refused.most_common())
        log(f"dropped {total} bad messages so far ({counts}); latest: {self.latest_refusal}")

    def reap(self, now: float) -> None:
        """Declare lost every peer that has been silent for a few heartbeats while we listened.
        A broker that was stopped or starved (SIGSTOP, a swapped-out host) heard nobody: its
        peers' messages wait unread, so their silence counts from when it listens again."""
        limit = wire.LOST_AFTER_BEATS * self.settings.heartbeat_interval
        for identity in self.registry.silent(now, limit, self.listening_since):
            self.drop(identity, wire.Ending.LOST)

    def drop(self, identity: bytes, reason: wire.Ending) -> None:
        gone = self.registry.leave(identity, reason)
        if gone is None:
            return
        for sess in gone.freed:
            self.publish(wire.EventKind.RELEASED, sess)
        for sess in gone.ended:
            self.end_session(sess, "", reason)
        if gone.peer.role == wire.Role.AGENT and reason != wire.Ending.RECONNECTED:
            for request in self.stacks:
                request.lost(identity)
                self.settle(self.stacks, request)
        if gone.job_left:
            log(f"job {gone.peer.name} left ({reason})")

    # --- requests in flight --------------------------------------------------------------

    def settle(self, table: InFlight, request: Request, expired: bool = False) -> None:
        """Send a request's result to its shell once it is done (or `expired`)."""
        for part in table.settle(request, expired):
            self.send(request.shell, part)

    def expire(self, now: float) -> None:
        for table in (self.casts, self.stacks):
            for request in table.overdue(now):
                self.settle(table, request, expired=True)
        for cast in self.casts.progress_due(now, PROGRESS_EVERY):
            self.send(cast.shell, wire.CastProgress(ref=cast.ref, answered=cast.answered, total=cast.total))

    # --- sending -----------------------------------------------------------------------

    def send(self, identity: bytes, msg: wire.Message) -> None:
        """Queue a message; `flush` sends each peer's queue as few signed batches."""
        self.outbox.setdefault(identity, []).append(msg)

    def flush(self) -> None:
        for identity, msgs in self.outbox.items():
            for frames in self.codec.encode_many(msgs):
                self.router.send_multipart([identity, *frames])
        self.outbox.clear()

    def publish(self, kind: wire.EventKind, sess: Session, detail: str = "") -> None:
        self.event_seq += 1
        where = intern(f"{os.path.basename(sess.filename)}:{sess.lineno}") if sess.filename else ""
        event = wire.Event(
            seq=self.event_seq, kind=kind, job=sess.job, actor=sess.actor, rank=sess.rank,
            where=where, detail=detail,
        )
        self.history.append(event.row())
        self.pub.send_multipart([wire.EVENT_TOPIC, *self.codec.encode(event)])

    def record_output(self, sess: Session, text: str) -> None:
        """Keep a chunk of a session's output, and publish it when some shell follows ranks."""
        if not text:
            return
        seq = sess.log.add(text)
        if self.followed:
            printed = wire.Printed(session=sess.id, seq=seq, job=sess.job, actor=sess.actor, rank=sess.rank, text=text)
            self.pub.send_multipart([wire.OUTPUT_TOPIC, *self.codec.encode(printed)])

    def end_session(self, sess: Session, text: str, reason: str) -> None:
        if reason != wire.Ending.LOST and sess.cast in self.casts:
            self.record_output(sess, text)
        for cast in self.casts.ended(sess, reason):
            self.settle(self.casts, cast)
        if sess.holder is not None:
            self.send(sess.holder, wire.SessionEnded(session=sess.id, text=text, reason=reason))
        self.registry.end(sess, reason)
        self.publish(wire.EventKind.LOST if reason == wire.Ending.LOST else wire.EventKind.ENDED, sess, reason)

    def forward(self, sess: Session, line: str, release: bool = False) -> None:
        """Hand one line to a session's pdb."""
        self.send(sess.peer, wire.Input(sid=sess.sid, cmd=sess.resume(release), line=line, release=release))

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
        if msg.role not in (wire.Role.AGENT, wire.Role.SHELL):
            self.send(identity, wire.Error(text=f"unknown role {msg.role!r}"))
            return
        if not self.registry.knows(identity, msg.role, msg.link):
            self.drop(identity, wire.Ending.RECONNECTED)
            first_of_job = self.registry.join(Peer(
                identity=identity, role=msg.role, name=msg.name, host=msg.host, pid=msg.pid,
                user=msg.user, last_seen=time.monotonic(), link=msg.link,
            ))
            if first_of_job:
                log(f"job {msg.name} joined ({msg.host}, pid {msg.pid})")
        self.send(identity, wire.Welcome(pub=self.pub_endpoint, heartbeat=self.settings.heartbeat_interval,
                                         broker_pid=os.getpid(), seq=self.event_seq))

    def record(self, identity: bytes, job: str, actor: str, ranks_sent: list[int], line: str) -> None:
        """The audit log: one line per command sent to ranks, and who sent it."""
        if self.audit is None:
            return
        shell = self.registry.peer(identity)
        who = shell.describe() if shell is not None else "unknown shell"
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.audit.write(f"{when} {who} job={job} actor={actor} ranks={ranks.format_ranks(ranks_sent)} "
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
        missed = [row for row in self.history if row.seq > msg.since]
        self.send(identity, wire.Events(rows=missed))

    def on_heartbeat(self, identity: bytes, msg: wire.Heartbeat) -> None:
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
        self.record_output(sess, msg.output)
        if (cast := self.casts.stopped(sess)) is not None:
            self.settle(self.casts, cast)
        if sess.holder is not None:
            self.send(sess.holder, wire.SessionOutput(session=sess.id, text=msg.output, paused=True, prompt=msg.prompt))
        if news:
            self.publish(wire.EventKind(msg.reason), sess, msg.exc)
        if (line := self.casts.next_line(sess)) is not None:
            self.forward(sess, line)

    def on_output(self, identity: bytes, msg: wire.Output) -> None:
        sess = self.registry.session_of(identity, msg.sid)
        if sess is None:
            return
        self.record_output(sess, msg.text)
        if sess.holder is not None:
            self.send(sess.holder, wire.SessionOutput(session=sess.id, text=msg.text, paused=False))

    def on_ended(self, identity: bytes, msg: wire.Ended) -> None:
        sess = self.registry.session_of(identity, msg.sid)
        if sess is not None:
            self.end_session(sess, msg.output, msg.reason)

    # --- shells ------------------------------------------------------------------------

    def on_list(self, identity: bytes, msg: wire.ListSessions) -> None:
        self.send_rows(identity, self.registry.rows())

    def send_rows(self, identity: bytes, rows: list[wire.SessionRow]) -> None:
        """A list in parts that each fit a message: 65,536 rows are more than 8 MB."""
        parts = in_parts([(row, row_weight(row)) for row in rows], self.settings.max_message // 2)
        for n, part in enumerate(parts):
            self.send(identity, wire.SessionList(rows=part, more=n < len(parts) - 1))

    def on_jobs(self, identity: bytes, msg: wire.ListJobs) -> None:
        self.send(identity, wire.JobList(rows=self.registry.job_rows()))

    def on_attach(self, identity: bytes, msg: wire.Attach) -> None:
        try:
            sess = self.registry.find(msg.job, msg.actor, msg.rank)
            taken_from = self.registry.hold(identity, sess, force=msg.force)
        except Refused as refusal:
            self.send(identity, wire.Error(text=str(refusal)))
            return
        if taken_from is not None:
            self.send(taken_from.identity, wire.SessionEnded(session=sess.id, text="", reason=wire.Ending.TAKEN))
            self.publish(wire.EventKind.TAKEN, sess, self.registry.peer(identity).describe())
        self.send(identity, wire.Attached(
            session=sess.id, job=sess.job, actor=sess.actor, rank=sess.rank, host=sess.host,
            replay=sess.log.replay(), resumed=sess.resumed, paused=sess.paused, prompt=sess.prompt,
        ))

    def on_detach(self, identity: bytes, msg: wire.Detach) -> None:
        self.registry.release(identity, msg.session)
        self.send(identity, wire.Detached(session=msg.session))

    def on_send(self, identity: bytes, msg: wire.Send) -> None:
        sess = self.registry.held(identity, msg.session)
        if sess is None:
            reason = wire.Ending.UNKNOWN if self.registry.session_at(msg.session) is None else wire.Ending.TAKEN
            self.send(identity, wire.SessionEnded(session=msg.session, text="", reason=reason))
            return
        self.record(identity, sess.job, sess.actor, [sess.rank], msg.line)
        self.forward(sess, msg.line)

    def on_cast(self, identity: bytes, msg: wire.Cast) -> None:
        chosen, absent = self.selected(identity, msg.job, msg.actor, msg.selector)
        if not chosen:
            return
        self.record(identity, chosen[0].job, msg.actor, [s.rank for s in chosen], msg.line)
        now = time.monotonic()
        cast = CastInFlight(shell=identity, ref=msg.ref, actor=msg.actor, deadline=now + msg.timeout,
                            total=len(chosen) + len(absent), missing=absent, next_progress=now + PROGRESS_EVERY)
        for sess in self.casts.start(cast, msg.line, chosen):
            self.forward(sess, msg.line)
        self.settle(self.casts, cast)

    def on_continue(self, identity: bytes, msg: wire.Continue) -> None:
        """Release every paused rank (of one job, if named) after clearing its breakpoints."""
        released: dict[tuple[str, str], list[int]] = {}
        for sess in self.registry.paused(msg.job):
            released.setdefault((sess.job, sess.actor), []).append(sess.rank)
            self.forward(sess, "continue", release=True)
        by_actor: dict[str, list[int]] = {}
        for (job, actor), ranks_released in released.items():
            self.record(identity, job, actor, ranks_released, "continue (top level)")
            by_actor.setdefault(actor, []).extend(ranks_released)
        self.send(identity, wire.Continued(released=[wire.Released(a, sorted(r)) for a, r in sorted(by_actor.items())]))

    # --- presence, stacks and interrupts -----------------------------------------------

    def on_present(self, identity: bytes, msg: wire.Present) -> None:
        self.registry.set_present(identity, msg.ranks, msg.added)

    def on_list_all(self, identity: bytes, msg: wire.ListAll) -> None:
        self.send_rows(identity, self.registry.all_rows())

    def on_stacks(self, identity: bytes, msg: wire.Stacks) -> None:
        chosen, absent = self.selected(identity, msg.job, msg.actor, msg.selector, live=True)
        if not chosen:
            return
        request = self.stacks.open(StacksInFlight(shell=identity, ref=msg.ref, actor=msg.actor,
                                                  deadline=time.monotonic() + msg.timeout, missing=absent))
        for live in chosen:
            request.waiting.setdefault(live.peer, []).append(live.rank)
        for peer, asked in request.waiting.items():
            self.send(peer, wire.TakeStacks(ref=request.id, actor=msg.actor, ranks=asked, threads=msg.threads))

    def on_stack_report(self, identity: bytes, msg: wire.StackReport) -> None:
        request = self.stacks.get(msg.ref)
        if request is not None and identity in request.waiting:
            request.report(identity, msg.groups)
            self.settle(self.stacks, request)

    def on_interrupt(self, identity: bytes, msg: wire.Interrupt) -> None:
        """Ask the processes of the selected ranks to stop them; ranks already paused are left."""
        chosen, _ = self.selected(identity, msg.job, msg.actor, msg.selector, live=True)
        if not chosen:
            return
        by_peer: dict[bytes, list[int]] = {}
        for live in chosen:
            if not self.registry.is_paused(live.job, live.actor, live.rank):
                by_peer.setdefault(live.peer, []).append(live.rank)
        asked = sorted(rank for peer_ranks in by_peer.values() for rank in peer_ranks)
        self.record(identity, chosen[0].job, msg.actor, asked, "interrupt")
        for peer, peer_ranks in by_peer.items():
            self.send(peer, wire.InterruptRanks(actor=msg.actor, ranks=peer_ranks))
        self.send(identity, wire.Interrupting(job=chosen[0].job, actor=msg.actor, ranks=asked))


def row_weight(row: wire.SessionRow) -> int:
    """About the bytes a list row takes in a message: its strings, and a few for each field."""
    fields = [getattr(row, name) for name in row.__slots__]
    return sum(len(value) if isinstance(value, str) else 8 for value in fields) + 8 * len(fields) + 16 * len(row.coords)


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
    capacity = raise_open_file_limit()
    audit_file = open(audit, "a", encoding="utf-8") if audit else None
    broker = Broker(settings, secret, idle_exit, audit_file)
    try:
        conn = broker.bind()
    except zmq.ZMQError as error:
        log(f"cannot listen on {settings.host}:{settings.port}: {error}")
        return 1
    discovery.write_connection(settings, conn)
    encrypted = ", encrypted with CURVE" if settings.curve else ""
    log(f"listening on {conn.router} (events on {conn.pub}){encrypted} as {getpass.getuser()}, pid {os.getpid()}")
    if capacity:
        log(capacity)
    try:
        broker.serve()
    finally:
        discovery.remove_connection(settings, conn)
        if audit_file is not None:
            audit_file.close()
    return 0
