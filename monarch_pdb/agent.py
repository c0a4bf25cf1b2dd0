"""The agent: what a rank process keeps to talk to the broker, one per process.

Paused threads never touch a socket. They hand their prompt to the agent and block on a
queue of their own until the broker sends their next line; the link's thread does the rest,
including sending output that a running command printed once it has sat idle a moment.
"""

from __future__ import annotations

import os
import queue
import socket
import sys
import itertools
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Protocol

import zmq

from monarch_pdb import discovery, interrupt, stacks, wire
from monarch_pdb.identity import Identity, current, job_name
from monarch_pdb.link import Link
from monarch_pdb.rank_threads import RankThreads
from monarch_pdb.settings import Settings
from monarch_pdb.settings import load as load_settings

OUTPUT_IDLE = 0.05
INTERRUPT_RETRY = 0.1
PRESENT_EVERY = 0.25
"""Seconds between two announcements of the ranks a mesh runtime names: a thousand ranks
starting at once make a few messages, not a thousand growing ones. A process that is its own
rank is announced at once, in the same batch as a prompt that renames it."""
OWN_RECHECK = 1.0
"""Seconds between two looks at a process's own identity, which its engine may change after
start-up (a Ray worker becomes an actor)."""


@dataclass
class Line:
    """An input line for a session, numbered by the broker."""

    cmd: int
    text: str
    release: bool = False


class OutputSource(Protocol):
    """A session's pdb output, sent on its own once it has sat idle for OUTPUT_IDLE."""

    def take_idle(self, now: float) -> tuple[str, bool]:
        """Output that has sat idle, and whether the session still holds some to come back for."""


class Agent:
    _instance: Agent | None = None
    _instance_lock = threading.Lock()

    @classmethod
    def get(cls) -> Agent:
        """The process's agent, started on first use (the one global this package keeps)."""
        with cls._instance_lock:
            if cls._instance is None or cls._instance.pid != os.getpid():
                cls._instance = Agent(load_settings())
            return cls._instance

    @classmethod
    def existing(cls) -> Agent | None:
        """The process's agent if `install` or a breakpoint started it, without starting one."""
        agent = cls._instance
        return agent if agent is not None and agent.pid == os.getpid() else None

    def __init__(self, settings: Settings, context: zmq.Context | None = None) -> None:
        """A process has one agent (`get`); a load generator that stands in for many rank
        processes makes one per emulated rank, sharing one ZeroMQ context."""
        self.settings = settings
        self.pid = os.getpid()
        self._inboxes: dict[int, queue.SimpleQueue[Line]] = {}
        self._sources: dict[int, OutputSource] = {}
        self._waiting: dict[int, wire.Prompt] = {}
        self._unsent: list[int] = []
        self._printing: set[int] = set()
        """Sessions holding output that neither a prompt nor the link has taken yet: only these
        are looked at, so a process with thousands of paused sessions does no work for them."""
        self._sids = itertools.count(1)
        self._names: dict[int, tuple[str, str, int]] = {}
        self._holders: dict[tuple[str, str, int], int] = {}
        """Each open session's (job, actor, rank), and the other way round: no other may take it."""
        self._by_thread: set[int] = set()
        """Sessions named after their thread (see `open_session`): never the process's own rank."""
        self._lock = threading.Lock()
        self.loose_sessions: dict[int, Any] = {}
        """Sessions opened outside any endpoint call, by thread: they end when tracing stops."""
        self.stopped = False
        """Whether a session has opened in this process (post-mortem's default policy asks)."""
        self._hosted: dict[tuple[str, str, int], dict] = {}
        self._own = False
        self._own_as: list | None = None
        """The [job, actor, rank, coords, instance] the broker has for this process, when it is its own rank."""
        self._own_stopped_as: list | None = None
        """Its sessions' identity while one is open: a paused thread may see more of it (a Ray
        task's name) than the link's thread does."""
        self._own_checked = float("-inf")
        self._present_due = False
        self._announced: int | None = None
        """How many of `_hosted` the broker has (in order); None: it needs them all."""
        self._quit: set[tuple[str, str, int]] = set()
        """Hosted ranks whose last call ended by quitting the debugger (the broker lists them as
        quit); each is announced again when its next call starts (then in `_again`)."""
        self._again: list[tuple[str, str, int]] = []
        self._present_at = float("-inf")
        self.threads = RankThreads()
        self.line_stops = interrupt.LineStops()
        self._interrupts: list[tuple[Identity, float]] = []
        self._signalled = 0.0
        self.link = Link(settings, "agent", job_name(), self, self._locate, context=context)

    def _locate(self) -> discovery.Connection | None:
        conn = discovery.locate(self.settings)
        if conn is None and discovery.is_local(self.settings.host):
            conn = discovery.start_embedded_broker(self.settings)
        if conn is None:
            remote = "" if discovery.is_local(self.settings.host) else "; for a remote broker set MONARCH_PDB_SECRET"
            raise discovery.NotFound(f"no running broker's file at {discovery.connection_file(self.settings)}{remote}")
        return conn

    def clip(self, text: str) -> str:
        """Output as large as one message may carry, with room for the rest of it."""
        return wire.clip(text, min(wire.MAX_OUTPUT, self.settings.max_message // 2))

    # --- called from paused threads ----------------------------------------------------

    def open_session(self, output: OutputSource, identity: Identity,
                     own_name: bool) -> tuple[int, queue.SimpleQueue[Line], Identity]:
        """A new session id, the queue its input lines arrive on, and the name it is listed under.

        A session named by an endpoint call (`own_name`) keeps its name. Any other is named
        after the process, which one thread cannot own for the others: a thread stopping under a
        name another session of the process holds, or under the pid (the main thread's name),
        is listed with its own thread id as rank and its thread's name as instance."""
        sid = next(self._sids)
        inbox: queue.SimpleQueue[Line] = queue.SimpleQueue()
        with self._lock:
            name = (identity.job, identity.actor, identity.rank)
            thread = threading.current_thread()
            if not own_name and (name in self._holders
                                 or (identity.rank == self.pid and thread is not threading.main_thread())):
                named = f"thread {thread.name}"
                identity = replace(identity, rank=threading.get_native_id(),
                                   instance=f"{identity.instance}, {named}" if identity.instance else named)
                name = (identity.job, identity.actor, identity.rank)
                self._by_thread.add(sid)
            self._names[sid] = name
            self._holders.setdefault(name, sid)
            self._inboxes[sid] = inbox
            self._sources[sid] = output
            self.stopped = True
        return sid, inbox, identity

    def close_session(self, sid: int, ended: wire.Ended) -> None:
        with self._lock:
            self._inboxes.pop(sid, None)
            self._sources.pop(sid, None)
            self._waiting.pop(sid, None)
            self._printing.discard(sid)
            name = self._names.pop(sid, None)
            if self._holders.get(name) == sid:
                del self._holders[name]
            if ended.reason == "quit" and name in self._hosted:
                self._quit.add(name)
            self._by_thread.discard(sid)
            self.threads.closed(sid)
            if not self._inboxes:
                self._own_stopped_as = None
        self.link.post(ended)

    def printing(self, sid: int) -> None:
        """A session wrote output while running: the link sends it once it sits idle."""
        with self._lock:
            self._printing.add(sid)
        self.link.post()

    def wait_for_input(self, prompt: wire.Prompt) -> None:
        """Announce that a session waits; kept so a new broker learns of it after a restart."""
        with self._lock:
            self._waiting[prompt.sid] = prompt
            self.threads.paused(prompt.sid, prompt.actor, prompt.rank)
            self._unsent.append(prompt.sid)
            if self._own and prompt.sid not in self._by_thread:
                self._own_stopped_as = [prompt.job, prompt.actor, prompt.rank, prompt.coords, prompt.instance]
                self._present_due = self._present_due or self._own_stopped_as != self._own_as
            self._printing.discard(prompt.sid)  # its output went with the prompt
        self.link.post()

    def wait_ready(self, who: str) -> bool:
        """Block until a broker has welcomed us; say on stderr what we wait for, and why."""
        ready = self.link.ready
        if ready.wait(self.settings.connect_timeout):
            return True
        where = f"{self.settings.host}:{self.settings.port}"
        other = discovery.other_program(self.settings)
        print(
            f"monarch-pdb: {who} (pid {os.getpid()}) is paused at a breakpoint, but no debug broker "
            f"answers at {where}{f' ({other})' if other else self.link.problem}. Start one with `monarch-pdb broker` "
            "(set MONARCH_DEBUG_SERVER_HOST/PORT to match); waiting.",
            file=sys.stderr, flush=True,
        )
        limit = self.settings.give_up_after
        if not ready.wait(limit if limit > 0 else None):
            print(f"monarch-pdb: {who}: no broker after {limit:g} s; continuing without stopping.",
                  file=sys.stderr, flush=True)
            return False
        print(f"monarch-pdb: {who}: connected to the debug broker at {where}.", file=sys.stderr, flush=True)
        return True

    # --- the link's thread (link.Peer) -------------------------------------------------

    def welcomed(self) -> list[wire.Message]:
        with self._lock:
            self._unsent = list(self._waiting)
            self._present_due = bool(self._hosted) or self._own
            self._announced = None
        return []

    def received(self, msg: wire.Message) -> None:
        if isinstance(msg, wire.Dismiss):
            print(f"monarch-pdb: the debug broker {msg.text}", file=sys.stderr, flush=True)
            msg = wire.Input(sid=msg.sid, cmd=0, line="continue", release=True)
        if isinstance(msg, wire.Input):
            with self._lock:
                inbox = self._inboxes.get(msg.sid)
                self._waiting.pop(msg.sid, None)
            if inbox is not None:
                inbox.put(Line(msg.cmd, msg.line, msg.release))
        elif isinstance(msg, wire.TakeStacks):
            self.link.post(self.stack_report(msg))
        elif isinstance(msg, wire.InterruptRanks):
            self.interrupt(msg.actor, [r for r in msg.ranks if isinstance(r, int)])

    def published(self, msg: wire.Event | wire.Printed | wire.OutputLive) -> None:
        pass

    def idle_delay(self) -> float | None:
        if self._unsent:
            return 0.0
        if self._present_due:
            return 0.0 if self._own else max(0.0, self._present_at + PRESENT_EVERY - time.monotonic())
        if self._interrupts or self.line_stops.pending():
            return INTERRUPT_RETRY
        return OUTPUT_IDLE if self._printing else None

    def tick(self, now: float) -> list[wire.Message]:
        """Prompts first (each took its output before anything queued after it), then idle output.

        A session is forgotten here only under both locks, and its output emptied under the
        second, so a write racing with that tells the agent again."""
        with self._lock:
            out: list[wire.Message] = [self._waiting[s] for s in self._unsent if s in self._waiting]
            self._unsent.clear()
            for sid in list(self._printing):
                source = self._sources.get(sid)
                text, held = source.take_idle(now) if source is not None else ("", False)
                if not held:
                    self._printing.discard(sid)
                if text:
                    out.append(wire.Output(sid=sid, text=self.clip(text)))
        if self._own and now >= self._own_checked + OWN_RECHECK:
            self._own_checked = now
            if self.own_identity() != self._own_as:
                self._present_due = True
        if self._present_due and (self._own or now >= self._present_at + PRESENT_EVERY):
            self._present_at = now
            out.append(self.presence())
        if self._interrupts:
            self.signal_again(now)
        if self.line_stops.pending():
            self.line_stops.forget_old(now)
        return out

    # --- presence: the ranks this process runs, paused or not ---------------------------

    def host(self, job: str, actor: str, rank: int, coords: dict) -> None:
        """A rank this process runs from now on, named by a mesh runtime: the broker learns it
        at once (it replaces the process's own identity, see `host_self`)."""
        key = (job, actor, rank)
        with self._lock:
            if key in self._quit:
                self._quit.discard(key)
                self._again.append(key)
            elif key in self._hosted:
                return
            else:
                self._hosted[key] = dict(coords)
                if self._own:
                    self._own, self._announced = False, None
            self._present_due = True
        self.link.post()

    def host_self(self) -> None:
        """The process is a rank of its own (its identity: launcher variables, set_identity)
        until a mesh runtime names the ranks it runs."""
        with self._lock:
            self._own = not self._hosted
            self._present_due = True
            self._announced = None
        self.link.post()

    def renamed(self) -> None:
        """The program named itself (set_identity): tell the broker, if it is its own rank."""
        if self._own:
            with self._lock:
                self._present_due = True
            self.link.post()

    def presence(self) -> wire.Present:
        """The ranks the broker does not have yet (all of them when it needs all)."""
        with self._lock:
            self._present_due = False
            hosted = list(self._hosted.items())
            own = self._own
            since = self._announced
            self._announced = None if own else len(hosted)
            again, self._again = [(key, self._hosted[key]) for key in self._again], []
        if own:
            self._own_as = self.own_identity()
            return wire.Present(ranks=[self._own_as])
        fresh = hosted if since is None else hosted[since:] + again
        return wire.Present(ranks=[[job, actor, rank, coords] for (job, actor, rank), coords in fresh],
                            added=since is not None)

    def own_identity(self) -> list:
        """[job, actor, rank, coords, instance] of a process that is its own rank."""
        if self._own_stopped_as is not None:
            return self._own_stopped_as
        ident = self.threads.newest_call() or current()
        return [ident.job, ident.actor, ident.rank, ident.coords, ident.instance]

    def stack_report(self, msg: wire.TakeStacks) -> wire.StackReport:
        ranks = [r for r in msg.ranks if isinstance(r, int)]
        running = self.threads.of(msg.actor, ranks, self._own)
        return wire.StackReport(ref=msg.ref, groups=stacks.take(ranks, running, msg.threads == "all"))

    # --- interrupts: stopping running ranks where they are -----------------------------

    def interrupt(self, actor: str, ranks: list[int]) -> None:
        """Ask the thread that runs each rank's code to stop in a session: by a signal, or at
        its next line (see monarch_pdb.interrupt); one that can be asked neither way stays
        running."""
        with self._lock:
            hosted = {(a, r): (job, coords) for (job, a, r), coords in self._hosted.items()}
        now = time.monotonic()
        for rank, running in self.threads.of(actor, ranks, self._own).items():
            if (actor, rank) in hosted:
                job, coords = hosted[(actor, rank)]
                ident = Identity(job=job, actor=actor, rank=rank, coords=dict(coords),
                                 hostname=socket.gethostname(), pid=os.getpid())
            else:
                job, own_actor, own_rank, coords, instance = self.own_identity()
                ident = Identity(job=job, actor=own_actor, rank=own_rank, coords=dict(coords),
                                 hostname=socket.gethostname(), pid=os.getpid(), instance=instance)
            if interrupt.signal_reaches(running):
                with self._lock:
                    self._interrupts.append((ident, now))
            else:
                self.line_stops.ask(running, ident, now)
        if self._interrupts:
            self.signal_again(now, force=True)

    def signal_again(self, now: float, force: bool = False) -> None:
        """Signal the main thread while an interrupt is wanted: its handler waits while the
        thread runs the debugger's own code, and interrupts nobody took are forgotten."""
        with self._lock:
            self._interrupts = [(ident, since) for ident, since in self._interrupts if now - since < interrupt.PATIENCE]
            wanted = bool(self._interrupts)
        if wanted and (force or now - self._signalled >= INTERRUPT_RETRY):
            self._signalled = now
            interrupt.signal_main_thread()

    def next_interrupt(self) -> Identity | None:
        """Called by the signal handler: the rank to stop (one session per thread at a time,
        so the rest are dropped). Never blocks: the handler may run while a lock is held."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            wanted, self._interrupts = self._interrupts, []
        finally:
            self._lock.release()
        return wanted[0][0] if wanted else None
