"""What an editor debugs, without the protocol it speaks: the selected ranks' paused sessions as
threads, the sessions it holds, its steps and breakpoints, and the broker's news as typed events.

As vscode-mock-debug's `MockRuntime` under its `MockDebugSession`: `dap_session` turns requests
into calls here and these events into DAP's. Every piece of broker news (folded events, replies
nobody waited for, what a held session printed) comes in through `heard`, and every change the
editor is told of leaves through `emit`, as one of the events below.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from monarch_pdb import ranks, wire
from monarch_pdb.client.commands.hangs import GONE
from monarch_pdb.client.connection import BrokerConnection, NoBroker, RequestFailed, Timeout
from monarch_pdb.settings import Settings

STEP_TIMEOUT = 24 * 3600.0
"""How long a step may run before the broker stops waiting for it: a step into a long
computation is still a step."""
REPL_TIMEOUT = 30.0
STOP_REASONS = {
    wire.EventKind.BREAKPOINT: "breakpoint",
    wire.EventKind.POST_MORTEM: "exception",
    wire.EventKind.INTERRUPTED: "pause",
}
STOPS_ALL = (wire.EventKind.BREAKPOINT, wire.EventKind.POST_MORTEM)
"""The stops after which `stopAll` interrupts the other ranks."""
JOB_CHECK_EVERY = 1.0
"""How often the editor asks whether the jobs it debugs have ended, while no rank of them is
paused once a session ended: a rank's process exits a moment after its last call, and the
broker tells no event of that."""


class Refused(Exception):
    """What the runtime cannot do; the text is the one line the editor shows."""


@dataclass(frozen=True)
class Debuggee:
    """Which ranks the editor debugs: an actor and a `ranks(...)` selector (both optional), in
    the shell's words (`trainer ranks(0:8)`), and a job."""

    job: str = ""
    actor: str = ""
    selector: str = ""

    @classmethod
    def parse(cls, text: str, job: str = "") -> Debuggee:
        text = text.strip()
        actor, _, rest = text.partition(" ") if not text.startswith("ranks") else ("", "", text)
        rest = rest.strip()
        if not rest:
            return cls(job, actor, "")
        try:
            return cls(job, actor, ranks.render_selector(ranks.parse_selector(rest)))
        except ranks.SelectorError as error:
            raise Refused(f"ranks: {error}") from None

    def picked(self, rows: list[wire.SessionRow]) -> set[int] | None:
        """The ranks of `rows` its selector picks; None where it has none (every rank)."""
        if not self.selector:
            return None
        selection = ranks.parse_selector(self.selector)
        mine = [row for row in rows if self.chooses(row.job, row.actor, None, row.rank)]
        return set(ranks.select(selection, ((row.rank, row.coords) for row in mine)))

    def chooses(self, job: str, actor: str, picked: set[int] | None, rank: int) -> bool:
        return (
            (not self.job or job == self.job)
            and (not self.actor or actor == self.actor)
            and (picked is None or rank in picked)
        )


@dataclass
class Thread:
    """A paused rank, shown as one thread."""

    id: int
    job: str
    actor: str
    rank: int
    name: str
    running: bool = False
    pausing: bool = False
    """Asked to pause since it last ran."""
    session: int = 0
    """The broker's number for its session while the editor holds it (attached, as a shell
    is), else 0."""
    released: bool = False
    """Let go by the top-level continue: its next stop comes as the broker's event."""
    own: int = 0
    """The editor's own lines (steps, Debug Console lines) it is running: what it prints
    meanwhile is their answer."""
    echo: bool = False
    """The answer to one of them came: its prompt's output, which follows, is that answer again."""
    stop: int = 0
    """The rank's number for the stop its frames were shown at (`Inspection.stop`)."""
    reason: str = ""
    """Why it last stopped, as `Stopped` said."""


def thread_name(row: wire.SessionRow) -> str:
    coords = ", ".join(f"{dim}={value}" for dim, value in row.coords.items())
    return f"{row.actor} {row.rank} · {row.host} · {coords}" if coords else f"{row.actor} {row.rank} · {row.host}"


# --- what the editor is told ----------------------------------------------------------------


@dataclass(frozen=True)
class Stopped:
    """The thread's rank waits at a prompt; `own`: the end of the user's own step of it."""

    thread: Thread
    reason: str
    own: bool = False


@dataclass(frozen=True)
class Ran:
    """The thread's rank runs; `told`: by another client or the broker, not by this editor."""

    thread: Thread
    told: bool = False


@dataclass(frozen=True)
class ThreadStarted:
    thread: Thread


@dataclass(frozen=True)
class ThreadExited:
    thread: Thread


@dataclass(frozen=True)
class PrintedByRank:
    """What a rank printed; `log`: a log point's message."""

    actor: str
    rank: int
    text: str
    log: bool = False


@dataclass(frozen=True)
class Note:
    """A line for the Debug Console from monarch-pdb itself."""

    text: str


@dataclass(frozen=True)
class Verified:
    """A breakpoint that waited for a rank to take it was taken."""

    number: int
    line: int


@dataclass(frozen=True)
class Finished:
    """Every rank of the jobs debugged finished: the session ends."""


@dataclass(frozen=True)
class Changed:
    """The broker told of ranks that stopped, ran or went: a view of the ranks is out of date."""


Happening = Stopped | Ran | ThreadStarted | ThreadExited | PrintedByRank | Note | Verified | Finished | Changed
Emit = Callable[[Happening], None]
News = list | wire.Message
"""What `heard` takes: a list of the broker's folded events, or a reply nobody waited for."""


@dataclass(frozen=True)
class Options:
    """The attach configuration's choices that the runtime acts on."""

    target: Debuggee = Debuggee()
    wait_for_job: bool = False
    """Once every rank has finished, wait for the next job rather than end."""
    stop_all: bool = False
    """When a selected rank stops at a breakpoint or raises, interrupt the other running ranks
    of its actor where they are, as TotalView and DDT do."""


class Runtime:
    """One editor's view of the broker: its threads and what they do."""

    def __init__(self, emit: Emit, hand_over: Callable[[list[wire.Event]], None], settings: Settings) -> None:
        """`hand_over` takes the broker's events on the connection's thread to whoever owns
        this runtime, which gives them to `heard` on its own."""
        self.emit = emit
        self.hand_over = hand_over
        self.settings = settings
        self.conn: BrokerConnection | None = None
        self.options = Options()
        self.threads: dict[tuple[str, str, int], Thread] = {}
        self.thread_ids = itertools.count(1)
        self.refs = itertools.count(1)
        self.steps: dict[int, tuple[Thread, str]] = {}
        """Casts of a step, by their number, and why the rank will have stopped when its answer
        comes (`step`, or `breakpoint` after a continue; `pause` once paused meanwhile)."""
        self.configured = False
        self.pending: list[News] = []
        self.breakpoints: dict[str, list[wire.Spot]] = {}
        """The editor's breakpoints by file, for every rank that stops from now on."""
        self.hidden_told = 0
        self.held: dict[int, Thread] = {}
        """The threads whose sessions the editor holds, by the broker's number for each."""
        self.jobs: set[str] = set()
        """The jobs the editor debugs: those it saw ranks of. The session ends with them."""
        self.job_check: float | None = None
        """When to ask again whether they ended (`time.monotonic()`), or never."""
        self.unverified: dict[str, list[tuple[int, int]]] = {}
        """By file: (number, line) of each breakpoint no rank has taken yet, told `Verified`
        once one does."""

    @property
    def target(self) -> Debuggee:
        return self.options.target

    def connect(self, settings: Settings, options: Options) -> None:
        self.close()
        self.options = options
        try:
            self.conn = BrokerConnection.open(settings, self.hand_over, wire.Client.EDITOR)
        except NoBroker as error:
            raise Refused(f"attach: {error}") from None

    def close(self) -> None:
        if self.conn is not None:
            self.let_go()
            self.conn.close()
            self.conn = None

    def configure(self) -> list[Thread]:
        """From now on the editor is told of stops; first of the ranks paused already, and,
        when there is none, the Debug Console says so. The paused threads."""
        self.configured = True
        jobs = [row for row in self.ask(wire.ListJobs(), wire.JobList).rows if self.target.job in ("", row.job)]
        self.jobs.update(row.job for row in jobs)
        paused = self.refresh()
        for thread in paused:
            self.stopped(thread, "entry")
        if not paused:
            running = sum(row.processes for row in jobs)
            self.emit(
                Note(
                    "monarch-pdb: no selected rank is paused yet "
                    f"({ranks.counted(running, 'rank process', 'rank processes')} {'runs' if running == 1 else 'run'}"
                    f"{' in ' + self.target.job if self.target.job else ''}): each one that stops at a "
                    "breakpoint, raises or is paused becomes a thread"
                )
            )
        for news in self.pending:
            self.heard(news)
        self.pending.clear()
        return paused

    # --- the broker's news: the one place it becomes what the editor is told ------------

    def heard(self, news: News) -> None:
        """The broker's folded events, or a reply nobody waited for: the end of a step, news
        of a held session, a late answer to attaching, or what a log point printed."""
        if isinstance(news, list):
            if self.configured:
                self.events(news)
            else:
                self.pending.append(news)
        elif isinstance(news, wire.Logged):
            self.emit(PrintedByRank(news.actor, news.rank, news.text, log=True))
        elif isinstance(news, (wire.SessionOutput, wire.Resumed, wire.SessionEnded)):
            self.held_news(news)
        elif isinstance(news, wire.Attached):
            self.attach_answer(news)
        elif isinstance(news, wire.CastResult) and news.ref in self.steps:
            self.step_ended(news)

    def events(self, events: list[wire.Event]) -> None:
        """The selected ranks that stopped, and those gone. A stop of a rank with no thread
        lists the sessions again, once until a thread is gone: a rank whose session ended and
        whose next one stopped (post-mortem after continue) is a new thread, even when both
        come at once."""
        listed = False
        halted: dict[tuple[str, str], None] = {}
        for event in events:
            for rank in event.rank_list():
                key = (event.job, event.actor, rank)
                if key not in self.threads and event.kind in STOP_REASONS and not listed:
                    self.refresh()
                    listed = True
                thread = self.threads.get(key)
                if thread is None:
                    continue
                if event.kind == wire.EventKind.RESUMED:
                    self.released(thread, True)
                elif event.kind in STOP_REASONS:
                    self.stopped(thread, STOP_REASONS[event.kind])
                    if event.kind in STOPS_ALL and self.options.stop_all:
                        halted[(event.job, event.actor)] = None
                elif event.kind in (wire.EventKind.ENDED, wire.EventKind.LOST):
                    self.gone(thread)
                    listed = False
            if event.kind in (wire.EventKind.ENDED, wire.EventKind.LOST) and event.job in self.jobs:
                self.job_check = time.monotonic()
        for job, actor in halted:
            self.halt(job, actor)
        self.emit(Changed())

    def halt(self, job: str, actor: str) -> None:
        """`stopAll`: the other selected running ranks of an actor one of whose ranks stopped
        are interrupted, each then a session that stopped with reason `pause`."""
        if self.target.actor not in ("", actor):
            return
        try:
            self.ask(
                wire.Interrupt(actor=actor, selector=self.target.selector or "ranks(:)", job=job), wire.Interrupting
            )
        except Refused as error:
            self.emit(Note(f"monarch-pdb: stopAll could not interrupt the other ranks of {actor}: {error}"))

    def step_ended(self, result: wire.CastResult) -> None:
        thread, reason = self.steps.pop(result.ref)
        thread.own -= 1
        if any(group.outcome for group in result.groups) or result.missing:
            self.gone(thread)
        elif result.groups:
            thread.echo = bool(thread.session)
            self.stopped(thread, "pause" if thread.pausing else reason, own=True)

    def held_news(self, msg: wire.SessionOutput | wire.Resumed | wire.SessionEnded) -> None:
        """What the broker tells the holder of a session: another client sent it running; it
        printed, or stopped again; it ended, or a shell took it over (`attach --force`), after
        which the editor hears the same while the shell holds it."""
        thread = self.held.get(msg.session)
        if thread is None:
            return
        if isinstance(msg, wire.Resumed):
            self.released(thread, msg.release)
            return
        mine = thread.own > 0 or (thread.echo and (isinstance(msg, wire.SessionEnded) or msg.paused))
        if not mine and msg.text:
            self.emit(PrintedByRank(thread.actor, thread.rank, msg.text))
        if isinstance(msg, wire.SessionEnded):
            if msg.reason == wire.Ending.TAKEN:
                self.emit(
                    Note(
                        f"monarch-pdb: a shell took over {thread.actor} {thread.rank} (attach --force); "
                        "the editor follows it, and holds it again when the shell detaches"
                    )
                )
            else:
                self.gone(thread)
        elif msg.paused:
            thread.echo = False
            if thread.running and not mine and not thread.released:
                self.stopped(thread, "step")

    def released(self, thread: Thread, release: bool) -> None:
        thread.released = thread.released or release
        if not thread.running:
            self.running(thread, told=True)

    # --- the sessions the editor holds -------------------------------------------------

    def hold(self, threads: list[Thread]) -> None:
        """Attach to each new thread's session, as a shell does (all asked before any answer
        is waited for): the shell's `list` says the editor holds it, a shell attaching to it
        is refused as it would be by another shell, and what it prints comes to the editor.
        One another shell holds stays a thread, and the Debug Console says why it is not held."""
        assert self.conn is not None
        for thread in threads:
            self.conn.post(wire.Attach(actor=thread.actor, rank=thread.rank, job=thread.job))
        deadline = time.monotonic() + self.conn.settings.connect_timeout
        for _ in threads:
            answer = self.conn.collect(
                lambda m: isinstance(m, (wire.Attached, wire.Error)), max(0.0, deadline - time.monotonic())
            )
            if answer is None:
                return
            assert isinstance(answer, (wire.Attached, wire.Error))
            self.attach_answer(answer)

    def attach_answer(self, answer: wire.Attached | wire.Error) -> None:
        if isinstance(answer, wire.Error):
            self.emit(Note(f"monarch-pdb: {answer.text.partition(';')[0]}: the editor shows it, without its output"))
            return
        thread = self.threads.get((answer.job, answer.actor, answer.rank))
        if thread is not None:
            thread.session = answer.session
            self.held[answer.session] = thread

    def let_go(self) -> None:
        """Detach from every held session, so that the shell finds them free (not freed by
        an editor gone away)."""
        assert self.conn is not None
        for number in self.held:
            self.conn.post(wire.Detach(session=number))
        self.held.clear()
        try:
            self.conn.request(wire.ListJobs(), wire.JobList, timeout=2.0)  # answered once the detaches are done
        except Timeout:
            pass

    # --- threads -----------------------------------------------------------------------

    def refresh(self) -> list[Thread]:
        """The paused sessions of the selected ranks, each a thread (new ones announced)."""
        assert self.conn is not None
        rows = self.ask(wire.ListSessions(), wire.SessionList).rows
        picked = self.target.picked(rows)
        chosen = [row for row in rows if self.target.chooses(row.job, row.actor, picked, row.rank)]
        limit = self.conn.settings.editor_threads
        self.tell_hidden(chosen, limit)
        shown, new = [], []
        for row in chosen:
            key = (row.job, row.actor, row.rank)
            if key not in self.threads and len(self.threads) >= limit:
                continue
            thread = self.threads.get(key)
            if thread is None:
                thread = self.threads[key] = Thread(
                    next(self.thread_ids), row.job, row.actor, row.rank, thread_name(row)
                )
                new.append(thread)
                if self.configured:
                    self.emit(ThreadStarted(thread))
                self.jobs.add(row.job)
                for path, spots in self.breakpoints.items():
                    self.taken(path, spots, self.apply_breakpoints([thread], path, spots)[0])
            shown.append(thread)
        if new:
            self.hold(new)
        return shown

    def tell_hidden(self, chosen: list[wire.SessionRow], limit: int) -> None:
        """Say in the Debug Console, once for each count, how many paused ranks are not shown
        as threads, and how to see them."""
        hidden = len(chosen) - limit
        if hidden <= 0 or hidden == self.hidden_told:
            return
        self.hidden_told = hidden
        first = chosen[limit]
        self.emit(
            Note(
                f"monarch-pdb: {len(chosen)} ranks are paused; the editor shows {limit} of them as threads "
                f'(MONARCH_PDB_DAP_THREADS). To see others, attach with "ranks" such as '
                f'"{first.actor} ranks({first.rank}:{first.rank + limit})", or use the shell.'
            )
        )

    def stopped(self, thread: Thread, reason: str, own: bool = False) -> None:
        thread.running = thread.pausing = thread.released = False
        thread.reason = reason
        self.emit(Stopped(thread, reason, own))

    def running(self, thread: Thread, told: bool = False) -> None:
        thread.running = True
        self.emit(Ran(thread, told))

    def gone(self, thread: Thread) -> None:
        if self.threads.pop((thread.job, thread.actor, thread.rank), None) is not None:
            self.held.pop(thread.session, None)
            self.emit(ThreadExited(thread))

    def thread_by_id(self, thread_id: int) -> Thread:
        for thread in self.threads.values():
            if thread.id == thread_id:
                return thread
        raise Refused(f"no thread {thread_id}: its rank is no longer paused")

    def paused(self) -> list[Thread]:
        return [t for t in self.threads.values() if not t.running]

    def ended_jobs(self, now: float) -> None:
        """Once every rank of the jobs the editor debugs has finished, the session ends,
        unless it waits for the next job; while some still run, ask again."""
        self.job_check = None
        if (
            self.options.wait_for_job
            or not self.jobs
            or self.conn is None
            or any(not t.running for t in self.threads.values())
        ):
            return
        live = {row.job for row in self.ask(wire.ListJobs(), wire.JobList).rows if row.processes}
        if self.jobs & live:
            self.job_check = now + JOB_CHECK_EVERY
            return
        self.emit(Note(f"monarch-pdb: every rank of {', '.join(sorted(self.jobs))} finished"))
        self.jobs.clear()
        self.emit(Finished())

    # --- what the editor asks of the ranks ---------------------------------------------

    def ask(self, msg: wire.Message, *answers: type[wire.Message]) -> Any:
        assert self.conn is not None
        try:
            reply = self.conn.request(msg, *answers)
        except Timeout as error:
            raise Refused(str(error)) from None
        if isinstance(reply, wire.Error):
            raise Refused(reply.text)
        return reply

    def inspect(self, thread: Thread, query: wire.Query, **fields: Any) -> wire.Inspection:
        answer = self.inspect_all([thread], query, **fields)[0]
        if answer.error:
            raise Refused(answer.error)
        return answer

    def inspect_all(self, threads: list[Thread], query: wire.Query, **fields: Any) -> list[wire.Inspection]:
        """One question to each thread's rank, all sent before any answer is waited for; the
        answers in the threads' order (an error one for a rank that gave none in time)."""
        assert self.conn is not None
        asked: dict[int, wire.Inspection | None] = {}
        for thread in threads:
            ref = next(self.refs)
            asked[ref] = None
            self.conn.post(
                wire.Inspect(ref=ref, job=thread.job, actor=thread.actor, rank=thread.rank, query=query, **fields)
            )
        waiting = set(asked)
        deadline = time.monotonic() + self.conn.settings.connect_timeout + 10.0
        while waiting:
            answer = self.conn.collect(
                lambda m: isinstance(m, wire.Inspection) and m.ref in waiting, max(0.0, deadline - time.monotonic())
            )
            if answer is None:
                break
            assert isinstance(answer, wire.Inspection)
            asked[answer.ref] = answer
            waiting.discard(answer.ref)
        return [
            answer or wire.Inspection(ref=ref, items=[], error=f"{thread.actor} {thread.rank} did not answer in time")
            for (ref, answer), thread in zip(asked.items(), threads)
        ]

    def apply_breakpoints(self, threads: list[Thread], path: str, spots: list[wire.Spot]) -> list[wire.Inspection]:
        return self.inspect_all(threads, wire.Query.BREAKPOINTS, expression=path, spots=spots)

    def taken(self, path: str, spots: list[wire.Spot], answer: wire.Inspection) -> None:
        """A rank took the file's breakpoints: each that waited for one, and that it could
        set, is verified now."""
        waiting = self.unverified.get(path)
        if not waiting or answer.error:
            return
        set_lines = {spot.line for spot, item in zip(spots, answer.items) if not item.value}
        for number, line in waiting:
            if line in set_lines:
                self.emit(Verified(number, line))
        self.unverified[path] = [(number, line) for number, line in waiting if line not in set_lines]

    def set_breakpoints(self, path: str, spots: list[wire.Spot]) -> tuple[dict[int, str], bool]:
        """The file's breakpoints in every selected rank: pdb's in each paused one (and in each
        that stops later), and in the process of each that runs (see `running_breakpoints`).
        The first reason each spot was refused by a rank, and whether any rank took them."""
        self.breakpoints[path] = spots
        paused = [t for t in self.refresh() if not t.running]
        answers = self.apply_breakpoints(paused, path, spots)
        reasons: dict[int, str] = {}
        for thread, answer in zip(paused, answers):
            for number, item in enumerate(answer.items if not answer.error else []):
                if item.value:
                    reasons.setdefault(number, f"{thread.actor} {thread.rank}: {item.value}")
            if answer.error:
                for number in range(len(spots)):
                    reasons.setdefault(number, f"{thread.actor} {thread.rank}: {answer.error}")
        running = self.running_breakpoints(paused, path, spots, reasons)
        return reasons, bool(paused or running)

    def await_taking(self, path: str, waiting: list[tuple[int, int]]) -> None:
        """(number, line) of the file's breakpoints no rank took yet: `Verified` once one does."""
        self.unverified[path] = waiting

    def running_breakpoints(
        self, paused: list[Thread], path: str, spots: list[wire.Spot], reasons: dict[int, str]
    ) -> int:
        """The file's breakpoints in the process of every selected live rank (the broker's
        `Breakpoints`); each spot's first reason from a rank that is not `paused` goes to
        `reasons`. How many such ranks set them."""
        ask = wire.Breakpoints(
            ref=next(self.refs),
            job=self.target.job,
            actor=self.target.actor,
            selector=self.target.selector,
            path=path,
            spots=spots,
        )
        try:
            result = self.ask(ask, wire.BreakpointsResult)
        except Refused:
            return 0  # no rank of the target runs
        here = {(t.actor, t.rank) for t in paused}
        answered = 0
        for group in result.groups:
            running = [rank for rank in group.ranks if (group.actor, rank) not in here]
            if not running:
                continue
            who = f"{group.actor} {ranks.format_ranks(running)}"
            for number in range(len(spots)):
                why = group.missing or (group.reasons[number] if number < len(group.reasons) else "")
                if why:
                    reasons.setdefault(number, f"{who}: {why}")
            answered += 0 if group.missing else len(running)
        return answered

    def stop_on_uncaught(self, uncaught: bool) -> str:
        """Whether every selected rank stops in post-mortem on an uncaught exception; why not,
        when no rank took it."""
        try:
            self.ask(
                wire.Breakpoints(
                    ref=next(self.refs),
                    job=self.target.job,
                    actor=self.target.actor,
                    selector=self.target.selector,
                    uncaught=uncaught,
                ),
                wire.BreakpointsResult,
            )
        except Refused as error:
            return str(error)
        return ""

    def pdb_line(self, thread: Thread, line: str) -> str:
        """A line of the Debug Console, run by the rank's pdb; what it printed. A line that
        ran the rank (`n`) is told as a stop of that thread, so that the editor asks for its
        frames again; one that did not keeps them valid."""
        assert self.conn is not None
        thread.own += 1
        try:
            result = self.conn.cast(thread.actor, f"ranks({thread.rank})", line, REPL_TIMEOUT, thread.job)
        except RequestFailed as error:
            raise Refused(str(error)) from None
        finally:
            thread.own -= 1
        # What the held session printed meanwhile waits aside: it is the answer, shown as such.
        answer = [
            m
            for m in self.conn.aside
            if isinstance(m, wire.SessionOutput) and thread.session and m.session == thread.session
        ]
        self.conn.aside = [m for m in self.conn.aside if not any(m is a for a in answer)]
        thread.echo = bool(thread.session) and not any(m.paused for m in answer)
        for group in result.groups:
            if group.outcome:
                self.gone(thread)
            elif self.moved(thread):
                self.stopped(thread, "step", own=True)
            return group.output.rstrip("\n")
        for missing in result.missing:
            raise Refused(f"{thread.actor} {thread.rank} did not answer: {missing.reason}")
        return ""

    def moved(self, thread: Thread) -> bool:
        """Whether the rank stopped anew since its frames were shown (an answer that does not
        say is taken as yes: the editor asks for them again)."""
        try:
            return self.inspect(thread, wire.Query.STACK).stop != thread.stop
        except Refused:
            return True

    def step(self, thread: Thread, line: str) -> None:
        """Send pdb's command (`next`, `step`, `return`, `continue`) to one rank; it stops
        again when the cast's answer comes (`step_ended`), while the editor goes on asking."""
        assert self.conn is not None
        if thread.running:
            raise Refused(f"{thread.actor} {thread.rank} is running: pause it first")
        ref = self.conn.start_cast(thread.actor, f"ranks({thread.rank})", line, STEP_TIMEOUT, thread.job)
        self.steps[ref] = (thread, "breakpoint" if line == "continue" else "step")
        thread.own += 1
        self.running(thread)

    def continue_all(self, job: str | None = None, actor: str | None = None, selector: str | None = None) -> None:
        """Every selected paused rank goes on, as the shell's `continue` (its `b` breakpoints
        cleared); or those of one actor's `selector`."""
        target = self.target
        reply = self.ask(
            wire.Continue(
                job=target.job if job is None else job,
                actor=target.actor if actor is None else actor,
                selector=target.selector if selector is None else selector,
            ),
            wire.Continued,
        )
        for released in reply.released:
            for rank in released.ranks:
                for thread in list(self.threads.values()):
                    if thread.actor == released.actor and thread.rank == rank and not thread.running:
                        thread.released = True
                        self.running(thread)

    def pause(self, thread: Thread) -> None:
        thread.pausing = True
        self.ask(
            wire.Interrupt(actor=thread.actor, selector=f"ranks({thread.rank})", job=thread.job), wire.Interrupting
        )

    # --- the ranks in groups, and a group at once ----------------------------------------

    def groups(self) -> list[wire.SessionGroup]:
        """The selected ranks grouped as the shell's `list --all` groups them past a screenful:
        by place, state and holder."""
        reply = self.ask(wire.ListAll(groups_above=0), wire.SessionList, wire.SessionGroups)
        found = reply.groups if isinstance(reply, wire.SessionGroups) else []
        return [g for g in found if self.target.job in ("", g.job) and self.target.actor in ("", g.actor)]

    def running_stacks(self) -> list[wire.StacksResult]:
        """The merged stacks of each selected actor's live ranks, read without stopping them."""
        assert self.conn is not None
        rows = self.ask(wire.ListAll(), wire.SessionList).rows
        actors = sorted(
            {
                (r.job, r.actor)
                for r in rows
                if self.target.chooses(r.job, r.actor, None, r.rank) and r.state not in GONE
            }
        )
        selector = self.target.selector or "ranks(:)"
        try:
            return [self.conn.stacks(actor, selector, wire.Threads.MAIN, REPL_TIMEOUT, job) for job, actor in actors]
        except RequestFailed as error:
            raise Refused(str(error)) from None

    def group_threads(self, job: str, actor: str, numbers: list[int]) -> list[Thread]:
        chosen = set(numbers)
        return sorted(
            (t for t in self.threads.values() if t.job == job and t.actor == actor and t.rank in chosen),
            key=lambda t: t.rank,
        )

    def act_on_group(self, action: str, job: str, actor: str, numbers: list[int]) -> None:
        """`continue`, `next` or `interrupt` these ranks of one actor, as the shell's continue,
        a cast of `next` to each paused one, and its interrupt do."""
        selector = f"ranks({','.join(map(str, numbers))})"
        if action == "continue":
            self.continue_all(job, actor, selector)
        elif action == "next":
            for thread in self.group_threads(job, actor, numbers):
                if not thread.running:
                    self.step(thread, "next")
        elif action == "interrupt":
            self.ask(wire.Interrupt(actor=actor, selector=selector, job=job), wire.Interrupting)
        else:
            raise Refused(f"a group of ranks can continue, next or interrupt, not {action!r}")
