"""monarch-pdb: pdb for programs that run as many processes at once.

This package is the agent, the part that lives inside every rank. `breakpoint()` reaches it
through `sys.breakpointhook` (see `install`) or `PYTHONBREAKPOINT=monarch_pdb.set_trace`.
"""

from __future__ import annotations

import sys

from monarch_pdb import identity
from monarch_pdb.endpoint import endpoint_call

__version__ = "0.1.0"
__all__ = ["endpoint_call", "install", "set_identity", "set_trace"]


def set_trace(*, header: str | None = None) -> None:
    """Pause the calling frame in a session of the broker, stopping at its next line."""
    from monarch_pdb import debugger

    debugger.set_trace(sys._getframe(1), header=header)


def install(*, announce: bool = True) -> None:
    """Route `breakpoint()` in this process to the broker, and make the process known to it
    from now on, running or not, so `list --all`, `stacks` and `interrupt` reach it. The process
    is a rank of its own (see `set_identity`) unless `announce` is False: a mesh runtime then
    names the ranks it runs as their endpoint calls start."""
    from monarch_pdb import interrupt
    from monarch_pdb.agent import Agent

    sys.breakpointhook = set_trace
    agent = Agent.get()
    interrupt.arm()
    if announce:
        agent.host_self()


def set_identity(*, actor: str | None = None, rank: int | None = None,
                 coords: dict[str, int] | None = None, job: str | None = None) -> None:
    """Name this process's sessions explicitly; overrides every detected value given."""
    from monarch_pdb.agent import Agent

    identity.set_identity(actor=actor, rank=rank, coords=coords, job=job)
    agent = Agent.existing()
    if agent is not None:
        agent.renamed()
