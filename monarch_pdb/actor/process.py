"""A worker process seen from the parent that started it: starting it, sending it requests,
routing its replies to futures, and making sure it ends when the parent does."""

from __future__ import annotations

import atexit
import concurrent.futures
import pickle
import queue
import signal
import sys
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from monarch_pdb.actor import transport
from monarch_pdb.actor.errors import RankError, WorkerExited
from monarch_pdb.actor.future import Future
from monarch_pdb.actor.messages import Reply, StopWorker
from monarch_pdb.actor.point import Point, format_coords

if TYPE_CHECKING:
    from monarch_pdb.actor.forkserver import Forked, ForkServer

STOP_GRACE = 2.0  # seconds a stopping worker gets to finish its call before it is killed

_STOP = transport.dumps(StopWorker(), "StopWorker")
_live: set[WorkerProcess] = set()
_live_lock = threading.Lock()
_launches: queue.SimpleQueue | None = None
_launches_lock = threading.Lock()


class WorkerProcess:
    def __init__(self, point: Point) -> None:
        self.point = point
        conn, theirs = transport.socket_pair()
        try:
            self._worker = _launch(theirs.fileno())
        finally:
            theirs.close()
        self._conn = conn
        self._lock = threading.Lock()
        self._waiting: dict[int, Future] = {}
        self._gone: str | None = None
        self._stopping = False
        with _live_lock:
            _live.add(self)
        threading.Thread(target=self._read, name=f"monarch_pdb.actor rank {point.rank}", daemon=True).start()

    def request(self, call_id: int, data: bytes, future: Future) -> None:
        """Send an encoded request whose reply completes this rank's part of `future`."""
        with self._lock:
            reason = self._gone
            if reason is None:
                self._waiting[call_id] = future
                try:
                    self._conn.send_bytes(data)
                    return
                except OSError as exc:
                    del self._waiting[call_id]
                    reason = f"{self._name()} could not be reached: {exc}"
        future.deliver(self.point.rank, error=self._exited(reason))

    def ask_to_stop(self) -> None:
        self._stopping = True
        with self._lock:
            if self._gone is None:
                try:
                    self._conn.send_bytes(_STOP)
                except OSError:
                    pass

    def end_by(self, deadline: float) -> None:
        """Wait for the worker to exit until the deadline, then kill it."""
        try:
            self._worker.wait(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self._worker.kill()
            self._worker.wait()

    def _read(self) -> None:
        try:
            while True:
                reply: Reply = transport.receive(self._conn)
                with self._lock:
                    future = self._waiting.pop(reply.call_id, None)
                if future is not None:
                    future.deliver(self.point.rank, *self._outcome(reply))
        except (EOFError, OSError):
            pass
        reason = self._exit_reason()
        with self._lock:
            self._gone = reason
            waiting, self._waiting = self._waiting, {}
        self._conn.close()
        with _live_lock:
            _live.discard(self)
        if not self._stopping:
            print(f"monarch_pdb.actor: {reason}", file=sys.stderr, flush=True)
        for future in waiting.values():
            future.deliver(self.point.rank, error=self._exited(reason))

    def _outcome(self, reply: Reply) -> tuple[Any, RankError | None]:
        if reply.error is not None:
            try:
                exception = pickle.loads(reply.payload) if reply.payload else None
            except Exception:
                exception = None
            return None, replace(reply.error, exception=exception)
        try:
            return pickle.loads(reply.payload), None
        except Exception as exc:
            message = f"the result of rank {self.point.rank} cannot be unpickled here: {exc}"
            return None, RankError(self.point.rank, self.point.coords, type(exc).__name__, message, "", exc)

    def _exit_reason(self) -> str:
        try:
            code = self._worker.wait(timeout=STOP_GRACE)
        except TimeoutError:
            return f"{self._name()} closed its connection"
        if code < 0:
            try:
                return f"{self._name()} was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"{self._name()} was killed by signal {-code}"
        return f"{self._name()} exited with code {code}"

    def _exited(self, reason: str) -> RankError:
        return RankError(self.point.rank, self.point.coords, "WorkerExited", reason, "", WorkerExited(reason))

    def _name(self) -> str:
        where = f" ({format_coords(self.point.coords)})" if self.point.coords else ""
        return f"worker of rank {self.point.rank}{where}, pid {self._worker.pid},"


def stop_workers(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        worker.ask_to_stop()
    deadline = time.monotonic() + STOP_GRACE
    for worker in workers:
        worker.end_by(deadline)


def _stop_all() -> None:
    with _live_lock:
        workers = list(_live)
    stop_workers(workers)


def _launch(fd: int) -> Forked:
    """Start a worker from one thread that lives as long as this process: PR_SET_PDEATHSIG
    fires when the *thread* that started a child ends, and the fork server that starts every
    worker is that thread's child, so a short-lived caller thread would take the workers down
    with it."""
    global _launches
    with _launches_lock:
        if _launches is None:
            _launches = queue.SimpleQueue()
            threading.Thread(
                target=_serve_launches, args=(_launches,), name="monarch_pdb.actor launcher", daemon=True
            ).start()
            atexit.register(_stop_all)
    started: concurrent.futures.Future[Forked] = concurrent.futures.Future()
    _launches.put((fd, started))
    return started.result()


def _serve_launches(launches: queue.SimpleQueue) -> None:
    # Imported here: `python -m monarch_pdb.actor.forkserver` runs it as __main__ after this
    # package's imports, which must not have imported it first.
    from monarch_pdb.actor.forkserver import ForkServer

    server: ForkServer | None = None
    while True:
        fd, started = launches.get()
        try:
            server = server or ForkServer()
            started.set_result(server.fork(fd))
        except Exception as exc:
            started.set_exception(exc)
