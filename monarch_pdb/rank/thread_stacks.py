"""Every thread's Python stack, read from the rank process's own thread without stopping anyone.

`sys._current_frames()` is a snapshot the interpreter takes under the GIL, so it works while
the program's threads block in a lock, a socket read, a sleep or a C call that releases the
GIL. A rank's own thread is the one that runs its code (see monarch_pdb.rank.rank_threads). A
rank whose call is an asyncio task waiting in an `await` shows the coroutines it awaits in
place of the event loop's frames, which would be the same for every rank.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from monarch_pdb import wire
from monarch_pdb.rank.rank_threads import Running
from monarch_pdb.rank.sources import debugger_code, package_code, source_file
from monarch_pdb.ranks import RankSet

ASYNCIO_DIR = os.path.join(os.path.dirname(threading.__file__), "asyncio", "")
"""asyncio's files, named without importing it (a rank that never awaits does not load it)."""


def program_frames(frame) -> list:
    """`frame` and its callers, innermost first, without the debugger's frames on top (a
    paused rank is where its program stopped, not inside pdb) or this package's frames
    between (an engine call's wrapper)."""
    out: list = []
    while frame is not None:
        filename = frame.f_code.co_filename
        if debugger_code(filename):
            out.clear()
        elif not package_code(filename):
            out.append(frame)
        frame = frame.f_back
    return out


def record(frame) -> wire.Frame:
    """A frame as it travels; one without a line number (on 3.12, returning from an `except*`
    block) at line 0."""
    return wire.Frame(source_file(frame), frame.f_lineno or 0, frame.f_code.co_name)


def frames_of(frame) -> list[wire.Frame]:
    """`program_frames`, outermost first."""
    return [record(f) for f in reversed(program_frames(frame))]


def post_mortem_frames(frame, raised) -> list[wire.Frame]:
    """A post-mortem rank's stack, outermost first: the frames its thread runs (from `frame`,
    its innermost) down to the first that the traceback `raised` passed through, then the
    traceback's from there to the frame that raised. The thread itself runs the code that
    caught the exception (a context manager's exit), which is no place of the program's."""
    passed: list[tuple[Any, int]] = []
    while raised is not None:
        if not package_code(raised.tb_frame.f_code.co_filename):
            passed.append((raised.tb_frame, raised.tb_lineno))
        raised = raised.tb_next
    running = list(reversed(program_frames(frame)))
    depth = {id(f): n for n, (f, _) in enumerate(passed)}
    joint = next((n for n, f in enumerate(running) if id(f) in depth), len(running))
    below = passed[depth[id(running[joint])] :] if joint < len(running) else passed
    return [record(f) for f in running[:joint]] + [
        wire.Frame(source_file(f), line or 0, f.f_code.co_name) for f, line in below
    ]


def waits_in_await(coro: Any) -> bool:
    """Whether `coro` is suspended in an `await` (a compiled coroutine that does not say counts
    as running)."""
    return coro is not None and not getattr(coro, "cr_running", True)


def awaited_frames(coro: Any) -> Iterator:
    """The frames of `coro` and the coroutines it awaits, outermost first; coroutines without
    a frame (compiled ones) are passed through, and this package's own are left out."""
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None and not package_code(frame.f_code.co_filename):
            yield frame
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)


def awaiting(frames: list[wire.Frame], coro: Any) -> list[wire.Frame]:
    """A suspended coroutine's stack: the thread's frames up to the event loop, then each
    coroutine it awaits, outermost first."""
    loop_at = next((i for i, f in enumerate(frames) if f.file.startswith(ASYNCIO_DIR)), len(frames))
    return frames[:loop_at] + [record(f) for f in awaited_frames(coro)]


def take(ranks: Iterable[int], running: Mapping[int, Running], every_thread: bool) -> list[wire.StackGroup]:
    """The ranks' stacks, ranks whose stacks have the same frames sharing one group (the
    threads of two ranks differ in name only). `running` maps each rank to its own thread,
    shown first; the calling thread, the rank process's, is never reported."""
    current = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    busy = {how.thread for how in running.values()}
    walked: dict[int, wire.ThreadStack] = {}

    def thread(ident: int) -> wire.ThreadStack:
        if ident not in walked:
            walked[ident] = wire.ThreadStack(names.get(ident, f"thread {ident}"), frames_of(current.get(ident)))
        return walked[ident]

    idle = [t for t in sorted(current) if t != me and t not in busy] if every_thread else []
    groups: dict[tuple, tuple[list[wire.ThreadStack], list[int]]] = {}
    for rank in ranks:
        own, coro = running[rank].thread, running[rank].coroutine
        taken = [thread(t) for t in [own, *(t for t in idle if t != own)] if t in current]
        if taken and running[rank].raised is not None:
            taken[0] = wire.ThreadStack(taken[0].name, post_mortem_frames(current[own], running[rank].raised))
        elif taken and waits_in_await(coro):
            taken[0] = wire.ThreadStack(taken[0].name, awaiting(taken[0].frames, coro))
        groups.setdefault(tuple(t.key() for t in taken), (taken, []))[1].append(rank)
    return [wire.StackGroup(taken, RankSet.of(alike)) for taken, alike in groups.values()]
