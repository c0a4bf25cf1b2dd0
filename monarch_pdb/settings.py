"""Settings shared by rank process, broker and shell, and the names a process is given.

Every value comes from the environment (the guide's MONARCH_DEBUG_SERVER_* and our own
MONARCH_PDB_*), and a command-line flag may override it; the names of a rank come from ours and
from its launcher's variables (`naming`). Nothing else reads os.environ.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 27000
DEFAULT_PAGER = "less -FRX"
DEFAULT_READ_TIMEOUT = 5.0


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        raise SystemExit(f"monarch-pdb: {name} must be a number, not {raw!r}") from None


def _env_count(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "")
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit()):
        raise SystemExit(f"monarch-pdb: {name} must be a whole number, not {raw!r}")
    return int(raw)


def _env_port(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "")
    if not raw:
        return default
    if not raw.isdigit() or int(raw) > 65535:
        raise SystemExit(f"monarch-pdb: {name} must be a port number (0-65535), not {raw!r}")
    return int(raw)


def default_runtime_dir(environ: Mapping[str, str]) -> str:
    """A per-user directory for connection files: XDG runtime dir, else one under /tmp."""
    base = environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base):
        return os.path.join(base, "monarch-pdb")
    return os.path.join("/tmp", f"monarch-pdb-{os.getuid()}")


@dataclass(frozen=True)
class Settings:
    """Every setting of every part, from the environment with its defaults; flags override
    them with `replace`."""

    host: str
    port: int
    runtime_dir: str
    secret: str | None
    secret_file: str | None
    broker_idle_exit: float
    connect_timeout: float
    heartbeat_interval: float
    give_up_after: float
    post_mortem: str
    history_file: str
    session_history: int
    max_message: int
    max_sessions_per_connection: int
    max_age: float
    curve: bool
    collective_timeout: float
    list_rows: int
    pager: str
    """The shell's pager command for long output; "" or "cat" for none."""
    upstream: str = ""
    """HOST:PORT of the broker above this one (a broker's own setting; empty for none)."""
    editor_threads: int = 1024
    """The most paused ranks an editor is shown as threads (`monarch-pdb dap`)."""
    stall_after: float = 60.0
    """Seconds a running rank's stack may stay the same before the broker tells the shells that
    it has stalled (0: never look)."""
    read_timeout: float = DEFAULT_READ_TIMEOUT
    """Seconds py-spy gets to read one process from outside, with a core to itself (more for
    native frames, and when several reads share a core)."""
    gdb: str = ""
    """The gdb `join --wake` runs (empty: the one installed beside this Python by the `wake`
    extra, else gdb on PATH)."""
    colour: bool = True
    """Whether the shell shows pdb's colours at a terminal until `set color` says otherwise: not
    where NO_COLOR is set, PYTHON_COLORS is 0 (Python's own switch) or TERM is dumb."""

    def with_overrides(self, **changes: Any) -> Settings:
        """Apply command-line flags; a flag left at None keeps the environment's value."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclass(frozen=True)
class Naming:
    """What the environment says about who this process is (identity.py decides): read on
    each use, since an engine may set it after start-up (MONARCH_PDB_JOB in a Monarch proc)."""

    job: str
    """MONARCH_PDB_JOB, or empty."""
    actor: str
    """MONARCH_PDB_ACTOR, or empty."""
    launcher: Mapping[str, str]
    """The variables a launcher sets (torchrun's RANK, Slurm's, Open MPI's, PMI's)."""


def naming(environ: Mapping[str, str] | None = None) -> Naming:
    """The names `environ` (this process's environment unless given) gives this process."""
    env = os.environ if environ is None else environ
    return Naming(job=env.get("MONARCH_PDB_JOB", ""), actor=env.get("MONARCH_PDB_ACTOR", ""), launcher=env)


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from `environ` (this process's environment unless given)."""
    env = os.environ if environ is None else environ
    return Settings(
        host=env.get("MONARCH_DEBUG_SERVER_HOST") or DEFAULT_HOST,
        port=_env_port(env, "MONARCH_DEBUG_SERVER_PORT", DEFAULT_PORT),
        runtime_dir=env.get("MONARCH_PDB_RUNTIME_DIR") or default_runtime_dir(env),
        secret=env.get("MONARCH_PDB_SECRET") or None,
        secret_file=env.get("MONARCH_PDB_SECRET_FILE") or None,
        broker_idle_exit=_env_float(env, "MONARCH_PDB_BROKER_IDLE_EXIT", 300.0),
        connect_timeout=_env_float(env, "MONARCH_PDB_CONNECT_TIMEOUT", 5.0),
        heartbeat_interval=_env_float(env, "MONARCH_PDB_HEARTBEAT", 1.0),
        give_up_after=_env_float(env, "MONARCH_PDB_GIVE_UP_AFTER", 0.0),
        post_mortem=env.get("MONARCH_PDB_POST_MORTEM", "after-breakpoint"),
        history_file=env.get("MONARCH_PDB_HISTORY", os.path.join(os.path.expanduser("~"), ".monarch_pdb_history")),
        session_history=int(_env_float(env, "MONARCH_PDB_SESSION_HISTORY", 1024 * 1024)),
        max_message=int(_env_float(env, "MONARCH_PDB_MAX_MESSAGE", 8 * 1024 * 1024)),
        max_sessions_per_connection=int(_env_float(env, "MONARCH_PDB_MAX_SESSIONS_PER_CONNECTION", 65536)),
        max_age=_env_float(env, "MONARCH_PDB_MAX_AGE", 600.0),
        curve=env.get("MONARCH_PDB_CURVE", "").lower() in ("1", "true", "yes", "on"),
        collective_timeout=_env_float(env, "MONARCH_PDB_COLLECTIVE_TIMEOUT", 3600.0),
        list_rows=_env_count(env, "MONARCH_PDB_LIST_ROWS", 40),
        pager=env["MONARCH_PDB_PAGER"] if "MONARCH_PDB_PAGER" in env else env.get("PAGER", DEFAULT_PAGER),
        upstream=upstream_address(env.get("MONARCH_PDB_UPSTREAM", ""), "MONARCH_PDB_UPSTREAM"),
        editor_threads=_env_count(env, "MONARCH_PDB_DAP_THREADS", 1024),
        stall_after=_env_float(env, "MONARCH_PDB_STALL_AFTER", 60.0),
        read_timeout=_env_float(env, "MONARCH_PDB_READ_TIMEOUT", DEFAULT_READ_TIMEOUT),
        gdb=env.get("MONARCH_PDB_GDB", ""),
        colour=not env.get("NO_COLOR") and env.get("PYTHON_COLORS") != "0" and env.get("TERM") != "dumb",
    )


def upstream_address(raw: str, name: str) -> str:
    """HOST:PORT of a broker above, checked; "" for none."""
    if not raw:
        return ""
    host, _, port = raw.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise SystemExit(f"monarch-pdb: {name} must be HOST:PORT (the broker above), not {raw!r}")
    return raw
