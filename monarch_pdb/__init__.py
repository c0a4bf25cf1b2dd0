"""monarch-pdb: pdb for programs that run as many processes at once.

A program calls these entry points; the agent they start, which lives inside every rank, is
`monarch_pdb.rank`. What every part shares (the wire, `ranks(...)`, settings) sits beside it.
"""

from __future__ import annotations

from monarch_pdb.rank import identity
from monarch_pdb.rank.endpoint import endpoint_call
from monarch_pdb.rank.hooks import install, set_trace

__version__ = "0.1.0"
__all__ = ["endpoint_call", "install", "set_identity", "set_trace"]


def set_identity(
    *, actor: str | None = None, rank: int | None = None, coords: dict[str, int] | None = None, job: str | None = None
) -> None:
    """Name this process's sessions explicitly; overrides every detected value given."""
    from monarch_pdb.rank.agent import Agent

    identity.set_identity(actor=actor, rank=rank, coords=coords, job=job)
    agent = Agent.existing()
    if agent is not None:
        agent.presence.renamed()


def load_ipython_extension(ipython) -> None:
    """`%load_ext monarch_pdb`: the magics `%monarch_debug` and `%%monarch_debug`, which run the
    debugger shell's commands in a notebook. Only IPython calls this, so only IPython needs it."""
    from monarch_pdb.client.notebook import register

    register(ipython)
