"""An editor's breakpoints in a running process, and its wish for post-mortem on every
uncaught exception.

From Python 3.12 on, a breakpoint is a `sys.monitoring` LINE event enabled on the code objects
that hold its line only (PEP 669): every other function runs at full speed, and in the watched
ones each other line is disabled the first time it is reached. When the line is reached and
the condition and hit count hold, the thread stops in a session as at a `breakpoint()`, on
that line; a log point prints its message to the editor and goes on. A thread a session's pdb
traces is left to that pdb, whose breakpoints (the editor's among them) stand for these.
Before 3.12 there is no such event: the editor sets its breakpoints when the rank next stops.
"""

from __future__ import annotations

import bdb
import os
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass

from monarch_pdb import wire
from monarch_pdb.rank import code_lines, log_points
from monarch_pdb.rank.file_loads import FileLoads
from monarch_pdb.rank.line_events import LineEvents

MONITORING = sys.version_info >= (3, 12)
NEXT_STOP = (
    f"set when the rank next stops: Python {sys.version_info[0]}.{sys.version_info[1]} cannot stop a "
    "running rank at a line (sys.monitoring comes with 3.12)"
)


@dataclass(eq=False)
class Armed:
    """A spot as the process keeps it: its condition and message compiled, and how many times
    its condition held."""

    spot: wire.Spot
    owner: bytes
    compiled: log_points.Compiled
    count: int = 0


Tell = Callable[[bytes, str], None]
"""How a log point's message reaches the editor that set it (its connection, the text)."""


class RunningBreakpoints:
    """The editors' breakpoints in this process's code, by file.

    Locking: `_lock` serialises changes; the line callback reads `_at` without it, a table that
    is replaced whole, never changed in place, and replaced before the events are restarted."""

    def __init__(self, tell: Tell, stop: Callable[[types.FrameType], None] | None) -> None:
        """`stop` opens a session at a frame (the debugger's `break_at`); a process without
        one (a load generator's) sets no breakpoints."""
        self.tell = tell
        self.stop = stop
        self.uncaught = False
        """Whether an editor wants post-mortem for every uncaught exception (endpoint.py asks)."""
        self.uncaught_owner = b""
        """The editor that set `uncaught` last."""
        self._files: dict[str, list[tuple[Armed, list[types.CodeType]]]] = {}
        self._at: dict[types.CodeType, dict[int, list[Armed]]] = {}
        self._events = LineEvents(self._line)
        self._lock = threading.RLock()
        """An RLock: a file's code is handed over in whatever thread imports it, this one's too."""
        self._unloaded: dict[str, tuple[str, list[wire.Spot], bytes]] = {}
        """The breakpoints of files this process has not loaded, by real path."""
        self._loads = FileLoads(self._loading)

    def change(self, path: str, spots: list[wire.Spot], owner: bytes) -> list[str]:
        """Make `spots` the file's breakpoints; for each, "" when set, else why not. A file
        this process has not loaded yet has them set as it loads (a rank asked as it starts
        has imported little of the program)."""
        if not MONITORING:
            return [NEXT_STOP] * len(spots)
        if self.stop is None:
            return ["this process stops at no breakpoint"] * len(spots)
        with self._lock:
            return self._arm(path, spots, owner, code_lines.code_of(path, [s.line for s in spots]) if spots else [])

    def forget(self, owner: bytes) -> None:
        """The editor `owner` is gone: its breakpoints and its wish for post-mortem with it."""
        with self._lock:
            if self.uncaught_owner == owner:
                self.uncaught = False
            self._unloaded = {real: waiting for real, waiting in self._unloaded.items() if waiting[2] != owner}
            self._loads.wait_for(frozenset(self._unloaded))
            for path in [path for path, armed in self._files.items() if armed[0][0].owner == owner]:
                self._arm(path, [], owner, [])

    def _arm(self, path: str, spots: list[wire.Spot], owner: bytes, codes: list[types.CodeType]) -> list[str]:
        real = os.path.realpath(path)
        self._unloaded.pop(real, None)
        if spots and not codes:
            self._unloaded[real] = (path, spots, owner)
        self._loads.wait_for(frozenset(self._unloaded))
        kept, reasons = [], []
        for spot in spots:
            holders = code_lines.holding(codes, spot.line)
            try:
                compiled = log_points.compiled(spot)
            except log_points.Unusable as problem:
                reasons.append(str(problem))
                continue
            if holders:
                kept.append((Armed(spot, owner, compiled), holders))
            reasons.append(f"line {spot.line} of {path} holds no code to stop at" if codes and not holders else "")
        files = {name: armed for name, armed in self._files.items() if name != path}
        if kept:
            files[path] = kept
        at: dict[types.CodeType, dict[int, list[Armed]]] = {}
        for armed_spots in files.values():
            for armed, holders in armed_spots:
                for code in holders:
                    at.setdefault(code, {}).setdefault(armed.spot.line, []).append(armed)
        if not self._events.watch(frozenset(at)):
            return ["every sys.monitoring tool id of this process is taken"] * len(spots)
        self._files, self._at = files, at
        # Lines disabled before may hold a breakpoint now.
        sys.monitoring.restart_events()  # type: ignore[attr-defined]
        return reasons

    def _loading(self, code: types.CodeType) -> None:
        """A waited-for file's module is about to run `code`: its breakpoints are set in it,
        nested functions' included, before any of it runs. Nothing may raise: the import would
        fail."""
        try:
            with self._lock:
                waiting = self._unloaded.get(os.path.realpath(code.co_filename))
                if waiting is not None:
                    self._arm(*waiting, list(code_lines.nested(code)))
        except Exception:
            return

    def _line(self, code: types.CodeType, line: int) -> object:
        """Every hit of a watched line comes here: a false condition on a hot line costs what
        this does before `holds` answers, so it makes nothing and asks only what it must."""
        at = self._at
        lines = at.get(code)
        here = lines.get(line) if lines is not None else None
        if here is None:
            # Only while the table we read is still the one in force: a change made since
            # (this thread may have been switched out after reading it) restarted the events
            # already, and a line disabled after that restart would never be seen again.
            return sys.monitoring.DISABLE if self._at is at else None  # type: ignore[attr-defined]
        tracer = sys.gettrace()
        if tracer is not None and isinstance(getattr(tracer, "__self__", None), bdb.Bdb):
            return None
        frame = sys._getframe(1)
        stop = False
        for armed in here:
            if not armed.compiled.holds(frame):
                continue
            armed.count += 1
            if armed.count < armed.spot.hits:
                continue
            if armed.spot.log:
                self.tell(armed.owner, armed.compiled.message(frame))
            else:
                stop = True
        if stop:
            assert self.stop is not None
            self.stop(frame)
        return None
