"""What a rank process keeps to talk to the broker, one per process.

Paused threads never touch a socket. They hand their prompt to the rank process and block on a
queue of their own until the broker sends their next line; the link's thread does the rest,
including sending output that a running command printed once it has sat idle a moment. The
rank process keeps the sessions; what the broker knows of the ranks that run is its `Presence`, and
stopping a running rank its `Interrupts`, reading one without stopping it its `Evaluations`.
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from monarch_pdb import discovery, wire
from monarch_pdb.link import Link
from monarch_pdb.rank.identity import Identity, current, job_name, rank_is_set
from monarch_pdb.rank.presence import Presence
from monarch_pdb.rank.rank_threads import RankThreads
from monarch_pdb.settings import Settings
from monarch_pdb.settings import load as load_settings

if TYPE_CHECKING:
    import zmq

    from monarch_pdb.rank.interrupt import Interrupts, Stop
    from monarch_pdb.rank.peek import Evaluations
    from monarch_pdb.rank.running_breakpoints import RunningBreakpoints

OUTPUT_IDLE = 0.05
RUNNING = "the rank is running: pause it first"
BREAKPOINTS_LIMIT = 5.0
"""Seconds a process may take to find the code of a file it was sent breakpoints for."""


@dataclass
class Line:
    """An input line for a session, numbered by the broker."""

    cmd: int
    text: str
    release: bool = False
    colour: bool = False


if TYPE_CHECKING:
    from typing import TypeAlias

    Inbound: TypeAlias = Line | wire.Inspect | wire.Complete
    """What a paused session's thread is handed: its next line, or a question it answers meanwhile
    (shells' and editors' messages, which a rank loads only once one comes)."""


class OutputSource(Protocol):
    """A session's pdb output, sent on its own once it has sat idle for OUTPUT_IDLE."""

    def take_idle(self, now: float) -> tuple[str, bool]:
        """Output that has sat idle, and whether the session still holds some to come back for."""


class RankProcess:
    """This process's sessions, and its link to the broker.

    Locking: `_lock` guards the session tables (`_inboxes` to `_by_thread`); while it is held,
    a session's output, the presence and the rank threads may take their locks, never the
    other way round."""

    _instance: RankProcess | None = None
    _instance_lock = threading.Lock()

    @classmethod
    def get(cls, stop: Stop, break_at: Callable[[Any], None]) -> RankProcess:
        """The process's RankProcess, started on first use (the one global this package keeps);
        `stop` is how its interrupts stop a thread (the debugger's `interrupt`), `break_at` how
        an editor's breakpoints do (its `break_at`)."""
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = RankProcess(load_settings(), stop, break_at=break_at)
            return cls._instance

    @classmethod
    def existing(cls) -> RankProcess | None:
        """The process's RankProcess if `install` or a breakpoint started it, without starting one
        (an endpoint call asks each time: a look-up, no system call)."""
        return cls._instance

    @classmethod
    def forked(cls) -> None:
        """In a forked child: the parent's rank process, whose link's thread did not come along, is
        not this process's."""
        cls._instance = None
        cls._instance_lock = threading.Lock()

    def __init__(
        self,
        settings: Settings,
        stop: Stop,
        context: zmq.Context | None = None,
        break_at: Callable[[Any], None] | None = None,
    ) -> None:
        """A process has one rank process (`get`); a load generator that stands in for many rank
        processes makes one per emulated rank, sharing one ZeroMQ context, and none of them
        stops at an editor's breakpoints (no `break_at`)."""
        self.settings = settings
        self._inboxes: dict[int, queue.SimpleQueue[Inbound]] = {}
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
        self.stopped = threading.Event()
        """Set once a session has opened in this process (post-mortem's default policy asks)."""
        self.threads = RankThreads()
        self.presence = Presence(self.threads, wake=lambda: self.link.post())
        self._stop, self._break_at = stop, break_at
        self._parts: dict[str, Any] = {}
        self._parts_lock = threading.Lock()
        self.gone_editors: set[bytes] = set()
        """Editors that disconnected, or were lost, after setting breakpoints: a session
        forgets theirs (`EditorBreakpoints.drop_gone`) before it stops at one or runs on."""
        self.link = Link(settings, wire.Role.RANK, self, self._locate, context=context, job=job_name())

    # --- parts made when first used: a rank that is never stopped, read or given
    # breakpoints does not load them ------------------------------------------------------

    @property
    def interrupts(self) -> Interrupts:
        """Stopping a running rank (see monarch_pdb.rank.interrupt)."""
        from monarch_pdb.rank.interrupt import Interrupts

        return self.made("interrupts") or self._make("interrupts", lambda: Interrupts(self._stop))

    @property
    def evaluations(self) -> Evaluations:
        """Reading a running rank on a thread of ours (see monarch_pdb.rank.peek)."""
        from monarch_pdb.rank.peek import Evaluations

        return self.made("evaluations") or self._make("evaluations", lambda: Evaluations(self.link.post))

    @property
    def breakpoints(self) -> RunningBreakpoints:
        """An editor's breakpoints in running code (see monarch_pdb.rank.running_breakpoints)."""
        from monarch_pdb.rank.running_breakpoints import RunningBreakpoints

        return self.made("breakpoints") or self._make(
            "breakpoints",
            lambda: RunningBreakpoints(lambda owner, text: self.log(owner, current(), text), self._break_at),
        )

    def made(self, part: str) -> Any:
        """The part of that name if it was made, without making it (None)."""
        return self._parts.get(part)

    def _make(self, part: str, make: Callable[[], Any]) -> Any:
        with self._parts_lock:
            if part not in self._parts:
                self._parts[part] = make()
            return self._parts[part]

    def _locate(self) -> discovery.BrokerAddress | None:
        """The broker: one elsewhere, or this host's, started if need be (with the secret of
        the environment, if any). A rank with an upstream (MONARCH_PDB_UPSTREAM) has its host's
        broker, which takes the secret it carries to register with the broker above."""
        here = discovery.is_local(self.settings.host)
        conn = discovery.locate(self.settings, here)
        if conn is None and self.settings.upstream and discovery.secret_of(self.settings) is None:
            raise discovery.NotFound(
                f"MONARCH_PDB_UPSTREAM names {self.settings.upstream}, but this host's broker "
                "needs that broker's secret to register: set MONARCH_PDB_SECRET_FILE"
            )
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

    def open_session(
        self, output: OutputSource, identity: Identity, own_name: bool
    ) -> tuple[int, queue.SimpleQueue[Inbound], Identity]:
        """A new session id, the queue its input lines arrive on, and the name it is listed under.

        A session named for sure (`own_name`: by an endpoint call, or as the rank an interrupt
        stops) keeps its name. Any other is named after the process, whose rank a launcher's
        variables (or the pid) give to the thread that runs the rank's code (`RankThreads.runs`:
        the main thread under torchrun), whichever thread stops first; a rank the program named
        goes to the first thread to stop as it. A session of another thread, or under a name
        another session of the process holds, is listed with its own thread id as rank and its
        thread's name as instance."""
        inbox: queue.SimpleQueue[Inbound] = queue.SimpleQueue()
        runs_rank = own_name or rank_is_set() or self.threads.runs(identity.actor, identity.rank)
        with self._lock:
            sid = next(self._sids)
            name = (identity.job, identity.actor, identity.rank)
            if not own_name and (name in self._holders or not runs_rank):
                identity = replace(
                    identity,
                    rank=threading.get_native_id(),
                    instance=wire.thread_instance(identity.instance, threading.current_thread().name),
                )
                name = (identity.job, identity.actor, identity.rank)
                self._by_thread.add(sid)
            self._names[sid] = name
            self._holders.setdefault(name, sid)
            self._inboxes[sid] = inbox
            self._sources[sid] = output
        self.stopped.set()
        return sid, inbox, identity

    def close_session(self, sid: int, ended: wire.Ended) -> None:
        with self._lock:
            self._inboxes.pop(sid, None)
            self._sources.pop(sid, None)
            self._waiting.pop(sid, None)
            self._printing.discard(sid)
            name = self._names.pop(sid, None)
            if name is not None and self._holders.get(name) == sid:
                del self._holders[name]
            if ended.reason != wire.Ending.CONTINUED and name is not None:
                self.presence.call_ended(
                    name, wire.RankState.QUIT if ended.reason == wire.Ending.QUIT else wire.RankState.FINISHED
                )
            self._by_thread.discard(sid)
            self.threads.closed(sid)
            if not self._inboxes:
                self.presence.sessions_closed()
        self.link.post(ended)

    def printing(self, sid: int) -> None:
        """A session wrote output while running: the link sends it once it sits idle."""
        with self._lock:
            self._printing.add(sid)
        self.link.post()

    def wait_for_input(self, prompt: wire.Prompt, frame: Any = None, raised: Any = None) -> None:
        """Announce that a session waits (its pdb at `frame`; in post-mortem of the traceback
        `raised`); kept so a new broker learns of it after a restart."""
        with self._lock:
            self._waiting[prompt.sid] = prompt
            self.threads.paused(prompt.sid, prompt.actor, prompt.rank, frame, raised)
            self._unsent.append(prompt.sid)
            if prompt.sid not in self._by_thread:
                self.presence.paused_as(
                    wire.PresentRank(prompt.job, prompt.actor, prompt.rank, prompt.coords, prompt.instance)
                )
            self._printing.discard(prompt.sid)  # its output went with the prompt
        self.link.post()

    def wait_ready(self, who: str) -> bool:
        """Block until a broker has welcomed us; say on stderr what we wait for, and why."""
        ready = self.link.ready
        if ready.wait(self.settings.connect_timeout):
            return True
        where = f"{self.settings.host}:{self.settings.port}"
        found = discovery.unanswered(self.settings)
        unwritable = discovery.unwritable(self.settings) if discovery.is_local(self.settings.host) else ""
        if found is not None and found.fix:
            why = f" ({found.why}). {found.fix[:-1]}"
        elif unwritable:
            why = f", and none can start on this host: {unwritable}"
        else:
            why = f" ({found.why})" if found is not None else self.link.problem
            why += ". Start one with `monarch-pdb broker` (set MONARCH_DEBUG_SERVER_HOST/PORT to match)"
        print(
            f"monarch-pdb: {who} (pid {os.getpid()}) is paused at a breakpoint, but no debug broker answers at "
            f"{where}{why}; waiting.",
            file=sys.stderr,
            flush=True,
        )
        limit = self.settings.give_up_after
        if not ready.wait(limit if limit > 0 else None):
            print(
                f"monarch-pdb: {who}: no broker after {limit:g} s; continuing without stopping.",
                file=sys.stderr,
                flush=True,
            )
            return False
        print(f"monarch-pdb: {who}: connected to the debug broker at {where}.", file=sys.stderr, flush=True)
        return True

    # --- the link's thread (link.LinkOwner) -------------------------------------------------

    def welcomed(self, broker_pid: int) -> list[wire.Message]:
        with self._lock:
            self._unsent = list(self._waiting)
        self.presence.welcomed()
        return []

    def received(self, msg: wire.Message) -> None:
        """By the message's type: those of rank processes first, then the questions an editor asks a
        paused session (their module loads with the first one)."""
        if isinstance(msg, wire.Dismiss):
            print(f"monarch-pdb: the debug broker {msg.text}", file=sys.stderr, flush=True)
            msg = wire.Input(sid=msg.sid, cmd=0, line="continue", release=True)
        if isinstance(msg, wire.Input):
            with self._lock:
                inbox = self._inboxes.get(msg.sid)
                self._waiting.pop(msg.sid, None)
            if inbox is not None:
                inbox.put(Line(msg.cmd, msg.line, msg.release, msg.colour))
        elif isinstance(msg, wire.TakeStacks):
            self.take_stacks(msg)
        elif isinstance(msg, wire.PeekRanks):
            self.peek(msg)
        elif isinstance(msg, wire.InterruptRanks):
            self.interrupt(msg.actor, msg.ranks)
        elif isinstance(msg, wire.BreakRanks):
            self.set_breakpoints(msg)
        elif isinstance(msg, wire.EditorGone):
            self.gone_editors.add(msg.owner)
            if self.made("breakpoints") is not None:
                self.breakpoints.forget(msg.owner)
        elif isinstance(msg, wire.Inspect):
            if msg.query == wire.Query.BREAKPOINTS:
                self.gone_editors.discard(msg.owner)
            self.to_paused(msg.sid, msg, wire.Inspection(ref=msg.ref, items=[], error=RUNNING))
        elif isinstance(msg, wire.Complete):
            self.to_paused(msg.session, msg, wire.Completions(ref=msg.ref, matches=[], error=RUNNING))

    def to_paused(self, sid: int, question: wire.Inspect | wire.Complete, refusal: wire.Message) -> None:
        """A question for a session's paused thread, which answers it between two lines; the
        refusal when the session runs."""
        with self._lock:
            inbox = self._inboxes.get(sid) if sid in self._waiting else None
        if inbox is None:
            self.link.post(refusal)
        else:
            inbox.put(question)

    def log(self, owner: bytes, ident: Identity, text: str) -> None:
        """A log point's message, for the editor that set it."""
        self.link.post(
            wire.Logged(owner=owner, job=ident.job, actor=ident.actor, rank=ident.rank, text=self.clip(text))
        )

    def published(self, msg: wire.Event | wire.Printed | wire.OutputLive) -> None:
        pass

    def idle_delay(self) -> float | None:
        with self._lock:
            unsent, printing = bool(self._unsent), bool(self._printing)
        if unsent:
            return 0.0
        now = time.monotonic()
        evaluations, interrupts = self.made("evaluations"), self.made("interrupts")
        evaluated = evaluations.delay(now) if evaluations is not None else None
        due = [d for d in (self.presence.delay(now), evaluated) if d is not None]
        if due:
            return min(due)
        if interrupts is not None and interrupts.pending():
            from monarch_pdb.rank.interrupt import RETRY

            return RETRY
        return OUTPUT_IDLE if printing else None

    def tick(self, now: float) -> list[wire.Message]:
        """Prompts first (each took its output before anything queued after it), then idle output.

        A session is forgotten here only under both locks, and its output emptied under the
        second, so a write racing with that tells the rank process again."""
        with self._lock:
            prompts = [self._waiting[s] for s in self._unsent if s in self._waiting]
            self._unsent.clear()
            for prompt in prompts:  # told to a broker: to one that restarts since, no news
                if not prompt.again:
                    self._waiting[prompt.sid] = replace(prompt, again=True)
            out: list[wire.Message] = list(prompts)
            for sid in list(self._printing):
                source = self._sources.get(sid)
                text, held = source.take_idle(now) if source is not None else ("", False)
                if not held:
                    self._printing.discard(sid)
                if text:
                    out.append(wire.Output(sid=sid, text=self.clip(text)))
        present = self.presence.tick(now)
        if present is not None:
            out.append(present)
        evaluations, interrupts = self.made("evaluations"), self.made("interrupts")
        if interrupts is not None:
            interrupts.tick(now)
        return out + evaluations.tick(now) if evaluations is not None else out

    def take_stacks(self, msg: wire.TakeStacks) -> None:
        """The stacks now; with their locals, once a thread of ours has read them (see
        monarch_pdb.rank.peek), or without them past a moment."""
        from monarch_pdb.rank import peek, thread_stacks

        running = self.threads.of(msg.actor, msg.ranks, self.presence.own())
        groups = thread_stacks.take(msg.ranks, running, msg.threads == wire.Threads.ALL)
        if not msg.locals:
            self.link.post(wire.StackReport(ref=msg.ref, groups=groups))
            return
        limit = min(peek.LOCALS_LIMIT, msg.timeout / 2) if msg.timeout > 0 else peek.LOCALS_LIMIT
        frames = {
            rank: peek.choose_frame(peek.rank_frames(running[rank]), paused=running[rank].frame is not None)
            for rank in msg.ranks
        }
        self.evaluations.start(
            [(rank, partial(peek.shown_locals, frame)) for rank, frame in frames.items()],
            limit,
            lambda answers, late: wire.StackReport(ref=msg.ref, groups=peek.with_locals(groups, answers, late, limit)),
            time.monotonic(),
        )

    def peek(self, msg: wire.PeekRanks) -> None:
        """Evaluate the expression for each rank on a thread of ours; the link answers."""
        from monarch_pdb.rank import peek

        running = self.threads.of(msg.actor, msg.ranks, self.presence.own())

        def report(answers: dict[int, str], late: list[int]) -> wire.PeekReport:
            clipped = {rank: self.clip(text) for rank, text in answers.items()}
            return wire.PeekReport(ref=msg.ref, groups=peek.grouped(clipped, late, msg.limit))

        if msg.reading == wire.Reading.COLLECTIVES:
            reads = [(rank, peek.collectives) for rank in msg.ranks]
        else:
            reads = [
                (rank, partial(peek.peek, running[rank], msg.expression, msg.function, msg.up)) for rank in msg.ranks
            ]
        self.evaluations.start(
            reads,
            msg.limit,
            report,
            time.monotonic(),
        )

    def interrupt(self, actor: str, ranks: list[int]) -> None:
        """Ask the thread that runs each rank's code to stop in a session (see
        monarch_pdb.rank.interrupt), as the rank it runs."""
        running = self.threads.of(actor, ranks, self.presence.own())
        identities = self.presence.identities(actor, running)
        self.interrupts.ask(((running[rank], identities[rank]) for rank in running), time.monotonic())

    def set_breakpoints(self, msg: wire.BreakRanks) -> None:
        """An editor's breakpoints in this process's code, found on a thread of ours (finding a
        file's code looks at its modules, and at every function of the process only when those
        hold none of its lines); the link answers."""
        self.gone_editors.discard(msg.owner)
        if msg.uncaught is not None:
            self.breakpoints.uncaught, self.breakpoints.uncaught_owner = msg.uncaught, msg.owner

        def change() -> list[str]:
            try:
                return self.breakpoints.change(msg.path, msg.spots, msg.owner) if msg.path else []
            except Exception as error:  # the process's own code objects, or a tool of another debugger
                return [f"{type(error).__name__}: {error}"] * len(msg.spots)

        late = [f"still looking for the code of {msg.path} after {BREAKPOINTS_LIMIT:g} s"] * len(msg.spots)
        self.evaluations.start(
            [(0, change)],
            BREAKPOINTS_LIMIT,
            lambda answers, _: wire.BreakReport(ref=msg.ref, reasons=answers.get(0, late)),
            time.monotonic(),
        )


os.register_at_fork(after_in_child=RankProcess.forked)
