"""A handle on one actor per rank: endpoint calls and slicing by dimension."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from monarch_pdb.actor import transport
from monarch_pdb.actor.endpoint import is_endpoint
from monarch_pdb.actor.errors import ActorError
from monarch_pdb.actor.future import Future
from monarch_pdb.actor.messages import Call, next_call_id
from monarch_pdb.actor.point import Extent, Point
from monarch_pdb.actor.value_mesh import ValueMesh

if TYPE_CHECKING:
    from monarch_pdb.actor.proc_mesh import ProcMesh

T = TypeVar("T")


class ActorMesh:
    """`mesh.<endpoint>` gives a MeshEndpoint; `mesh.slice(host=1)` narrows the ranks."""

    def __init__(self, procs: ProcMesh, name: str, cls: type, actor_id: int, ranks: tuple[int, ...]) -> None:
        self.name = name
        self.ranks = ranks
        self._procs = procs
        self._cls = cls
        self._actor_id = actor_id

    @property
    def extent(self) -> Extent:
        return self._procs.extent

    def slice(self, **selectors: int | slice) -> ActorMesh:
        """The ranks whose coordinates match, e.g. `slice(host=1)`, `slice(host=slice(0, 2), gpu=1)`."""
        ranks = self.extent.select(self.ranks, selectors)
        return ActorMesh(self._procs, self.name, self._cls, self._actor_id, ranks)

    def __getattr__(self, name: str) -> MeshEndpoint:
        if name.startswith("_"):
            raise AttributeError(name)
        if not is_endpoint(self._cls, name):
            problem = "is not marked @endpoint" if hasattr(self._cls, name) else "has no such attribute"
            raise AttributeError(f"{self._cls.__qualname__}.{name} {problem}")
        return MeshEndpoint(self, name)

    def __len__(self) -> int:
        return len(self.ranks)

    def __reduce__(self):
        raise TypeError("an actor mesh belongs to the process that spawned it and cannot be sent to another")

    def __repr__(self) -> str:
        return f"ActorMesh({self.name!r}, {self._cls.__qualname__}, {len(self.ranks)} of {self.extent.size} ranks)"


@dataclass(frozen=True)
class MeshEndpoint:
    """`mesh.name`: one endpoint of every actor of the mesh."""

    mesh: ActorMesh
    name: str

    def call(self, *args: Any, **kwargs: Any) -> Future[ValueMesh]:
        """Every rank's answer, as a ValueMesh."""
        extent = self.mesh.extent
        return self._send(self.mesh.ranks, lambda pairs: ValueMesh(extent, tuple(pairs)), args, kwargs)

    def call_one(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """The answer of a mesh of exactly one rank."""
        if len(self.mesh.ranks) != 1:
            first = ", ".join(f"{label}=0" for label in self.mesh.extent.labels)
            raise ValueError(
                f"call_one() needs a mesh of exactly one rank, but {self.mesh.name} has "
                f"{len(self.mesh.ranks)}; slice it first, e.g. mesh.slice({first})"
            )
        return self._send(self.mesh.ranks, _only_value, args, kwargs)

    def choose(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """The answer of one rank picked at random."""
        return self._send((random.choice(self.mesh.ranks),), _only_value, args, kwargs)

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Call every rank without waiting; failures are reported on stderr."""
        future = self._send(self.mesh.ranks, lambda pairs: None, args, kwargs)
        future.when_done(lambda: _report_failure(future))

    def _send(
        self, ranks: tuple[int, ...], combine: Callable[[list[tuple[Point, Any]]], T], args: tuple, kwargs: dict
    ) -> Future[T]:
        call = f"{self.mesh.name}.{self.name}"
        payload = transport.dumps((args, kwargs), f"the arguments of {call}")
        message = Call(next_call_id(), self.mesh._actor_id, self.name, payload)
        return self.mesh._procs.request(call, message, ranks, combine)


def _only_value(pairs: list[tuple[Point, Any]]) -> Any:
    return pairs[0][1]


def _report_failure(future: Future) -> None:
    try:
        future.get()
    except ActorError as exc:
        print(f"monarch_pdb.actor: broadcast failed: {exc}", file=sys.stderr, flush=True)
