"""Every message between a parent and its workers.

Arguments, return values and exceptions travel as separately pickled payloads, so a payload
that fails to unpickle fails only its own call, and a call's arguments are pickled once for
all ranks.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from monarch_pdb.actor.errors import RankError
from monarch_pdb.actor.main_module import MainSource
from monarch_pdb.actor.point import Point

next_call_id = itertools.count(1).__next__


@dataclass(frozen=True)
class Boot:
    """First message to a new worker: who it is and how to look like its parent."""

    call_id: int
    point: Point
    main: MainSource
    sys_path: list[str]
    argv: list[str]


@dataclass(frozen=True)
class Spawn:
    """Construct an actor; the payload pickles (cls, args, kwargs)."""

    call_id: int
    actor_id: int
    name: str
    payload: bytes


@dataclass(frozen=True)
class Call:
    """Run an endpoint; the payload pickles (args, kwargs)."""

    call_id: int
    actor_id: int
    endpoint: str
    payload: bytes


@dataclass(frozen=True)
class StopWorker:
    """Finish the current call, then exit."""


@dataclass(frozen=True)
class Reply:
    """The answer to Boot, Spawn or Call: a pickled value, or a RankError and the pickled
    exception (empty when the exception does not pickle)."""

    call_id: int
    payload: bytes
    error: RankError | None = None


Request = Boot | Spawn | Call | StopWorker
