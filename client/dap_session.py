"""One editor's debug session: every paused rank of the selected ones is a DAP thread.

A client of the broker like the shell, on the same connection (`ShellConnection`). Frames,
scopes, variables and watch values are `Inspect` questions answered by the paused thread
itself; a step is a cast of pdb's own command to one rank, answered when the rank waits
again; continue is the broker's top-level continue over the selected ranks. The broker's events
say which ranks stopped, ended or were lost.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from monarch_pdb import ranks, wire
from monarch_pdb.client.connection import NoBroker, RequestFailed, ShellConnection, Timeout
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
UNCAUGHT = "uncaught"
"""The exception filter that stops every selected rank in post-mortem on an uncaught exception."""
STEPS = {"next": "next", "stepIn": "step", "stepOut": "return"}
"""pdb's command for each of DAP's steps."""
JOB_CHECK_EVERY = 1.0
"""How often the editor asks whether the jobs it debugs have ended, while no rank of them is
paused once a session ended: a rank's process exits a moment after its last call, and the
broker tells no event of that."""

Send = Callable[[str, dict], None]
"""How the session sends an event: its name and body."""


class RequestError(Exception):
    """A request that cannot be served; the text is the one line the editor shows."""


@dataclass(frozen=True)
class Target:
    """Which ranks the editor debugs: an actor and a `ranks(...)` selector (both optional), in
    the shell's words (`trainer ranks(0:8)`), and a job."""

    job: str = ""
    actor: str = ""
    selector: str = ""

    @classmethod
    def parse(cls, text: str, job: str = "") -> Target:
        text = text.strip()
        actor, _, rest = text.partition(" ") if not text.startswith("ranks") else ("", "", text)
        rest = rest.strip()
        if not rest:
            return cls(job, actor, "")
        try:
            return cls(job, actor, ranks.render_selector(ranks.parse_selector(rest)))
        except ranks.SelectorError as error:
            raise RequestError(f"ranks: {error}") from None

    def chooses(self, job: str, actor: str, picked: set[int] | None, rank: int) -> bool:
        return ((not self.job or job == self.job) and (not self.actor or actor == self.actor)
                and (picked is None or rank in picked))


@dataclass(frozen=True)
class PathMap:
    """debugpy's `pathMappings`: where the editor keeps the files the ranks run from elsewhere."""

    pairs: tuple[tuple[str, str], ...] = ()
    """(local root, remote root), the first that matches wins."""

    @classmethod
    def parse(cls, mappings: Any) -> PathMap:
        if not isinstance(mappings, list) or not all(
                isinstance(m, dict) and isinstance(m.get("localRoot"), str) and isinstance(m.get("remoteRoot"), str)
                for m in mappings):
            raise RequestError("attach: pathMappings is a list of {\"localRoot\": ..., \"remoteRoot\": ...}")
        return cls(tuple((m["localRoot"].rstrip("/") + "/", m["remoteRoot"].rstrip("/") + "/") for m in mappings))

    def local(self, path: str) -> str:
        return self._swap(path, 1, 0)

    def remote(self, path: str) -> str:
        return self._swap(path, 0, 1)

    def _swap(self, path: str, source: int, target: int) -> str:
        for pair in self.pairs:
            if path.startswith(pair[source]):
                return pair[target] + path[len(pair[source]):]
        return path


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


def thread_name(row: wire.SessionRow) -> str:
    coords = ", ".join(f"{dim}={value}" for dim, value in row.coords.items())
    return f"{row.actor} {row.rank} · {row.host} · {coords}" if coords else f"{row.actor} {row.rank} · {row.host}"


@dataclass
class Handles:
    """DAP's numbers for frames and values, each standing for (thread, the rank's own number):
    a thread's are forgotten when it runs."""

    table: dict[int, tuple[int, int]] = field(default_factory=dict)
    numbers: Any = field(default_factory=lambda: itertools.count(1))

    def make(self, thread: int, own: int) -> int:
        number = next(self.numbers)
        self.table[number] = (thread, own)
        return number

    def get(self, number: int, what: str) -> tuple[int, int]:
        if number not in self.table:
            raise RequestError(f"no {what} {number}: the rank ran since it was shown")
        return self.table[number]

    def forget(self, thread: int) -> None:
        self.table = {n: held for n, held in self.table.items() if held[0] != thread}


class DebugSession:
    """The requests of one attached editor, and the events it is sent."""

    def __init__(self, send_event: Send, hand_over: Callable[[list[wire.Event]], None], settings: Settings) -> None:
        """`hand_over` takes the broker's events on the connection's thread to the adapter's,
        which gives them to `events`."""
        self.send_event = send_event
        self.hand_over = hand_over
        self.settings = settings
        self.conn: ShellConnection | None = None
        self.target = Target()
        self.paths = PathMap()
        self.just_my_code = True
        self.threads: dict[tuple[str, str, int], Thread] = {}
        self.thread_ids = itertools.count(1)
        self.frames = Handles()
        self.values = Handles()
        self.refs = itertools.count(1)
        self.steps: dict[int, tuple[Thread, str]] = {}
        """Casts of a step, by their number, and why the rank will have stopped when its answer
        comes (`step`, or `breakpoint` after a continue; `pause` once paused meanwhile)."""
        self.configured = False
        self.focus_sent = False
        self.pending_events: list[list[wire.Event]] = []
        self.breakpoints: dict[str, list[wire.Spot]] = {}
        """The editor's breakpoints by file, for every rank that stops from now on."""
        self.hidden_told = 0
        self.held: dict[int, Thread] = {}
        """The threads whose sessions the editor holds, by the broker's number for each."""
        self.sources: dict[str, int] = {}
        """A `sourceReference` for each file the editor cannot open (code with no file, or a
        file that is not on the editor's disk), by its name in the ranks."""
        self.source_of: dict[int, tuple[str, int]] = {}
        """Each `sourceReference`'s file and the thread whose frame showed it."""
        self.source_text: dict[int, str] = {}
        """Each `sourceReference`'s text, once a rank gave it."""
        self.wait_for_job = False
        """`waitForJob`: once every rank has finished, wait for the next job rather than end."""
        self.jobs: set[str] = set()
        """The jobs the editor debugs: those it saw ranks of. The session ends with them."""
        self.job_check: float | None = None
        """When to ask again whether they ended (`time.monotonic()`), or never."""
        self.unverified: dict[str, list[tuple[int, int]]] = {}
        """By file: (id, line) of each breakpoint no rank has taken yet, told `verified` in a
        `breakpoint` event once one does."""
        self.breakpoint_ids = itertools.count(1)

    def close(self) -> None:
        if self.conn is not None:
            self.let_go()
            self.conn.close()
            self.conn = None

    # --- requests ----------------------------------------------------------------------

    def handle(self, command: str, args: dict) -> dict | None:
        """The body of the response to `command`; RequestError with the reason otherwise."""
        handler = getattr(self, f"on_{command}", None)
        if handler is None:
            raise RequestError(f"monarch-pdb does not support the request {command!r}")
        if command not in ("initialize", "attach", "disconnect", "terminate") and self.conn is None:
            raise RequestError(f"{command}: attach to a broker first")
        return handler(args)

    def on_initialize(self, args: dict) -> dict:
        return {
            "supportsConfigurationDoneRequest": True,
            "supportsEvaluateForHovers": True,
            "supportsDelayedStackTraceLoading": True,
            "supportsSingleThreadExecutionRequests": True,
            "supportsTerminateRequest": False,
            "supportsSetVariable": True,
            "supportsConditionalBreakpoints": True,
            "supportsHitConditionalBreakpoints": True,
            "supportsLogPoints": True,
            "supportsExceptionInfoRequest": True,
            "exceptionBreakpointFilters": [{"filter": UNCAUGHT, "label": "Uncaught Exceptions", "default": False,
                                            "description": "Stop every selected rank in post-mortem on an "
                                                           "uncaught exception"}],
            "supportsRestartRequest": False,
        }

    def on_attach(self, args: dict) -> None:
        port = args.get("port")
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536):
            raise RequestError(f"attach: port must be a port number, not {port!r}")
        for name in ("host", "ranks", "job"):
            if not isinstance(args.get(name, ""), str):
                raise RequestError(f"attach: {name} must be a string, not {args[name]!r}")
        self.target = Target.parse(args.get("ranks", ""), args.get("job", ""))
        self.paths = PathMap.parse(args.get("pathMappings", []))
        self.just_my_code = args.get("justMyCode", True)
        if not isinstance(self.just_my_code, bool):
            raise RequestError("attach: justMyCode is true or false")
        self.wait_for_job = args.get("waitForJob", False)
        if not isinstance(self.wait_for_job, bool):
            raise RequestError("attach: waitForJob is true or false")
        settings = self.settings.with_overrides(host=args.get("host") or None, port=port)
        self.close()
        try:
            self.conn = ShellConnection.open(settings, self.hand_over, wire.Client.EDITOR)
        except NoBroker as error:
            raise RequestError(f"attach: {error}") from None
        self.send_event("initialized", {})

    def on_configurationDone(self, args: dict) -> None:
        """From now on the editor is told of stops; first of the ranks paused already, and,
        when there is none, the Debug Console says so."""
        self.configured = True
        jobs = [row for row in self.ask(wire.ListJobs(), wire.JobList).rows if self.target.job in ("", row.job)]
        self.jobs.update(row.job for row in jobs)
        paused = self.refresh()
        for thread in paused:
            self.stopped(thread, "entry")
        if not paused:
            running = sum(row.processes for row in jobs)
            self.console(f"monarch-pdb: no selected rank is paused yet ({running} rank processes run"
                         f"{' in ' + self.target.job if self.target.job else ''}): each one that stops at a breakpoint, "
                         "raises or is paused becomes a thread")
        for events in self.pending_events:
            self.events(events)
        self.pending_events.clear()

    def on_threads(self, args: dict) -> dict:
        self.refresh()
        return {"threads": [{"id": t.id, "name": t.name} for t in sorted(self.threads.values(), key=lambda t: t.id)]}

    def on_stackTrace(self, args: dict) -> dict:
        thread = self.thread(args)
        answer = self.inspect(thread, wire.Query.STACK, mine=self.just_my_code)
        thread.stop = answer.stop
        start = max(0, int(args.get("startFrame") or 0))
        levels = int(args.get("levels") or 0)
        chosen = answer.items[start:start + levels] if levels > 0 else answer.items[start:]
        frames = []
        for item in chosen:
            frame = {"id": self.frames.make(thread.id, item.handle), "name": item.name, "line": item.line, "column": 1}
            frame["source"] = self.source(thread, item.file)
            frames.append(frame)
        return {"stackFrames": frames, "totalFrames": answer.total}

    def on_scopes(self, args: dict) -> dict:
        thread, index = self.frame(args)
        answer = self.inspect(thread, wire.Query.SCOPES, frame=index)
        return {"scopes": [{"name": item.name, "variablesReference": self.values.make(thread.id, item.handle),
                            "expensive": item.name == "Globals"} for item in answer.items]}

    def on_variables(self, args: dict) -> dict:
        thread_id, handle = self.values.get(int(args.get("variablesReference", 0)), "variables")
        thread = self.thread_by_id(thread_id)
        answer = self.inspect(thread, wire.Query.VARIABLES, handle=handle, start=max(0, int(args.get("start") or 0)),
                              count=max(0, int(args.get("count") or 0)))
        return {"variables": [self.variable(thread, item) for item in answer.items]}

    def on_setVariable(self, args: dict) -> dict:
        thread_id, handle = self.values.get(int(args.get("variablesReference", 0)), "variables")
        name, value = args.get("name"), args.get("value")
        if not isinstance(name, str) or not isinstance(value, str):
            raise RequestError("setVariable: name and value are strings")
        thread = self.thread_by_id(thread_id)
        item = self.inspect(thread, wire.Query.SET, handle=handle, name=name, expression=value).items[0]
        return {"value": item.value, "type": item.type,
                "variablesReference": self.values.make(thread.id, item.handle) if item.handle else 0}

    def on_evaluate(self, args: dict) -> dict:
        expression = args.get("expression")
        if not isinstance(expression, str):
            raise RequestError("evaluate: the expression must be a string")
        if "frameId" not in args:
            raise RequestError("evaluate: select a paused rank's frame first")
        thread, index = self.frame(args)
        if args.get("context") == "repl":
            return {"result": self.pdb_line(thread, expression), "variablesReference": 0}
        answer = self.inspect(thread, wire.Query.EVALUATE, frame=index, expression=expression)
        item = answer.items[0]
        return {"result": item.value, "type": item.type,
                "variablesReference": self.values.make(thread.id, item.handle) if item.handle else 0}

    def on_setBreakpoints(self, args: dict) -> dict:
        """The file's breakpoints in every selected rank: pdb's in each paused one (and in each
        that stops later), and in the process of each that runs (see `running_breakpoints`);
        verified when every rank set it, else with the reason of the first that did not."""
        path = (args.get("source") or {}).get("path")
        if not isinstance(path, str) or not path:
            raise RequestError("setBreakpoints: the source needs a path")
        wanted = args.get("breakpoints") or []
        spots, refused = [], {}
        for index, spec in enumerate(wanted):
            hits = str(spec.get("hitCondition") or "0").strip()
            if not hits.isdigit():
                refused[index] = f"a hit count is a whole number, not {hits!r}"
            else:
                spots.append(wire.Spot(line=int(spec["line"]), condition=str(spec.get("condition") or ""),
                                       hits=int(hits), log=str(spec.get("logMessage") or "")))
        path = self.paths.remote(path)
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
        shown, spot_number, waiting = [], 0, []
        for index, spec in enumerate(wanted):
            if index in refused:
                shown.append({"verified": False, "line": spec.get("line"), "message": refused[index]})
                continue
            reason = reasons.get(spot_number)
            entry = {"id": next(self.breakpoint_ids), "verified": reason is None and bool(paused or running),
                     "line": spots[spot_number].line}
            if reason or not (paused or running):
                entry["message"] = reason or "no selected rank is paused or runs yet: set in each as it starts or stops"
            if not (paused or running):
                waiting.append((entry["id"], entry["line"]))
            shown.append(entry)
            spot_number += 1
        self.unverified[path] = waiting
        return {"breakpoints": shown}

    def running_breakpoints(self, paused: list[Thread], path: str, spots: list[wire.Spot],
                            reasons: dict[int, str]) -> int:
        """The file's breakpoints in the process of every selected live rank (the broker's
        `Breakpoints`); each spot's first reason from a rank that is not `paused` goes to
        `reasons`. How many such ranks set them."""
        ask = wire.Breakpoints(ref=next(self.refs), job=self.target.job, actor=self.target.actor,
                               selector=self.target.selector, path=path, spots=spots)
        try:
            result = self.ask(ask, wire.BreakpointsResult)
        except RequestError:
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

    def on_setExceptionBreakpoints(self, args: dict) -> dict:
        """With the `uncaught` filter, every selected rank stops in post-mortem on an uncaught
        exception; without it, as the job's settings say."""
        filters = args.get("filters") or []
        if not isinstance(filters, list) or not all(isinstance(f, str) for f in filters):
            raise RequestError("setExceptionBreakpoints: filters is a list of names")
        message = ""
        try:
            self.ask(wire.Breakpoints(ref=next(self.refs), job=self.target.job, actor=self.target.actor,
                                      selector=self.target.selector, uncaught=UNCAUGHT in filters),
                     wire.BreakpointsResult)
        except RequestError as error:
            message = str(error)
        return {"breakpoints": [
            {"verified": False, "message": f"monarch-pdb has no exception filter {name!r}"} if name != UNCAUGHT else
            {"verified": not message, **({"message": message} if message else {})} for name in filters]}

    def on_exceptionInfo(self, args: dict) -> dict:
        item = self.inspect(self.thread(args), wire.Query.EXCEPTION).items[0]
        return {"exceptionId": item.name, "description": item.value, "breakMode": "unhandled",
                "details": {"typeName": item.name, "message": item.value, "stackTrace": item.type}}

    def on_next(self, args: dict) -> None:
        self.step(self.thread(args), STEPS["next"])

    def on_stepIn(self, args: dict) -> None:
        self.step(self.thread(args), STEPS["stepIn"])

    def on_stepOut(self, args: dict) -> None:
        self.step(self.thread(args), STEPS["stepOut"])

    def on_continue(self, args: dict) -> dict:
        """Every selected paused rank goes on, as the shell's `continue` (its `b` breakpoints
        cleared); with `singleThread`, the one rank only."""
        if args.get("singleThread"):
            self.step(self.thread(args), "continue")
            return {"allThreadsContinued": False}
        reply = self.ask(wire.Continue(job=self.target.job, actor=self.target.actor, selector=self.target.selector),
                         wire.Continued)
        for released in reply.released:
            for rank in released.ranks:
                for thread in self.threads.values():
                    if thread.actor == released.actor and thread.rank == rank:
                        self.running(thread)
                        thread.released = True
        return {"allThreadsContinued": True}

    def on_pause(self, args: dict) -> None:
        thread = self.thread(args)
        thread.pausing = True
        self.ask(wire.Interrupt(actor=thread.actor, selector=f"ranks({thread.rank})", job=thread.job), wire.Interrupting)

    def on_disconnect(self, args: dict) -> None:
        """The ranks stay as they are, for the shell or another editor."""
        self.close()

    def on_terminate(self, args: dict) -> None:
        raise RequestError("monarch-pdb never ends a job: disconnect, and the ranks stay as they are")

    # --- the broker --------------------------------------------------------------------

    def ask(self, msg: wire.Message, *answers: type[wire.Message]) -> Any:
        assert self.conn is not None
        try:
            reply = self.conn.request(msg, *answers)
        except Timeout as error:
            raise RequestError(str(error)) from None
        if isinstance(reply, wire.Error):
            raise RequestError(reply.text)
        return reply

    def inspect(self, thread: Thread, query: wire.Query, **fields: Any) -> wire.Inspection:
        answer = self.inspect_all([thread], query, **fields)[0]
        if answer.error:
            raise RequestError(answer.error)
        return answer

    def inspect_all(self, threads: list[Thread], query: wire.Query, **fields: Any) -> list[wire.Inspection]:
        """One question to each thread's rank, all sent before any answer is waited for; the
        answers in the threads' order (an error one for a rank that gave none in time)."""
        assert self.conn is not None
        asked = {}
        for thread in threads:
            ref = next(self.refs)
            asked[ref] = None
            self.conn.post(wire.Inspect(ref=ref, job=thread.job, actor=thread.actor, rank=thread.rank, query=query,
                                        **fields))
        waiting = set(asked)
        deadline = time.monotonic() + self.conn.settings.connect_timeout + 10.0
        while waiting:
            answer = self.conn.collect(lambda m: isinstance(m, wire.Inspection) and m.ref in waiting,
                                       max(0.0, deadline - time.monotonic()))
            if answer is None:
                break
            asked[answer.ref] = answer
            waiting.discard(answer.ref)
        return [answer or wire.Inspection(ref=ref, items=[], error=f"{thread.actor} {thread.rank} did not answer in time")
                for (ref, answer), thread in zip(asked.items(), threads)]

    def apply_breakpoints(self, threads: list[Thread], path: str, spots: list[wire.Spot]) -> list[wire.Inspection]:
        return self.inspect_all(threads, wire.Query.BREAKPOINTS, expression=path, spots=spots)

    def pdb_line(self, thread: Thread, line: str) -> str:
        """A line of the Debug Console, run by the rank's pdb; what it printed. The frames and
        values shown stay valid unless the line ran the rank (`n`), which the editor is told
        as a stop of that thread, so that it asks for them again."""
        assert self.conn is not None
        thread.own += 1
        try:
            result = self.conn.cast(thread.actor, f"ranks({thread.rank})", line, REPL_TIMEOUT, thread.job)
        except RequestFailed as error:
            raise RequestError(str(error)) from None
        finally:
            thread.own -= 1
        # What the held session printed meanwhile waits aside: it is the answer, shown as such.
        answer = [m for m in self.conn.aside if isinstance(m, wire.SessionOutput) and thread.session
                  and m.session == thread.session]
        self.conn.aside = [m for m in self.conn.aside if not any(m is a for a in answer)]
        thread.echo = bool(thread.session) and not any(m.paused for m in answer)
        for group in result.groups:
            if group.outcome:
                self.gone(thread)
            elif self.moved(thread):
                self.stopped(thread, "step", own=True)
            return group.output.rstrip("\n")
        for missing in result.missing:
            raise RequestError(f"{thread.actor} {thread.rank} did not answer: {missing.reason}")
        return ""

    def moved(self, thread: Thread) -> bool:
        """Whether the rank stopped anew since its frames were shown (an answer that does not
        say is taken as yes: the editor asks for them again)."""
        try:
            return self.inspect(thread, wire.Query.STACK).stop != thread.stop
        except RequestError:
            return True

    def step(self, thread: Thread, line: str) -> None:
        """Send pdb's command to one rank; it stops again when the cast's answer comes
        (`answered`), while the editor goes on asking."""
        assert self.conn is not None
        if thread.running:
            raise RequestError(f"{thread.actor} {thread.rank} is running: pause it first")
        ref = self.conn.start_cast(thread.actor, f"ranks({thread.rank})", line, STEP_TIMEOUT, thread.job)
        self.steps[ref] = (thread, "breakpoint" if line == "continue" else "step")
        thread.own += 1
        self.running(thread)

    def answered(self, msg: wire.Message) -> None:
        """A reply nobody waited for: the end of a step, news of a held session, a late answer
        to attaching, or what a log point printed."""
        if isinstance(msg, wire.Logged):
            self.send_event("output", {"category": "console", "output": f"{msg.actor} {msg.rank}: {msg.text}\n"})
            return
        if isinstance(msg, (wire.SessionOutput, wire.Resumed, wire.SessionEnded)):
            self.held_news(msg)
        elif isinstance(msg, wire.Attached):
            self.attach_answer(msg)
        if not isinstance(msg, wire.CastResult) or msg.ref not in self.steps:
            return
        thread, reason = self.steps.pop(msg.ref)
        thread.own -= 1
        if any(group.outcome for group in msg.groups) or msg.missing:
            self.gone(thread)
        elif msg.groups:
            thread.echo = bool(thread.session)
            self.stopped(thread, "pause" if thread.pausing else reason, own=True)

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
            answer = self.conn.collect(lambda m: isinstance(m, (wire.Attached, wire.Error)),
                                       max(0.0, deadline - time.monotonic()))
            if answer is None:
                return
            self.attach_answer(answer)

    def attach_answer(self, answer: wire.Attached | wire.Error) -> None:
        if isinstance(answer, wire.Error):
            self.console(f"monarch-pdb: {answer.text.partition(';')[0]}: the editor shows it, without its output")
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

    def held_news(self, msg: wire.SessionOutput | wire.Resumed | wire.SessionEnded) -> None:
        """What the broker tells the holder of a session: another client sent it running; it
        printed, or stopped again; it ended, or a shell took it over (`attach --force`), after
        which the editor hears the same while the shell holds it."""
        thread = self.held.get(msg.session)
        if thread is None:
            return
        if isinstance(msg, wire.Resumed):
            thread.released = thread.released or msg.release
            if not thread.running:
                self.running(thread)
                self.send_event("continued", {"threadId": thread.id, "allThreadsContinued": False})
            return
        mine = thread.own > 0 or (thread.echo and (isinstance(msg, wire.SessionEnded) or msg.paused))
        if not mine:
            self.rank_output(thread, msg.text)
        if isinstance(msg, wire.SessionEnded):
            if msg.reason == wire.Ending.TAKEN:
                self.console(f"monarch-pdb: a shell took over {thread.actor} {thread.rank} (attach --force); "
                             "the editor follows it, and holds it again when the shell detaches")
            else:
                self.gone(thread)
        elif msg.paused:
            thread.echo = False
            if thread.running and not mine and not thread.released:
                self.stopped(thread, "step")

    def rank_output(self, thread: Thread, text: str) -> None:
        """What a rank printed, in the Debug Console, each line marked with the rank as the
        shell's `follow` marks it."""
        if text:
            lines = text.rstrip("\n").split("\n")
            self.send_event("output", {"category": "stdout",
                                       "output": "".join(f"[{thread.actor} {thread.rank}] {line}\n" for line in lines)})

    def console(self, text: str) -> None:
        self.send_event("output", {"category": "console", "output": text + "\n"})

    def events(self, events: list[wire.Event]) -> None:
        """The broker's events, folded, on the adapter's thread: the editor learns which
        selected ranks stopped, and which are gone. A stop of a rank with no thread lists the
        sessions again, once until a thread is gone: a rank whose session ended and whose next
        one stopped (post-mortem after continue) is a new thread, even when both come at once."""
        if not self.configured:
            self.pending_events.append(events)
            return
        listed = False
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
                    thread.released = True
                    if not thread.running:
                        self.running(thread)
                        self.send_event("continued", {"threadId": thread.id, "allThreadsContinued": False})
                elif event.kind in STOP_REASONS:
                    self.stopped(thread, STOP_REASONS[event.kind])
                elif event.kind in (wire.EventKind.ENDED, wire.EventKind.LOST):
                    self.gone(thread)
                    listed = False
            if event.kind in (wire.EventKind.ENDED, wire.EventKind.LOST) and event.job in self.jobs:
                self.job_check = time.monotonic()

    # --- threads -----------------------------------------------------------------------

    def refresh(self) -> list[Thread]:
        """The paused sessions of the selected ranks, each a thread (new ones announced)."""
        rows = self.ask(wire.ListSessions(), wire.SessionList).rows
        picked = self.picked(rows)
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
                thread = self.threads[key] = Thread(next(self.thread_ids), row.job, row.actor, row.rank, thread_name(row))
                new.append(thread)
                if self.configured:
                    self.send_event("thread", {"reason": "started", "threadId": thread.id})
                self.jobs.add(row.job)
                for path, spots in self.breakpoints.items():
                    self.taken(path, spots, self.apply_breakpoints([thread], path, spots)[0])
            shown.append(thread)
        if new:
            self.hold(new)
        return shown

    def taken(self, path: str, spots: list[wire.Spot], answer: wire.Inspection) -> None:
        """A rank took the file's breakpoints: each that waited for one, and that it could
        set, is verified now."""
        waiting = self.unverified.get(path)
        if not waiting or answer.error:
            return
        set_lines = {spot.line for spot, item in zip(spots, answer.items) if not item.value}
        for number, line in waiting:
            if line in set_lines:
                self.send_event("breakpoint", {"reason": "changed",
                                               "breakpoint": {"id": number, "verified": True, "line": line}})
        self.unverified[path] = [(number, line) for number, line in waiting if line not in set_lines]

    def ended_jobs(self, now: float) -> None:
        """Once every rank of the jobs the editor debugs has finished, the session ends
        (`terminated`), unless it waits for the next job; while some still run, ask again."""
        self.job_check = None
        if self.wait_for_job or not self.jobs or self.conn is None or any(
                not t.running for t in self.threads.values()):
            return
        live = {row.job for row in self.ask(wire.ListJobs(), wire.JobList).rows if row.processes}
        if self.jobs & live:
            self.job_check = now + JOB_CHECK_EVERY
            return
        self.console(f"monarch-pdb: every rank of {', '.join(sorted(self.jobs))} finished")
        self.jobs.clear()
        self.send_event("terminated", {})

    def tell_hidden(self, chosen: list[wire.SessionRow], limit: int) -> None:
        """Say in the Debug Console, once for each count, how many paused ranks are not shown
        as threads, and how to see them."""
        hidden = len(chosen) - limit
        if hidden <= 0 or hidden == self.hidden_told:
            return
        self.hidden_told = hidden
        first = chosen[limit]
        self.send_event("output", {"category": "console", "output": (
            f"monarch-pdb: {len(chosen)} ranks are paused; the editor shows {limit} of them as threads "
            f"(MONARCH_PDB_DAP_THREADS). To see others, attach with \"ranks\" such as "
            f"\"{first.actor} ranks({first.rank}:{first.rank + limit})\", or use the shell.\n")})

    def picked(self, rows: list[wire.SessionRow]) -> set[int] | None:
        if not self.target.selector:
            return None
        selection = ranks.parse_selector(self.target.selector)
        mine = [row for row in rows if self.target.chooses(row.job, row.actor, None, row.rank)]
        return set(ranks.select(selection, ((row.rank, row.coords) for row in mine)))

    def stopped(self, thread: Thread, reason: str, own: bool = False) -> None:
        """Told to the editor, which shows the first stop; later ones keep the focus where it
        is, but for the end of the user's `own` step of that thread, whose new frame it shows."""
        thread.running = thread.pausing = thread.released = False
        self.frames.forget(thread.id)
        self.values.forget(thread.id)
        body = {"reason": reason, "threadId": thread.id, "allThreadsStopped": False}
        if self.focus_sent and not own:
            body["preserveFocusHint"] = True
        self.focus_sent = True
        self.send_event("stopped", body)

    def running(self, thread: Thread) -> None:
        thread.running = True
        self.frames.forget(thread.id)
        self.values.forget(thread.id)

    def gone(self, thread: Thread) -> None:
        if self.threads.pop((thread.job, thread.actor, thread.rank), None) is not None:
            self.held.pop(thread.session, None)
            self.frames.forget(thread.id)
            self.values.forget(thread.id)
            self.send_event("thread", {"reason": "exited", "threadId": thread.id})

    def thread(self, args: dict) -> Thread:
        thread_id = args.get("threadId")
        if not isinstance(thread_id, int):
            raise RequestError("threadId must be a thread's number")
        return self.thread_by_id(thread_id)

    def thread_by_id(self, thread_id: int) -> Thread:
        for thread in self.threads.values():
            if thread.id == thread_id:
                return thread
        raise RequestError(f"no thread {thread_id}: its rank is no longer paused")

    def frame(self, args: dict) -> tuple[Thread, int]:
        frame_id = args.get("frameId")
        if not isinstance(frame_id, int):
            raise RequestError("frameId must be a frame's number")
        thread_id, index = self.frames.get(frame_id, "frame")
        return self.thread_by_id(thread_id), index

    def variable(self, thread: Thread, item: wire.Item) -> dict:
        return {"name": item.name, "value": item.value, "type": item.type,
                "variablesReference": self.values.make(thread.id, item.handle) if item.handle else 0}

    # --- sources the editor has no file of ---------------------------------------------

    def source(self, thread: Thread, file: str) -> dict:
        """A frame's source: the editor's copy of a file by its path (after pathMappings); code
        with no file (`<string>`, generated code, a cell) and a file that is not on the
        editor's disk also by a `sourceReference`, whose text the `source` request asks of a rank."""
        local = self.paths.local(file)
        if local.startswith("<") or not os.path.isabs(local):
            shown = {"name": local}
        else:
            shown = {"name": os.path.basename(local), "path": local}
            if os.path.exists(local):
                return shown
        ref = self.sources.setdefault(file, len(self.sources) + 1)
        self.source_of[ref] = (file, thread.id)
        return {**shown, "sourceReference": ref}

    def on_source(self, args: dict) -> dict:
        """The text of a `sourceReference`, from the rank whose frame showed it (or another
        paused rank, once that one runs), asked once."""
        ref = args.get("sourceReference") or (args.get("source") or {}).get("sourceReference")
        if ref not in self.source_of:
            raise RequestError(f"source: no source {ref!r}: the editor has only those its stacks showed")
        if ref not in self.source_text:
            file, thread_id = self.source_of[ref]
            paused = sorted((t for t in self.threads.values() if not t.running), key=lambda t: t.id != thread_id)
            if not paused:
                raise RequestError(f"source: no rank is paused to read {file} from")
            self.source_text[ref] = self.inspect(paused[0], wire.Query.SOURCE, expression=file).items[0].value
        return {"content": self.source_text[ref], "mimeType": "text/x-python"}
