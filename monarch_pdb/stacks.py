"""Every thread's Python stack, read from the agent's own thread without stopping anyone.

`sys._current_frames()` is a snapshot the interpreter takes under the GIL, so it works while
the program's threads block in a lock, a socket read, a sleep or a C call that releases the
GIL. A rank's "main" thread is the one running its endpoint call, or the process's main
thread when none is running (a worker waiting for its next call, a plain process). A rank whose
call is an asyncio task waiting in an `await` shows the coroutines it awaits in place of the
event loop's frames, which would be the same for every rank.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterable, Mapping

from monarch_pdb.sources import debugger_code, source_file

ASYNCIO_DIR = os.path.dirname(asyncio.__file__) + os.sep


def frames_of(frame) -> list[list]:
    """[file, line, function] of `frame` and its callers, outermost first, without the
    debugger's frames on top: a paused rank is where its program stopped, not inside pdb."""
    out = []
    while frame is not None:
        out.append([source_file(frame), frame.f_lineno, frame.f_code.co_name])
        frame = frame.f_back
    out.reverse()
    for depth, (filename, _, _) in enumerate(out):
        if debugger_code(filename):
            return out[:depth]
    return out


def awaiting(frames: list[list], task: asyncio.Task) -> list[list]:
    """A suspended task's stack: the thread's frames up to the event loop, then each coroutine
    the task awaits, outermost first."""
    loop_at = next((i for i, f in enumerate(frames) if f[0].startswith(ASYNCIO_DIR)), len(frames))
    chain = []
    coro = task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        chain.append([source_file(frame), frame.f_lineno, frame.f_code.co_name])
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames[:loop_at] + chain


def take(ranks: Iterable[int], running: Mapping[int, tuple[int, asyncio.Task | None]], every_thread: bool) -> list[list]:
    """[threads, ranks] pairs, ranks whose stacks have the same frames sharing one pair (the
    threads of two ranks differ in name only). `running` maps a rank to the thread running its
    endpoint call and the call's asyncio task, if any; the calling thread, the agent's, is
    never reported."""
    current = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    main = threading.main_thread().ident
    busy = {thread for thread, _ in running.values()}
    walked: dict[int, tuple[list, tuple]] = {}

    def thread(ident: int) -> tuple[list, tuple]:
        """The thread as reported, and what makes it equal to another."""
        if ident not in walked:
            frames = frames_of(current.get(ident))
            walked[ident] = ([names.get(ident, f"thread {ident}"), frames], tuple(map(tuple, frames)))
        return walked[ident]

    idle = [t for t in sorted(current) if t != me and t not in busy] if every_thread else []
    groups: dict[tuple, list] = {}
    for rank in ranks:
        own, task = running.get(rank, (main, None))
        taken = [thread(t) for t in [own, *(t for t in idle if t != own)] if t in current]
        if taken and task is not None and not getattr(task.get_coro(), "cr_running", True):
            name, frames = taken[0][0]
            frames = awaiting(frames, task)
            taken[0] = ([name, frames], tuple(map(tuple, frames)))
        key = tuple(same for _, same in taken)
        if key in groups:
            groups[key][1].append(rank)
        else:
            groups[key] = [[reported for reported, _ in taken], [rank]]
    return list(groups.values())
