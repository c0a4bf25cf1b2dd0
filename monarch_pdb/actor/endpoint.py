"""What user classes are made of: the `Actor` base class and the `@endpoint` mark."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_MARK = "_monarch_pdb_endpoint"


class Actor:
    """Base of classes that live as one instance per rank of a proc mesh."""


def endpoint(method: F) -> F:
    """Make a sync or async method callable through an actor mesh; the method itself is untouched,
    so the debugger shows its real source and the actor can still call it directly."""
    if not callable(method):
        raise TypeError(f"@endpoint decorates a method, not {method!r}")
    setattr(method, _MARK, True)
    return method


def is_endpoint(cls: type, name: str) -> bool:
    return bool(getattr(getattr(cls, name, None), _MARK, False))
