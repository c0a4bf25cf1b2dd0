"""Who a paused session belongs to: job, actor, rank, coordinates, host, pid.

Providers are asked most specific first: an identity set explicitly by the program, the
endpoint call the embedded mesh runtime is running, the environment of common launchers,
and finally the bare process.
"""

from __future__ import annotations

import contextvars
import os
import socket
import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Identity:
    job: str
    actor: str
    rank: int
    coords: dict[str, int] = field(default_factory=dict)
    hostname: str = ""
    pid: int = 0


@dataclass
class CallContext:
    """The endpoint call a thread or task is running, as the mesh runtime announces it.

    `session` is the debug session its first breakpoint opened; it lives until the call ends.
    """

    actor: str
    rank: int
    coords: dict[str, int]
    session: Any = None


current_call: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "monarch_pdb_current_call", default=None
)

_explicit: dict[str, object] = {}


def set_identity(*, actor: str | None = None, rank: int | None = None,
                 coords: dict[str, int] | None = None, job: str | None = None) -> None:
    """Name this process's sessions explicitly; overrides every detected value given."""
    for key, value in (("actor", actor), ("rank", rank), ("coords", coords), ("job", job)):
        if value is not None:
            _explicit[key] = value


def job_name() -> str:
    """MONARCH_PDB_JOB, else the main script's name and this process's pid."""
    named = os.environ.get("MONARCH_PDB_JOB")
    if named:
        return named
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    stem = os.path.splitext(script)[0] or "python"
    return f"{stem}-{os.getpid()}"


def _script_actor_name() -> str:
    named = os.environ.get("MONARCH_PDB_ACTOR")
    if named:
        return named
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return os.path.splitext(script)[0] or "python"


def _first_int(*names: str) -> int | None:
    for name in names:
        raw = os.environ.get(name, "")
        if raw.isdigit():
            return int(raw)
    return None


def _launcher_rank_and_coords() -> tuple[int, dict[str, int]] | None:
    """Rank and {host, gpu} coordinates from torchrun, Slurm or MPI variables."""
    rank = _first_int("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
    if rank is None:
        return None
    host = _first_int("GROUP_RANK", "SLURM_NODEID", "OMPI_COMM_WORLD_NODE_RANK")
    local = _first_int("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
    coords = {"host": host, "gpu": local} if host is not None and local is not None else {}
    return rank, coords


def current() -> Identity:
    """The identity of the session that is about to open in the calling thread or task."""
    call = current_call.get()
    if call is not None:
        actor, rank, coords = call.actor, call.rank, dict(call.coords)
    else:
        launched = _launcher_rank_and_coords()
        actor = _script_actor_name()
        rank, coords = launched if launched is not None else (os.getpid(), {})
    return Identity(
        job=str(_explicit.get("job", job_name())),
        actor=str(_explicit.get("actor", actor)),
        rank=int(_explicit.get("rank", rank)),  # type: ignore[arg-type]
        coords=dict(_explicit.get("coords", coords)),  # type: ignore[arg-type]
        hostname=socket.gethostname(),
        pid=os.getpid(),
    )
