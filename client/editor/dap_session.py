"""One editor's debug session in DAP's words: each request's arguments checked and answered,
each of the runtime's happenings sent as DAP's event.

As vscode-mock-debug's `MockDebugSession` over its `MockRuntime`: the `on_*` methods read and
write DAP's JSON only; what the ranks do and how the broker is asked is `runtime`'s.
DAP's numbers for frames and values, the editor's paths and its sources are kept here.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from monarch_pdb import ranks, wire
from monarch_pdb.client.commands import hostlist, listing, stack_tree
from monarch_pdb.client.connection import BrokerConnection
from monarch_pdb.client.editor import console, launch
from monarch_pdb.client.editor import runtime as rt
from monarch_pdb.client.editor.runtime import Debuggee, Refused, Runtime, Thread
from monarch_pdb.settings import Settings

UNCAUGHT = "uncaught"
"""The exception filter that stops every selected rank in post-mortem on an uncaught exception."""
STEPS = {"next": "next", "stepIn": "step", "stepOut": "return"}
"""pdb's command for each of DAP's steps."""

RANKS_CHANGED = "monarchRanksChanged"
"""The custom event after which the extension's Ranks view asks `monarchRanks` again."""
GROUP_ACTIONS = ("continue", "next", "interrupt")

Send = Callable[[str, dict], None]
"""How the session sends an event: its name and body."""


@dataclass(frozen=True)
class PathMap:
    """debugpy's `pathMappings`: where the editor keeps the files the ranks run from elsewhere."""

    pairs: tuple[tuple[str, str], ...] = ()
    """(local root, remote root), the first that matches wins."""

    @classmethod
    def parse(cls, mappings: Any) -> PathMap:
        if not isinstance(mappings, list) or not all(
            isinstance(m, dict) and isinstance(m.get("localRoot"), str) and isinstance(m.get("remoteRoot"), str)
            for m in mappings
        ):
            raise Refused('attach: pathMappings is a list of {"localRoot": ..., "remoteRoot": ...}')
        return cls(tuple((m["localRoot"].rstrip("/") + "/", m["remoteRoot"].rstrip("/") + "/") for m in mappings))

    def local(self, path: str) -> str:
        return self._swap(path, 1, 0)

    def remote(self, path: str) -> str:
        return self._swap(path, 0, 1)

    def _swap(self, path: str, source: int, target: int) -> str:
        for pair in self.pairs:
            if path.startswith(pair[source]):
                return pair[target] + path[len(pair[source]) :]
        return path


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
            raise Refused(f"no {what} {number}: the rank ran since it was shown")
        return self.table[number]

    def forget(self, thread: int) -> None:
        self.table = {n: held for n, held in self.table.items() if held[0] != thread}


class DebugSession:
    """The requests of one attached editor, and the events it is sent."""

    def __init__(self, send_event: Send, hand_over: Callable[[list[wire.Event]], None], settings: Settings) -> None:
        """`hand_over` takes the broker's events on the connection's thread to the adapter's,
        which gives them to `heard`."""
        self.send_event = send_event
        self.settings = settings
        self.runtime = Runtime(self.happened, hand_over, settings)
        self.launched: launch.Launched | None = None
        self.paths = PathMap()
        self.just_my_code = True
        self.frames = Handles()
        self.values = Handles()
        self.focus_sent = False
        self.breakpoint_ids = itertools.count(1)
        self.sources: dict[str, int] = {}
        """A `sourceReference` for each file the editor cannot open (code with no file, or a
        file that is not on the editor's disk), by its name in the ranks."""
        self.source_of: dict[int, tuple[str, int]] = {}
        """Each `sourceReference`'s file and the thread whose frame showed it."""
        self.source_text: dict[int, str] = {}
        """Each `sourceReference`'s text, once a rank gave it."""

    @property
    def conn(self) -> BrokerConnection | None:
        return self.runtime.conn

    @property
    def job_check(self) -> float | None:
        return self.runtime.job_check

    def heard(self, news: rt.News) -> None:
        self.runtime.heard(news)

    def ended_jobs(self, now: float) -> None:
        self.runtime.ended_jobs(now)

    def close(self) -> None:
        """Leave the broker; a job the editor launched ends, and its broker with it."""
        self.runtime.close()
        if self.launched is not None:
            self.launched.stop()
            self.launched = None

    # --- the runtime's happenings, as DAP's events -------------------------------------

    def happened(self, what: rt.Happening) -> None:
        if isinstance(what, rt.Stopped):
            self.forget(what.thread)
            body = {"reason": what.reason, "threadId": what.thread.id, "allThreadsStopped": False}
            if self.focus_sent and not what.own:
                body["preserveFocusHint"] = True  # only the first stop, and the user's own step, take the focus
            self.focus_sent = True
            self.send_event("stopped", body)
        elif isinstance(what, rt.Ran):
            self.forget(what.thread)
            if what.told:
                self.send_event("continued", {"threadId": what.thread.id, "allThreadsContinued": False})
        elif isinstance(what, rt.ThreadStarted):
            self.send_event("thread", {"reason": "started", "threadId": what.thread.id})
        elif isinstance(what, rt.ThreadExited):
            self.forget(what.thread)
            self.send_event("thread", {"reason": "exited", "threadId": what.thread.id})
        elif isinstance(what, rt.PrintedByRank):
            if what.log:
                self.send_event("output", {"category": "console", "output": f"{what.actor} {what.rank}: {what.text}\n"})
            else:  # each line marked with the rank as the shell's `follow` marks it
                lines = what.text.rstrip("\n").split("\n")
                self.send_event(
                    "output",
                    {"category": "stdout", "output": "".join(f"[{what.actor} {what.rank}] {line}\n" for line in lines)},
                )
        elif isinstance(what, rt.Note):
            self.console(what.text)
        elif isinstance(what, rt.Verified):
            self.send_event(
                "breakpoint",
                {"reason": "changed", "breakpoint": {"id": what.number, "verified": True, "line": what.line}},
            )
        elif isinstance(what, rt.Finished):
            self.send_event("terminated", {})
        elif isinstance(what, rt.Changed):
            self.send_event(RANKS_CHANGED, {})

    def forget(self, thread: Thread) -> None:
        """A thread that ran or went: DAP's numbers for its frames and values mean nothing now."""
        self.frames.forget(thread.id)
        self.values.forget(thread.id)

    def console(self, text: str) -> None:
        self.send_event("output", {"category": "console", "output": text + "\n"})

    # --- requests ----------------------------------------------------------------------

    def handle(self, command: str, args: dict) -> dict | None:
        """The body of the response to `command`; Refused with the reason otherwise."""
        handler = getattr(self, f"on_{command}", None)
        if handler is None:
            raise Refused(f"monarch-pdb does not support the request {command!r}")
        if command not in ("initialize", "attach", "launch", "disconnect", "terminate") and self.conn is None:
            raise Refused(f"{command}: attach to a broker first")
        return handler(args)

    def on_initialize(self, args: dict) -> dict:
        return {
            "supportsConfigurationDoneRequest": True,
            "supportsEvaluateForHovers": True,
            # Not `supportsDelayedStackTraceLoading`: the rank reads its whole stack for each
            # `stackTrace`, and VS Code would ask twice per stop and show the thread's old frames
            # and a "Load More Stack Frames" row until the second answer, moving the rows below.
            "supportsSingleThreadExecutionRequests": True,
            "supportsTerminateRequest": False,
            "supportsSetVariable": True,
            "supportsConditionalBreakpoints": True,
            "supportsHitConditionalBreakpoints": True,
            "supportsLogPoints": True,
            "supportsExceptionInfoRequest": True,
            "exceptionBreakpointFilters": [
                {
                    "filter": UNCAUGHT,
                    "label": "Uncaught Exceptions",
                    "default": False,
                    "description": "Stop every selected rank in post-mortem on an uncaught exception",
                }
            ],
            "supportsRestartRequest": False,
        }

    def on_attach(self, args: dict) -> None:
        port = args.get("port")
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536):
            raise Refused(f"attach: port must be a port number, not {port!r}")
        if not isinstance(args.get("host", ""), str):
            raise Refused(f"attach: host must be a string, not {args['host']!r}")
        options = self.options("attach", args)
        self.close()
        self.runtime.connect(self.settings.with_overrides(host=args.get("host") or None, port=port), options)
        self.send_event("initialized", {})

    def on_launch(self, args: dict) -> None:
        """Start the job's command with a broker of its own and debug its ranks; the session's
        end ends the job (see `launch`)."""
        if self.conn is not None:
            raise Refused("launch: this session is attached already; launch in a debug session of its own")
        options = self.options("launch", args)
        try:
            command = launch.Command.parse(args)
            self.launched = launch.Launched(command, self.settings, self.job_printed, self.job_ended)
        except launch.LaunchError as error:
            raise Refused(str(error)) from None
        self.console(f"monarch-pdb: started {' '.join(command.argv)} (process group {self.launched.job.pid})")
        self.runtime.connect(self.launched.settings, options)
        self.send_event("initialized", {})

    def options(self, request: str, args: dict) -> rt.Options:
        """What attach and launch configurations share: which ranks, how the editor shows them."""
        for name in ("ranks", "job"):
            if not isinstance(args.get(name, ""), str):
                raise Refused(f"{request}: {name} must be a string, not {args[name]!r}")
        target = Debuggee.parse(args.get("ranks", ""), args.get("job", ""))
        self.paths = PathMap.parse(args.get("pathMappings", []))
        flags = {name: args.get(name, name == "justMyCode") for name in ("justMyCode", "waitForJob", "stopAll")}
        for name, value in flags.items():
            if not isinstance(value, bool):
                raise Refused(f"{request}: {name} is true or false")
        self.just_my_code = flags["justMyCode"]
        return rt.Options(target, flags["waitForJob"], flags["stopAll"])

    def job_printed(self, category: str, text: str) -> None:
        """What the launched job wrote, on the thread that reads it."""
        self.send_event("output", {"category": category, "output": text})

    def job_ended(self, status: int) -> None:
        """The launched job exited, on the thread that waited for it: the session ends."""
        self.console(f"monarch-pdb: the job exited with status {status}")
        self.send_event("terminated", {})

    def on_configurationDone(self, args: dict) -> None:
        self.runtime.configure()

    def on_threads(self, args: dict) -> dict:
        self.runtime.refresh()
        threads = sorted(self.runtime.threads.values(), key=lambda t: t.id)
        return {"threads": [{"id": t.id, "name": t.name} for t in threads]}

    def on_stackTrace(self, args: dict) -> dict:
        thread = self.thread(args)
        answer = self.runtime.inspect(thread, wire.Query.STACK, mine=self.just_my_code)
        thread.stop = answer.stop
        start = max(0, int(args.get("startFrame") or 0))
        levels = int(args.get("levels") or 0)
        chosen = answer.items[start : start + levels] if levels > 0 else answer.items[start:]
        frames = []
        for item in chosen:
            frame = {"id": self.frames.make(thread.id, item.handle), "name": item.name, "line": item.line, "column": 1}
            frame["source"] = self.source(thread, item.file)
            frames.append(frame)
        return {"stackFrames": frames, "totalFrames": answer.total}

    def on_scopes(self, args: dict) -> dict:
        thread, index = self.frame(args)
        answer = self.runtime.inspect(thread, wire.Query.SCOPES, frame=index)
        return {
            "scopes": [
                {
                    "name": item.name,
                    "variablesReference": self.values.make(thread.id, item.handle),
                    "expensive": item.name == "Globals",
                }
                for item in answer.items
            ]
        }

    def on_variables(self, args: dict) -> dict:
        thread_id, handle = self.values.get(int(args.get("variablesReference", 0)), "variables")
        thread = self.runtime.thread_by_id(thread_id)
        start, count = max(0, int(args.get("start") or 0)), max(0, int(args.get("count") or 0))
        answer = self.runtime.inspect(thread, wire.Query.VARIABLES, handle=handle, start=start, count=count)
        return {"variables": [self.variable(thread, item) for item in answer.items]}

    def on_setVariable(self, args: dict) -> dict:
        thread_id, handle = self.values.get(int(args.get("variablesReference", 0)), "variables")
        name, value = args.get("name"), args.get("value")
        if not isinstance(name, str) or not isinstance(value, str):
            raise Refused("setVariable: name and value are strings")
        thread = self.runtime.thread_by_id(thread_id)
        item = self.runtime.inspect(thread, wire.Query.SET, handle=handle, name=name, expression=value).items[0]
        return {
            "value": item.value,
            "type": item.type,
            "variablesReference": self.values.make(thread.id, item.handle) if item.handle else 0,
        }

    def on_evaluate(self, args: dict) -> dict:
        expression = args.get("expression")
        if not isinstance(expression, str):
            raise Refused("evaluate: the expression must be a string")
        command = console.command_of(expression) if args.get("context") == "repl" else None
        if command is not None:
            return {"result": self.shell_command(command, args), "variablesReference": 0}
        if "frameId" not in args:
            raise Refused("evaluate: select a paused rank's frame first")
        thread, index = self.frame(args)
        if args.get("context") == "repl":
            return {"result": self.runtime.pdb_line(thread, expression), "variablesReference": 0}
        answer = self.runtime.inspect(thread, wire.Query.EVALUATE, frame=index, expression=expression)
        item = answer.items[0]
        return {
            "result": item.value,
            "type": item.type,
            "variablesReference": self.values.make(thread.id, item.handle) if item.handle else 0,
        }

    def shell_command(self, command: tuple[str, str], args: dict) -> str:
        """`!cast`, `!peek` or `!stacks` in the Debug Console, answered as the shell answers it;
        an actor left out is the one of the rank the console is at."""
        target = self.runtime.target
        here = console.ConsoleAt(target.job, target.actor)
        if isinstance(args.get("frameId"), int) and args["frameId"] in self.frames.table:
            thread = self.frame(args)[0]
            here = console.ConsoleAt(thread.job, thread.actor)
        assert self.runtime.conn is not None
        return console.answer(self.runtime.conn, *command, here).rstrip("\n")

    def on_setBreakpoints(self, args: dict) -> dict:
        """The file's breakpoints in every selected rank: pdb's in each paused one (and in each
        that stops later), and in the process of each that runs (see `Runtime.set_breakpoints`);
        verified when every rank set it, else with the reason of the first that did not."""
        path = (args.get("source") or {}).get("path")
        if not isinstance(path, str) or not path:
            raise Refused("setBreakpoints: the source needs a path")
        wanted = args.get("breakpoints") or []
        spots, refused = [], {}
        for index, spec in enumerate(wanted):
            hits = str(spec.get("hitCondition") or "0").strip()
            if not hits.isdigit():
                refused[index] = f"a hit count is a whole number, not {hits!r}"
            else:
                spots.append(
                    wire.Spot(
                        line=int(spec["line"]),
                        condition=str(spec.get("condition") or ""),
                        hits=int(hits),
                        log=str(spec.get("logMessage") or ""),
                    )
                )
        path = self.paths.remote(path)
        reasons, taken = self.runtime.set_breakpoints(path, spots)
        shown, spot_number, waiting = [], 0, []
        for index, spec in enumerate(wanted):
            if index in refused:
                shown.append({"verified": False, "line": spec.get("line"), "message": refused[index]})
                continue
            reason = reasons.get(spot_number)
            entry: dict[str, Any] = {
                "id": next(self.breakpoint_ids),
                "verified": reason is None and taken,
                "line": spots[spot_number].line,
            }
            if reason or not taken:
                entry["message"] = reason or "no selected rank is paused or runs yet: set in each as it starts or stops"
            if not taken:
                waiting.append((entry["id"], entry["line"]))
            shown.append(entry)
            spot_number += 1
        self.runtime.await_taking(path, waiting)
        return {"breakpoints": shown}

    def on_setExceptionBreakpoints(self, args: dict) -> dict:
        """With the `uncaught` filter, every selected rank stops in post-mortem on an uncaught
        exception; without it, as the job's settings say."""
        filters = args.get("filters") or []
        if not isinstance(filters, list) or not all(isinstance(f, str) for f in filters):
            raise Refused("setExceptionBreakpoints: filters is a list of names")
        message = self.runtime.stop_on_uncaught(UNCAUGHT in filters)
        return {
            "breakpoints": [
                {"verified": False, "message": f"monarch-pdb has no exception filter {name!r}"}
                if name != UNCAUGHT
                else {"verified": not message, **({"message": message} if message else {})}
                for name in filters
            ]
        }

    def on_exceptionInfo(self, args: dict) -> dict:
        item = self.runtime.inspect(self.thread(args), wire.Query.EXCEPTION).items[0]
        return {
            "exceptionId": item.name,
            "description": item.value,
            "breakMode": "unhandled",
            "details": {"typeName": item.name, "message": item.value, "stackTrace": item.type},
        }

    def on_next(self, args: dict) -> None:
        self.runtime.step(self.thread(args), STEPS["next"])

    def on_stepIn(self, args: dict) -> None:
        self.runtime.step(self.thread(args), STEPS["stepIn"])

    def on_stepOut(self, args: dict) -> None:
        self.runtime.step(self.thread(args), STEPS["stepOut"])

    def on_continue(self, args: dict) -> dict:
        """Every selected paused rank goes on, as the shell's `continue` (its `b` breakpoints
        cleared); with `singleThread`, the one rank only."""
        if args.get("singleThread"):
            self.runtime.step(self.thread(args), "continue")
            return {"allThreadsContinued": False}
        self.runtime.continue_all()
        return {"allThreadsContinued": True}

    def on_pause(self, args: dict) -> None:
        self.runtime.pause(self.thread(args))

    # --- the Ranks view (custom requests of the extension) -------------------------------

    def on_monarchRanks(self, args: dict) -> dict:
        """The selected ranks in groups, as the shell's `list` shows them past a screenful, each
        with its first thread (0: none is paused); and, with `stacks`, the merged stacks of the
        live ranks, as the shell's `stacks` draws them, as a tree."""
        groups = []
        for group in self.runtime.groups():
            threads = self.runtime.group_threads(group.job, group.actor, ranks.parse_ranks(group.ranks))
            groups.append(
                {
                    "job": group.job,
                    "actor": group.actor,
                    "function": group.function,
                    "line": group.lineno,
                    "state": str(group.state),
                    "ranks": group.ranks,
                    "count": group.count,
                    "coords": listing.coords_ranges(group.coords),
                    "hosts": hostlist.compress(group.hosts),
                    "attached": group.attached,
                    "threadId": threads[0].id if threads else 0,
                }
            )
        body: dict[str, Any] = {"groups": groups}
        if args.get("stacks"):
            body["stacks"] = [stacks_tree(result) for result in self.runtime.running_stacks()]
        return body

    def on_monarchRanksAct(self, args: dict) -> dict:
        """`continue`, `next` or `interrupt` one group's ranks (`job`, `actor`, `ranks` as the
        `monarchRanks` group gave them)."""
        action, job, actor, rank_text = (args.get(name) for name in ("action", "job", "actor", "ranks"))
        if action not in GROUP_ACTIONS:
            raise Refused(f"monarchRanksAct: action is one of {', '.join(GROUP_ACTIONS)}, not {action!r}")
        if not (isinstance(job, str) and isinstance(actor, str) and isinstance(rank_text, str)):
            raise Refused("monarchRanksAct: job, actor and ranks are strings")
        try:
            numbers = ranks.parse_ranks(rank_text)
        except ranks.SelectorError as error:
            raise Refused(f"monarchRanksAct: ranks: {error}") from None
        self.runtime.act_on_group(action, job, actor, numbers)
        return {}

    def on_monarchFocus(self, args: dict) -> dict:
        """Show a thread: its stop told again, without `preserveFocusHint`, which is how an
        adapter moves the editor's focus."""
        thread = self.thread(args)
        if thread.running:
            raise Refused(f"{thread.actor} {thread.rank} is running: pause it first")
        self.forget(thread)
        self.send_event(
            "stopped", {"reason": thread.reason or "pause", "threadId": thread.id, "allThreadsStopped": False}
        )
        return {}

    def on_disconnect(self, args: dict) -> None:
        """The ranks stay as they are, for the shell or another editor; but a job the editor
        launched ends."""
        self.close()

    def on_terminate(self, args: dict) -> None:
        """Only a job the editor launched ends: one it attached to is the user's."""
        if self.launched is None:
            raise Refused("monarch-pdb never ends a job it attached to: disconnect, and the ranks stay as they are")
        self.close()
        self.send_event("terminated", {})

    def thread(self, args: dict) -> Thread:
        thread_id = args.get("threadId")
        if not isinstance(thread_id, int):
            raise Refused("threadId must be a thread's number")
        return self.runtime.thread_by_id(thread_id)

    def frame(self, args: dict) -> tuple[Thread, int]:
        frame_id = args.get("frameId")
        if not isinstance(frame_id, int):
            raise Refused("frameId must be a frame's number")
        thread_id, index = self.frames.get(frame_id, "frame")
        return self.runtime.thread_by_id(thread_id), index

    def variable(self, thread: Thread, item: wire.Item) -> dict:
        return {
            "name": item.name,
            "value": item.value,
            "type": item.type,
            "variablesReference": self.values.make(thread.id, item.handle) if item.handle else 0,
        }

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
            raise Refused(f"source: no source {ref!r}: the editor has only those its stacks showed")
        if ref not in self.source_text:
            file, thread_id = self.source_of[ref]
            paused = sorted(self.runtime.paused(), key=lambda t: t.id != thread_id)
            if not paused:
                raise Refused(f"source: no rank is paused to read {file} from")
            self.source_text[ref] = self.runtime.inspect(paused[0], wire.Query.SOURCE, expression=file).items[0].value
        return {"content": self.source_text[ref], "mimeType": "text/x-python"}


def stacks_tree(result: wire.StacksResult) -> dict:
    """One actor's merged stacks as the Ranks view shows them: the shell's `stacks` tree (its
    trunk folded), each node a frame and the ranks through it."""

    def node(item: stack_tree.Node) -> dict:
        return {
            "label": item.label,
            "ranks": stack_tree.rank_text(item.ranks),
            "children": [node(child) for child in stack_tree.ordered(item)],
        }

    total = sorted({r for group in result.groups for r in group.ranks})
    root = stack_tree.tree(result.groups, False, stack_tree.trunk(result.groups, False))
    return {
        "actor": result.actor,
        "ranks": stack_tree.rank_text(total),
        "children": node(root)["children"],
        "missing": len(result.missing),
    }
