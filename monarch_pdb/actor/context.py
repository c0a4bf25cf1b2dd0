"""Which rank the running endpoint belongs to, per thread and per asyncio task."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from monarch_pdb.actor.point import Point

_running: contextvars.ContextVar[Point | None] = contextvars.ContextVar("monarch_pdb_actor_point", default=None)


def current_rank() -> Point:
    """The point of the rank whose endpoint (or constructor) is running here."""
    point = _running.get()
    if point is None:
        raise RuntimeError(
            "current_rank() only works inside an actor's endpoint or constructor, running in a worker of a proc mesh"
        )
    return point


@contextmanager
def running_at(point: Point) -> Iterator[None]:
    token = _running.set(point)
    try:
        yield
    finally:
        _running.reset(token)
