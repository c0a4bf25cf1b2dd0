"""Worker processes laid out as a mesh; actors are spawned on it."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from monarch_pdb.actor import main_module, transport
from monarch_pdb.actor.actor_mesh import ActorMesh
from monarch_pdb.actor.endpoint import Actor
from monarch_pdb.actor.future import Future
from monarch_pdb.actor.messages import Boot, Call, Spawn, next_call_id
from monarch_pdb.actor.point import Extent, Point
from monarch_pdb.actor.process import WorkerProcess, stop_workers
from monarch_pdb.rank import identity

T = TypeVar("T")

_next_actor_id = itertools.count(1).__next__


class ProcMesh:
    def __init__(self, extent: Extent, workers: list[WorkerProcess]) -> None:
        self.extent = extent
        self._workers = workers
        self._stopped = False

    @classmethod
    def start(cls, extent: Extent) -> ProcMesh:
        """Start one worker per rank and wait until each has loaded the main script."""
        os.environ.setdefault("MONARCH_PDB_JOB", identity.job_name())
        main = main_module.share()
        mesh = cls(extent, [WorkerProcess(extent.point(rank)) for rank in range(extent.size)])
        call_id = next_call_id()
        future = Future("spawn_procs", [worker.point for worker in mesh._workers], _nothing)
        for worker in mesh._workers:
            boot = Boot(call_id, worker.point, main, list(sys.path), list(sys.argv))
            worker.request(call_id, transport.dumps(boot, "Boot"), future)
        try:
            future.get()
        except BaseException:
            mesh.stop()
            raise
        return mesh

    def spawn(self, name: str, cls: type[Actor], *args: Any, **kwargs: Any) -> ActorMesh:
        """One instance of `cls` per rank, constructed with these arguments; waits for every
        constructor and raises ActorError naming the ranks whose constructor failed."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"an actor mesh needs a non-empty name, not {name!r}")
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise TypeError(f"spawn() needs a subclass of monarch_pdb.actor.Actor, not {cls!r}")
        actor_id = _next_actor_id()
        payload = transport.dumps((cls, args, kwargs), f"{cls.__qualname__} and its constructor arguments")
        ranks = tuple(range(self.extent.size))
        self.request(f"{name}.__init__", Spawn(next_call_id(), actor_id, name, payload), ranks, _nothing).get()
        return ActorMesh(self, name, cls, actor_id, ranks)

    def request(
        self, call: str, message: Spawn | Call, ranks: Iterable[int], combine: Callable[[list[tuple[Point, Any]]], T]
    ) -> Future[T]:
        """Send one message to these ranks; `combine` turns their answers into the result."""
        if self._stopped:
            raise RuntimeError(f"{call}: this proc mesh was stopped")
        ranks = tuple(ranks)
        future = Future(call, [self.extent.point(rank) for rank in ranks], combine)
        data = transport.dumps(message, f"the arguments of {call}")
        for rank in ranks:
            self._workers[rank].request(message.call_id, data, future)
        return future

    def stop(self) -> None:
        """End every worker: each finishes its current call, or is killed after a short grace."""
        self._stopped = True
        stop_workers(self._workers)

    def __repr__(self) -> str:
        return f"ProcMesh({self.extent})"


def _nothing(pairs: list[tuple[Point, Any]]) -> None:
    return None
