"""The scope of one endpoint call, as announced by a mesh runtime.

A session opened by a breakpoint inside the scope lives until the scope exits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from monarch_pdb.identity import CallContext, current_call


@contextmanager
def endpoint_call(actor: str, rank: int, coords: dict[str, int]) -> Iterator[CallContext]:
    call = CallContext(actor=actor, rank=rank, coords=dict(coords))
    token = current_call.set(call)
    try:
        yield call
    finally:
        current_call.reset(token)
