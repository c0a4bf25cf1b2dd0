"""Stopping a running rank where it is, without a breakpoint() in its code.

Python delivers signals to the main thread only. When that thread runs the rank's code, the
rank process's thread sends it a dedicated signal: the signal cuts short a sleep, a lock wait or a
socket read (Python runs the handler, then resumes the call), and the handler opens a session
on the frame it interrupted, at once.

Any other thread (Monarch's actor thread, Ray's async actors, a rank that is a thread), and a
task waiting in an `await`, stops at its next line of the rank's own code instead: the code
objects of its stack are watched for line events, which on Python 3.12+ `sys.monitoring`
delivers for chosen code objects in every thread, and on 3.10 and 3.11 a C-level trace
function set on that thread alone (`_PyEval_SetTrace`, the call 3.12 wraps as
`PyEval_SetTraceAllThreads`) delivers for that thread's code. So a thread that sleeps or waits
inside a loop stops when the sleep or wait returns; one blocked for good, or in C code that
holds the GIL, never does: the shell names those ranks and shows their stacks instead.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from monarch_pdb.rank import main_thread_signal
from monarch_pdb.rank.identity import Identity
from monarch_pdb.rank.line_events import LineEvents
from monarch_pdb.rank.rank_threads import Running
from monarch_pdb.rank.sources import debugger_code, package_code, program_code
from monarch_pdb.rank.thread_stacks import awaited_frames, program_frames, waits_in_await

PATIENCE = 30.0
"""Seconds an interrupt stays wanted: a thread that runs none of the rank's code for that
long (blocked for good, most likely) is then left alone."""
RETRY = 0.1
"""Seconds between two signals while an interrupt is wanted."""

Stop = Callable[[Any, Identity], None]
"""Opens a session at a frame of the calling thread, as the given rank: how a thread asked to
stop stops (the debugger's `interrupt`)."""


def signal_reaches(running: Running) -> bool:
    """Whether the signal stops the rank in its code: it runs on the main thread, our handler
    is installed (the default action of the signal would end the process), and it is not a
    task waiting in an `await`, which the signal would find in its event loop."""
    return (
        running.thread == threading.main_thread().ident
        and main_thread_signal.armed()
        and not waits_in_await(running.coroutine)
    )


def inside_rank_process(frame) -> bool:
    """The interrupted code is this package's (the debugger, which may hold the rank process's locks
    or be paused already, or the wrapper of an engine's call): the session must wait until
    the program's code runs."""
    if package_code(frame.f_code.co_filename):
        return True
    while frame is not None:
        if debugger_code(frame.f_code.co_filename):
            return True
        frame = frame.f_back
    return False


class Interrupts:
    """Ranks of this process asked to stop where they run: on the main thread by the signal,
    which cuts short a sleep or a wait, on any other at its next line (the rank process keeps one).

    Locking: `_lock` guards `_signals` and `_signalled`; the signal handler only tries it, and
    line stops keep their own."""

    def __init__(self, stop: Stop) -> None:
        self._stop = stop
        self._lock = threading.Lock()
        self._signals: list[tuple[Identity, float]] = []
        """Whom the main thread is asked to stop as, and since when."""
        self._signalled = 0.0
        self._line_stops = LineStops(stop)

    def ask(self, ranks: Iterable[tuple[Running, Identity]], now: float) -> None:
        """Ask each rank's thread to stop, as the identity given: by the signal, or at its next
        line; one that can be asked neither way stays running."""
        for running, identity in ranks:
            if signal_reaches(running):
                with self._lock:
                    self._signals.append((identity, now))
            else:
                self._line_stops.ask(running, identity, now)
        self._signal(now, force=True)

    def pending(self) -> bool:
        with self._lock:
            signals = bool(self._signals)
        return signals or self._line_stops.pending()

    def tick(self, now: float) -> None:
        """Signal the main thread again while an interrupt is wanted (its handler waits while
        the thread runs the debugger's own code), and forget what nobody took in PATIENCE."""
        self._signal(now)
        self._line_stops.forget_old(now)

    def signalled(self, frame) -> None:
        """The signal's work, in the main thread at `frame`: stop as the rank wanted (one
        session per thread at a time, so the rest are dropped). Never waits for the lock: the
        handler may run while the thread holds it. A signal that finds this package's code
        running is left for the next one (see `inside_rank_process`)."""
        if inside_rank_process(frame) or not self._lock.acquire(blocking=False):
            return
        try:
            wanted, self._signals = self._signals, []
        finally:
            self._lock.release()
        if wanted:
            self._stop(frame, wanted[0][0])

    def _signal(self, now: float, force: bool = False) -> None:
        with self._lock:
            self._signals = [(ident, since) for ident, since in self._signals if now - since < PATIENCE]
            due = bool(self._signals) and (force or now - self._signalled >= RETRY)
            if due:
                self._signalled = now
        if due:
            main_thread_signal.send()


def codes_to_watch(running: Running) -> frozenset:
    """The code objects in which the rank runs its own code next: those of the coroutines it
    awaits while it waits in an `await`, else of its thread's stack; the program's own code
    only, unless there is none (a program installed as a package)."""
    if waits_in_await(running.coroutine):
        frames = list(awaited_frames(running.coroutine))
    else:
        frames = program_frames(sys._current_frames().get(running.thread))
    codes = frozenset(f.f_code for f in frames)
    return frozenset(c for c in codes if program_code(c.co_filename)) or codes


@dataclass(frozen=True)
class Wanted:
    """A thread asked to stop, as whom, at which code objects, and since when."""

    identity: Identity
    codes: frozenset
    since: float


class LineStops:
    """Threads asked to stop at their next line in the given code objects, until they do or
    PATIENCE passes.

    Locking: `_lock` guards `_wanted` and `_events`; `stop` runs after it is released."""

    def __init__(self, stop: Stop) -> None:
        self._stop = stop
        self._lock = threading.Lock()
        self._wanted: dict[int, Wanted] = {}
        self._events: _Monitoring | _ThreadTrace | None = None

    def ask(self, running: Running, identity: Identity, now: float) -> bool:
        """Ask the rank's thread to stop; False when it runs no Python code to watch, or this
        Python cannot watch another thread."""
        codes = codes_to_watch(running)
        if not codes:
            return False
        with self._lock:
            if self._events is None:
                self._events = _line_events(self._reached, self._stop)
            if self._events is None:
                return False
            self._wanted[running.thread] = Wanted(identity, codes, now)
            watched = self._events.watch(running.thread, self._all_codes())
            if not watched:
                del self._wanted[running.thread]
        return watched

    def pending(self) -> bool:
        with self._lock:
            return bool(self._wanted)

    def forget_old(self, now: float) -> None:
        with self._lock:
            old = [t for t, w in self._wanted.items() if now - w.since >= PATIENCE]
            for thread in old:
                del self._wanted[thread]
            if old and self._events is not None:
                self._events.unwatch(self._all_codes())

    def _all_codes(self) -> frozenset:
        return frozenset().union(*(w.codes for w in self._wanted.values()))

    def _reached(self, frame, line: bool) -> Wanted | bool:
        """Called in a watched thread at an event: what it was asked, when the event is a line
        it was asked to stop at (it is not watched from then on); True while it is still
        wanted at another line, False when it is not wanted any more."""
        thread = threading.get_ident()
        with self._lock:
            wanted = self._wanted.get(thread)
            if wanted is None or not line or frame.f_code not in wanted.codes:
                return wanted is not None
            del self._wanted[thread]
            if self._events is not None:
                self._events.unwatch(self._all_codes())
        return wanted


Reached = Callable[[Any, bool], Wanted | bool]
"""LineStops' answer to an event in a watched thread (see `LineStops._reached`)."""


def _line_events(reached: Reached, stop: Stop) -> _Monitoring | _ThreadTrace | None:
    """What delivers line events of another thread on this Python, if anything does; a thread
    that reaches a line it is wanted at is stopped there by `stop`."""
    if hasattr(sys, "monitoring"):
        return _Monitoring(reached, stop)
    if hasattr(ctypes.pythonapi, "_PyEval_SetTrace"):
        return _ThreadTrace(reached, stop)
    return None


class _Monitoring:
    """Line events of chosen code objects, in every thread (Python 3.12+): each goes to the
    thread that runs it, where `reached` decides."""

    def __init__(self, reached: Reached, stop: Stop) -> None:
        self._reached, self._stop = reached, stop
        self._events = LineEvents(self._line)

    def watch(self, thread: int, codes: frozenset) -> bool:
        return self._events.watch(codes)

    def unwatch(self, codes: frozenset) -> None:
        self._events.watch(codes)

    def _line(self, code, line: int) -> None:
        frame = sys._getframe(1)
        wanted = self._reached(frame, True)
        if isinstance(wanted, Wanted):
            self._stop(frame, wanted.identity)


_LINE = 2
"""PyTrace_LINE, the event of a C trace function for a new line."""
_TRACE_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.py_object, ctypes.c_int, ctypes.c_void_p)


class _ThreadTrace:
    """A C-level trace function set on one thread from another (Python 3.10 and 3.11, where
    `sys.settrace` reaches the calling thread only). It runs in the watched thread and takes
    itself off there: when the thread stops, and at its next event once it is not wanted."""

    def __init__(self, reached: Reached, stop: Stop) -> None:
        self._reached, self._stop = reached, stop
        self._function = _TRACE_FUNCTION(self._event)
        api = ctypes.pythonapi
        self._set_trace = api._PyEval_SetTrace
        self._set_trace.argtypes = [ctypes.c_void_p, _TRACE_FUNCTION, ctypes.c_void_p]
        self._set_trace.restype = ctypes.c_int
        for name, argtypes in (
            ("PyInterpreterState_Get", []),
            ("PyInterpreterState_ThreadHead", [ctypes.c_void_p]),
            ("PyThreadState_Next", [ctypes.c_void_p]),
            ("PyThreadState_GetFrame", [ctypes.c_void_p]),
        ):
            getattr(api, name).argtypes = argtypes
            getattr(api, name).restype = ctypes.c_void_p
        api.Py_DecRef.argtypes = [ctypes.c_void_p]
        self._api = api

    def watch(self, thread: int, codes: frozenset) -> bool:
        """Set the trace function on `thread`, unless a tracer (coverage, another debugger)
        already traces the program's threads: it would be replaced."""
        if threading.gettrace() is not None:
            return False
        state = self._thread_state(thread)
        return state is not None and self._set_trace(state, self._function, None) == 0

    def unwatch(self, codes: frozenset) -> None:
        """Nothing to do here: a thread no longer wanted takes the function off at its next event."""

    def _thread_state(self, thread: int) -> int | None:
        """The interpreter's state of `thread`, the one whose current frame is that thread's
        (the state holds no thread id that a public call returns)."""
        frame = sys._current_frames().get(thread)
        if frame is None:
            return None
        api = self._api
        state = api.PyInterpreterState_ThreadHead(api.PyInterpreterState_Get())
        while state:
            current = api.PyThreadState_GetFrame(state)
            if current:
                api.Py_DecRef(current)
                if current == id(frame):
                    return state
            state = api.PyThreadState_Next(state)
        return None

    def _event(self, _: int, frame, what: int, __: int) -> int:
        wanted = self._reached(frame, what == _LINE)
        if wanted is not True:
            sys.settrace(None)
        if isinstance(wanted, Wanted):
            self._stop(frame, wanted.identity)
        return 0
