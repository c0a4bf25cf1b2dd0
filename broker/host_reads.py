"""Stacks read from outside the processes of this host (monarch_pdb.outside), for ranks whose
rank process has not answered `stacks` a moment after it was asked, and for every rank when native
frames are asked for.

A read takes tens of milliseconds, so reads run on threads of their own, a few processes at
once, and tell the broker's loop through a pipe it polls (`fileno`); the loop takes the results
(`taken`) between two messages. One process is read by one py-spy at a time: a second, which
cannot stop a process the first holds stopped, would fail (two shells' `stacks`, or a shell's
and the stall watcher's, asking at once).
"""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from monarch_pdb import outside
from monarch_pdb.broker.inflight import below_timeout


@dataclass(frozen=True)
class Read:
    """The outcome of reading one process for a request: its threads and locals, or why not."""

    ref: int
    peer: bytes
    found: outside.Outside | None
    why: str = ""


@dataclass(frozen=True)
class Asked:
    """How a request wants its processes read, and by when (time.monotonic) it must answer:
    py-spy gets what is left of that."""

    every_thread: bool
    native: bool
    locals: bool
    deadline: float = math.inf


class OutsideReads:
    """Reads on a few threads, their results queued for the broker's loop; py-spy gets
    `read_timeout` seconds a process (scaled: `outside.time_limit`), or what is left of the
    request's time if less."""

    def __init__(self, read_timeout: float) -> None:
        self._read_timeout = read_timeout
        self._woken, self._wake = os.pipe()
        os.set_blocking(self._woken, False)
        os.set_blocking(self._wake, False)
        self._done: queue.SimpleQueue[Read] = queue.SimpleQueue()
        self._pool = ThreadPoolExecutor(outside.READS_AT_ONCE, thread_name_prefix="outside read")
        self._reading: set[int] = set()
        """The pids being read now."""
        self._turn = threading.Condition()

    def fileno(self) -> int:
        """Readable once a read is done."""
        return self._woken

    def start(self, ref: int, processes: list[tuple[bytes, int]], asked: Asked) -> None:
        """Read each (peer, pid) for request `ref`."""
        limit = outside.time_limit(self._read_timeout, len(processes), asked.native)
        for peer, pid in processes:
            self._pool.submit(self._read_one, ref, peer, pid, asked, limit)

    def _read_one(self, ref: int, peer: bytes, pid: int, asked: Asked, limit: float) -> None:
        with self._turn:
            self._turn.wait_for(lambda: pid not in self._reading, max(0.0, asked.deadline - time.monotonic()))
            left = asked.deadline - time.monotonic()
            if left <= 0 or pid in self._reading:
                return  # past the request's time: it was answered without this read
            self._reading.add(pid)
        try:
            found = outside.read(pid, asked.every_thread, asked.native, asked.locals, min(limit, below_timeout(left)))
            self._done.put(Read(ref, peer, found))
        except outside.CannotRead as why:
            self._done.put(Read(ref, peer, None, str(why)))
        finally:
            with self._turn:
                self._reading.discard(pid)
                self._turn.notify_all()
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
        self._pool.shutdown(wait=False, cancel_futures=True)
        os.close(self._woken)
        os.close(self._wake)
