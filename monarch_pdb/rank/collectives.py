"""torch.distributed's collective timeout, raised when a rank of a torch job stops.

A rank paused in the debugger leaves its peers waiting in their next collective, and the
process group's timeout (30 minutes for gloo by default, often set far lower) would end them.
Like `torch.distributed.breakpoint`, the first stop raises the timeout of every process group
of the process and leaves it raised: a rank that was continued may still wait for a peer that
is paused, and no rank can tell when the last one goes on.
"""

from __future__ import annotations

import sys
from datetime import timedelta

from monarch_pdb import settings


def raise_timeouts() -> None:
    """Give every process group of this process MONARCH_PDB_COLLECTIVE_TIMEOUT; a no-op when
    torch.distributed is not in use (it is never imported for this)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    timeout = timedelta(seconds=settings.load().collective_timeout)
    c10d = dist.distributed_c10d
    for group in list(c10d._pg_map):
        c10d._set_pg_timeout(timeout, group)
