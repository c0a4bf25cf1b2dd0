"""monarch-pdb: pdb for programs that run as many processes at once.

A program calls these entry points; the rank process they start, which lives inside every rank, is
`monarch_pdb.rank`. What every part shares (the wire, `ranks(...)`, settings) sits beside it.

Users leave it installed in every job, so importing it costs what a bare interpreter does: each
entry point loads what it needs when first called (`install` the rank process, ZeroMQ and msgpack; the
first stop pdb), and `endpoint_call` is loaded on first use, then is the real one.
"""

from __future__ import annotations

from monarch_pdb.rank.breakpoint_hook import pm, post_mortem, set_trace

TYPE_CHECKING = False
"""typing's own costs a fifth of a bare interpreter's start; type checkers read this one as True."""
if TYPE_CHECKING:
    from typing import Any

    from monarch_pdb.rank.endpoint_call import endpoint_call

__version__ = "0.1.0"
__all__ = ["endpoint_call", "install", "pm", "post_mortem", "set_identity", "set_trace"]


def install(*, announce: bool = True) -> None:
    """Route `breakpoint()` and `pdb.set_trace()` to the broker, and uncaught exceptions to
    post-mortem as MONARCH_PDB_POST_MORTEM says (see monarch_pdb.rank.hooks.install)."""
    from monarch_pdb.rank import hooks

    hooks.install(announce=announce)


def set_identity(
    *, actor: str | None = None, rank: int | None = None, coords: dict[str, int] | None = None, job: str | None = None
) -> None:
    """Name this process's sessions explicitly; overrides every detected value given."""
    from monarch_pdb.rank import identity
    from monarch_pdb.rank.endpoint_call import rank_process_if_started

    identity.set_identity(actor=actor, rank=rank, coords=coords, job=job)
    rank_process = rank_process_if_started()
    if rank_process is not None:
        rank_process.presence.renamed()


def __getattr__(name: str) -> Any:
    """`endpoint_call`, loaded on first use (a runtime calls it around every call of every rank,
    so it is the real one from then on, not a wrapper)."""
    if name != "endpoint_call":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from monarch_pdb.rank.endpoint_call import endpoint_call

    globals()[name] = endpoint_call
    return endpoint_call


def load_ipython_extension(ipython) -> None:
    """`%load_ext monarch_pdb`: the magics `%monarch_debug` and `%%monarch_debug`, which run the
    debugger shell's commands in a notebook. Only IPython calls this, so only IPython needs it."""
    from monarch_pdb.client.notebook import register

    register(ipython)
