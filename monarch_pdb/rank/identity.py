"""Who a paused session belongs to: job, actor, rank, coordinates, host, pid.

Sources are asked most specific first: the endpoint call the embedded mesh runtime is running,
a real Monarch actor's context, a Ray actor or task, the environment of common launchers
(torchrun, Slurm, Open MPI, PMI), and finally the bare process. Whatever the program set with
`set_identity` overrides the detected values it names.

What names the process whatever thread asks (its host, pid, environment, script) is worked out
once (`here`), and the identity of each rank an endpoint call names once: an endpoint call pays
a dictionary look-up for it. Both are worked out again after a fork, `set_identity`, or a
runtime's `renamed`.
"""

from __future__ import annotations

import contextvars
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from monarch_pdb import processes, settings
from monarch_pdb.processes import Detected, program_name


@dataclass(frozen=True)
class Identity:
    """Who a session belongs to, as the broker lists it."""

    job: str
    actor: str
    rank: int
    coords: dict[str, int] = field(default_factory=dict)
    hostname: str = ""
    pid: int = 0
    instance: str = ""


@dataclass(slots=True)
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

_explicit: dict[str, Any] = {}


@dataclass(frozen=True)
class Here:
    """What names this process whatever thread asks, read once (see `here`)."""

    hostname: str
    pid: int
    job: str
    """MONARCH_PDB_JOB, else empty."""
    actor: str
    """The actor a session with no other source is listed under: MONARCH_PDB_ACTOR, else the script's name."""
    stem: str
    """The main script's name, without its suffix."""
    launcher: Detected | None
    """What the launcher's variables say, if a launcher started the process."""


_here: Here | None = None
_of_calls: dict[tuple[str, int], tuple[dict[str, int], Identity]] = {}
"""The identity of each (actor, rank) an endpoint call named, with the coordinates it had."""


def here() -> Here:
    """This process's `Here`, read on first use."""
    global _here
    if _here is None:
        import socket

        stem = _script_stem()
        named = settings.naming()
        _here = Here(
            socket.gethostname(), os.getpid(), named.job, named.actor or stem, stem, from_launcher(named.launcher)
        )
    return _here


def renamed() -> None:
    """Something that names the process changed (`set_identity`, a fork, the job a runtime gives
    it in its environment): work the names out again."""
    global _here
    _here = None
    _of_calls.clear()


os.register_at_fork(after_in_child=renamed)


def set_identity(
    *, actor: str | None = None, rank: int | None = None, coords: dict[str, int] | None = None, job: str | None = None
) -> None:
    """Name this process's sessions explicitly; overrides every detected value given."""
    for key, value in (("actor", actor), ("rank", rank), ("coords", coords), ("job", job)):
        if value is not None:
            _explicit[key] = value
    renamed()


def rank_is_set() -> bool:
    """Whether the program named its rank itself (`set_identity`): an engine of its own may
    run the rank's code on any thread, so no thread is the rank's before one stops as it."""
    return "rank" in _explicit


def _script_stem() -> str:
    return program_name(sys.argv[0] if sys.argv else "")


def job_name(detected: Detected | None = None) -> str:
    """MONARCH_PDB_JOB, else the name the detected launcher gives the whole job (`detected`,
    when the caller has it already), else the main script's name and this process's pid."""
    process = here()
    return process.job or (detected or detect()).job or f"{process.stem}-{process.pid}"


def from_launcher(env: Mapping[str, str]) -> Detected | None:
    """torchrun, Slurm, Open MPI or PMI (MPICH, Intel MPI), in that order, from their variables."""
    stem = _script_stem()
    return processes.from_launcher(
        env, stem, settings.naming().actor or stem, lambda: processes.parent_args(os.getpid())
    )


def in_monarch_proc() -> bool:
    """Whether Monarch's proc bootstrap is this process's main module."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(main_spec, "name", "") == "monarch._src.actor.bootstrap_main"


def from_monarch() -> Detected | None:
    """A real Monarch actor: its name, and rank and coordinates of the message it handles.

    Only in a process Monarch bootstrapped: the client's own context is not an actor's.
    """
    if not in_monarch_proc():
        return None
    from monarch.actor import context

    return monarch_detected(context())


def monarch_detected(ctx: Any) -> Detected:
    """The actor of a Monarch context, with the rank and coordinates of its message."""
    point = ctx.message_rank
    return Detected(ctx.actor_instance.actor_id.actor_name, point.rank, {k: point[k] for k in point})


def from_ray() -> Detected | None:
    """A Ray actor (its class) or task (its function), or an idle worker, in a Ray worker
    process; the rank is the pid unless the program names one with set_identity.

    Asked from a thread that runs no task (the rank process's, announcing the process), Ray names no
    function, so an actor's class comes from its handle.
    """
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    runtime = ray.get_runtime_context()
    function = runtime.get_task_function_name()
    if function is None:
        return None
    job = f"ray-{runtime.get_job_id()}"
    parts = function.split(".")
    actor_id = runtime.get_actor_id()
    if actor_id is not None:
        name = parts[-2] if len(parts) >= 2 else _ray_actor_class(runtime)
        return Detected(name, os.getpid(), {}, job, f"actor {actor_id}")
    if function:
        return Detected(parts[-1], os.getpid(), {}, job, f"task {runtime.get_task_id()}")
    return Detected(here().actor, os.getpid(), {}, job)


def _ray_actor_class(runtime: Any) -> str:
    """The class of this worker's actor, from a private field of its handle that Ray has kept
    since 1.0 (the public API names it only inside a task); "actor" if it is not there."""
    descriptor = getattr(runtime.current_actor, "_ray_actor_creation_function_descriptor", None)
    return getattr(descriptor, "class_name", "") or "actor"


def detect() -> Detected:
    """The most specific source that recognises this thread, or the bare process."""
    call = current_call.get()
    if call is not None:
        return Detected(call.actor, call.rank, dict(call.coords))
    for source in (from_monarch, from_ray):
        found = source()
        if found is not None:
            return found
    process = here()
    return process.launcher or Detected(process.actor, process.pid, {})


def current() -> Identity:
    """The identity of the session that is about to open in the calling thread or task; that of
    an endpoint call's rank is worked out once."""
    call = current_call.get()
    if call is None:
        return _named(detect())
    known = _of_calls.get((call.actor, call.rank))
    if known is None or known[0] != call.coords:
        known = (dict(call.coords), _named(Detected(call.actor, call.rank, dict(call.coords))))
        _of_calls[(call.actor, call.rank)] = known
    return known[1]


def _named(found: Detected) -> Identity:
    """`found`, as this process names it: with its host and pid, and what `set_identity` overrides."""
    process = here()
    return Identity(
        job=str(_explicit["job"] if "job" in _explicit else job_name(found)),
        actor=str(_explicit.get("actor", found.actor)),
        rank=int(_explicit.get("rank", found.rank)),
        coords=dict(_explicit.get("coords", found.coords)),
        hostname=process.hostname,
        pid=process.pid,
        instance=found.instance,
    )
