"""Stacks read from outside a process of this host, running no code in it: for ranks whose agent
has not answered `stacks` a moment after it was asked (C code that holds the GIL, so the agent's
thread cannot run). The standard library's remote unwinder reads a process that runs this
broker's Python, from 3.14 on; py-spy (`pip install monarch-pdb[outside]`) reads any other.

py-spy was chosen over pystack because it reads every CPython from 3.10 on from a single static
binary in its wheel, with no debug symbols and no gdb needed, in tens of milliseconds.

A read takes that long, so reads run on a thread of their own and tell the broker's loop through
a pipe it polls (`fileno`); the loop takes the results (`taken`) between two messages.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass

from monarch_pdb import wire

PY_SPY_TIMEOUT = 5.0
"""Seconds py-spy gets to read one process."""


class CannotRead(Exception):
    """Why a process's stack cannot be read from outside, in a few words."""


@dataclass(frozen=True)
class Read:
    """The outcome of reading one process for a request: its threads, or why not."""

    ref: int
    peer: bytes
    threads: list[wire.ThreadStack] | None
    why: str = ""


def read(pid: int, every_thread: bool) -> list[wire.ThreadStack]:
    """The Python stacks of process `pid`'s threads (its main thread's alone unless
    `every_thread`), outermost frame first; CannotRead with why."""
    try:
        threads = _unwound(pid)
    except CannotRead:
        threads = _py_spy(pid)
    if not every_thread:
        threads = [t for t in threads if t[0]][:1] or threads[:1]
    return [stack for _, stack in threads]


def _unwound(pid: int) -> list[tuple[bool, wire.ThreadStack]]:
    """The standard library's remote unwinder (3.14+), whose answers' shape changes between
    releases: a process of another Python, or a shape not known here, is left to py-spy."""
    try:
        import _remote_debugging  # type: ignore[import-not-found]

        trace = _remote_debugging.RemoteUnwinder(pid, all_threads=True).get_stack_trace()
        threads = [t for item in trace for t in getattr(item, "threads", [item])]
        found = []
        for thread in threads:
            frames = [
                wire.Frame(f.filename, getattr(f, "lineno", None) or f.location.lineno, f.funcname)
                for f in reversed(thread.frame_info)
            ]
            found.append((thread.thread_id == pid, wire.ThreadStack(f"thread {thread.thread_id}", frames)))
        return found
    except Exception as error:
        raise CannotRead(str(error)) from None


def _py_spy(pid: int) -> list[tuple[bool, wire.ThreadStack]]:
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.access(spy, os.X_OK):
        raise CannotRead("py-spy is not installed (pip install monarch-pdb[outside])")
    try:
        done = subprocess.run(
            [spy, "dump", "--pid", str(pid), "--json"], capture_output=True, text=True, timeout=PY_SPY_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise CannotRead(f"py-spy did not read it within {PY_SPY_TIMEOUT:g} s") from None
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()]
        raise CannotRead(f"py-spy: {said[-1] if said else f'exit {done.returncode}'}")
    return [
        (
            thread.get("os_thread_id") == pid,
            wire.ThreadStack(
                thread.get("thread_name") or f"thread {thread.get('thread_id')}",
                [wire.Frame(f["filename"], f["line"], f["name"]) for f in reversed(thread["frames"])],
            ),
        )
        for thread in json.loads(done.stdout)
    ]


class OutsideReads:
    """Reads on a thread, their results queued for the broker's loop."""

    def __init__(self) -> None:
        self._woken, self._wake = os.pipe()
        os.set_blocking(self._woken, False)
        os.set_blocking(self._wake, False)
        self._done: queue.SimpleQueue[Read] = queue.SimpleQueue()

    def fileno(self) -> int:
        """Readable once a read is done."""
        return self._woken

    def start(self, ref: int, processes: list[tuple[bytes, int]], every_thread: bool) -> None:
        """Read each (peer, pid) for request `ref`."""
        threading.Thread(
            target=self._read, args=(ref, processes, every_thread), name="outside reads", daemon=True
        ).start()

    def _read(self, ref: int, processes: list[tuple[bytes, int]], every_thread: bool) -> None:
        for peer, pid in processes:
            try:
                self._done.put(Read(ref, peer, read(pid, every_thread)))
            except CannotRead as why:
                self._done.put(Read(ref, peer, None, str(why)))
            try:
                os.write(self._wake, b"!")
            except OSError:
                pass  # the loop has yet to read earlier wake-ups (it takes this one too), or it closed

    def taken(self) -> list[Read]:
        """The reads done since the last call."""
        try:
            os.read(self._woken, 4096)
        except BlockingIOError:
            pass
        found = []
        while True:
            try:
                found.append(self._done.get_nowait())
            except queue.Empty:
                return found

    def close(self) -> None:
        os.close(self._woken)
        os.close(self._wake)
