"""Which thread runs a rank's own code: the thread `stacks` shows and `interrupt` stops.

Engines run a rank's code on threads of their own: real Monarch on its actor's thread (the
main thread only runs Monarch's bootstrap loop), Ray's async actors on an event-loop thread,
the embedded mesh and threaded programs on any thread. So each engine call says where it runs
while it runs, and a paused session says where it is paused; a rank with neither runs on its
process's main thread, as under torchrun, Slurm and MPI, and as Ray's tasks and sync actors do.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from monarch_pdb.rank.identity import Identity


@dataclass(slots=True)
class Running:
    """The thread that runs a rank's code, and the coroutine it runs, when it is one's: while
    that waits in an `await`, the rank is where it awaits, not in the event loop. Never changed
    once made; not frozen, which would make each endpoint call build it a field at a time."""

    thread: int
    coroutine: Any = None
    frame: Any = None
    """A paused session's frame, where its pdb stands: what `peek` reads."""
    raised: Any = None
    """A post-mortem session's traceback: its frames down to the one that raised no longer run."""


@dataclass(eq=False, slots=True)
class EngineCall:
    """An engine call running a rank's code, on `thread`, in `coroutine` when it is one's;
    compared by identity, so two calls of one rank (an async actor's, running at once) stay
    apart. Never changed once made, as `Running`; one object a call, the cheapest to make."""

    identity: Identity
    thread: int
    coroutine: Any = None


def task_coroutine() -> Any:
    """The coroutine of the calling thread's asyncio task, if it runs one: a process that never
    imported asyncio runs none, nor one where another thread imports it now (the first stop's
    pdb does on 3.14), whose half-made module lacks the functions asked for."""
    asyncio = sys.modules.get("asyncio")
    running_loop = getattr(asyncio, "_get_running_loop", None)
    loop = running_loop() if running_loop is not None else None
    task = asyncio.current_task(loop) if loop is not None else None  # type: ignore[union-attr]
    return task.get_coro() if task is not None else None


class RankThreads:
    """The calls and paused sessions of one process, by rank (the rank process keeps one).

    Locking: `_paused` is read and written under `_lock`. `_calls` changes by one list operation
    at a time (an append, a remove), which CPython makes atomic with or without the GIL, and is
    read as a copy: every endpoint call of every rank starts and ends one, and two locks took
    more time than the rest of the call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[EngineCall] = []
        """Oldest first: the newest call of a rank is the one it runs now."""
        self._paused: dict[int, tuple[tuple[str, int], Running]] = {}
        """By session id: the rank it belongs to, and the thread and frame it is paused in."""

    def started(self, identity: Identity, coroutine: Any = None) -> EngineCall:
        """The calling thread (in `coroutine`, or its asyncio task's) runs `identity`'s code
        until `ended`."""
        call = EngineCall(identity, threading.get_ident(), task_coroutine() if coroutine is None else coroutine)
        self._calls.append(call)
        return call

    def ended(self, call: EngineCall) -> None:
        self._calls.remove(call)

    @contextmanager
    def call(self, identity: Identity, coroutine: Any = None) -> Iterator[None]:
        """`started` to `ended`, around an engine's call of the rank's code."""
        call = self.started(identity, coroutine)
        try:
            yield
        finally:
            self.ended(call)

    def paused(self, sid: int, actor: str, rank: int, frame: Any = None, raised: Any = None) -> None:
        """Session `sid` of (actor, rank) waits for input in the calling thread, its pdb at
        `frame`; in post-mortem of the traceback `raised`."""
        with self._lock:
            self._paused[sid] = ((actor, rank), Running(threading.get_ident(), frame=frame, raised=raised))

    def closed(self, sid: int) -> None:
        with self._lock:
            self._paused.pop(sid, None)

    def runs(self, actor: str, rank: int) -> bool:
        """Whether the calling thread runs the code of (actor, rank): the thread of its newest
        call while one runs, else the process's main thread."""
        here = threading.get_ident()
        for call in reversed(self._calls.copy()):
            if (call.identity.actor, call.identity.rank) == (actor, rank):
                return call.thread == here
        return here == threading.main_thread().ident

    def newest_call(self) -> Identity | None:
        """Whose code the process runs now, for a process that is a rank of its own (a Ray
        worker runs one task after another, each its own rank)."""
        calls = self._calls.copy()
        return calls[-1].identity if calls else None

    def of(self, actor: str, ranks: Iterable[int], own: bool) -> dict[int, Running]:
        """Each rank's thread: paused, else running the rank's newest call, else the main
        thread. In a process that is its own rank (`own`), every session and call is the rank's."""
        main = Running(threading.main_thread().ident)  # type: ignore[arg-type]
        with self._lock:
            paused = list(self._paused.values())
        calls = [((c.identity.actor, c.identity.rank), Running(c.thread, c.coroutine)) for c in self._calls.copy()]
        newest_first = paused[::-1] + calls[::-1]
        if own:
            return dict.fromkeys(ranks, newest_first[0][1] if newest_first else main)
        found: dict[tuple[str, int], Running] = {}
        for key, running in newest_first:
            found.setdefault(key, running)
        return {rank: found.get((actor, rank), main) for rank in ranks}
