"""What a process is, from what it shows of itself: the Python it runs, the name its program goes
under, the rank its launcher gave it, the Python processes below it.

A rank asks these of itself (`rank/identity.py`); `join` and `stacks PID` ask them of other
processes through /proc (`client/outside/`). One set of rules serves both, so that `list`,
`join` and `stacks` name a process alike.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

FORK_SERVER = b"monarch_pdb.actor.forkserver"
"""How the fork server of our actor runtime's workers is started (`python -m`)."""
OPTIONS_WITH_VALUES = ("-W", "-X", "--check-hash-based-pycs")
"""Python's options whose value is the next word, which is no script."""


class CannotRead(Exception):
    """Why a process cannot be read from outside (not a Python process, no reader here)."""


@dataclass(frozen=True)
class Detected:
    """What one source knows of a rank; `job` is empty when the source has no name for the
    whole job."""

    actor: str
    rank: int
    coords: dict[str, int] = field(default_factory=dict)
    job: str = ""
    instance: str = ""
    """The engine's own id for the actor or task (Ray's), so a row can be matched with its tools."""


def program_name(script: str) -> str:
    """The name a Python process goes under (its actor, and the start of its job's name), from
    its program as `sys.argv[0]` gives it: the script's file name without its suffix;
    `python-c` for `python -c`, whose `-c` would read as a command's option; `python` for a
    program read from standard input or typed at a prompt."""
    if script == "-c":
        return "python-c"
    stem = os.path.splitext(os.path.basename(script))[0] if script != "-" else ""
    return stem or "python"


def _int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "")
    return int(raw) if raw.isascii() and raw.isdigit() else None


def _host_and_local(env: Mapping[str, str], rank: int, host: str, local: str, local_size: str) -> dict[str, int]:
    """{host, gpu}: the node's index (or rank // ranks per node) and the rank within the node."""
    local_rank, per_node, node = _int(env, local), _int(env, local_size), _int(env, host) if host else None
    if node is None and per_node:
        node = rank // per_node
    return {"host": node, "gpu": local_rank} if node is not None and local_rank is not None else {}


def from_launcher(
    env: Mapping[str, str], stem: str, actor: str, parent_args: Callable[[], list[str]]
) -> Detected | None:
    """torchrun, Slurm, Open MPI or PMI (MPICH, Intel MPI), in that order, from the variables of
    a process whose program is `stem`, named `actor`; `parent_args` gives its parent's command
    line, which alone names a Hydra job."""
    if (rank := _int(env, "RANK")) is not None:
        run = env.get("TORCHELASTIC_RUN_ID", "")
        token = run if run and run != "none" else env.get("MASTER_PORT", "")
        coords = _host_and_local(env, rank, "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
        return Detected(actor, rank, coords, f"{stem}-torchrun-{token}" if token else "")
    if (rank := _int(env, "SLURM_PROCID")) is not None:
        # Slurm sets SLURM_NODEID wherever it sets SLURM_PROCID: the host needs no ranks per node.
        coords = _host_and_local(env, rank, "SLURM_NODEID", "SLURM_LOCALID", "")
        step = env.get("SLURM_STEP_ID", "")
        return Detected(actor, rank, coords, f"{stem}-slurm-{env.get('SLURM_JOB_ID', '')}{'.' + step if step else ''}")
    if (rank := _int(env, "OMPI_COMM_WORLD_RANK")) is not None:
        coords = _host_and_local(env, rank, "", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
        jobid = env.get("OMPI_MCA_ess_base_jobid", "")
        return Detected(actor, rank, coords, f"{stem}-mpi-{jobid}" if jobid else "")
    if (rank := _int(env, "PMI_RANK")) is not None:
        coords = _host_and_local(env, rank, "", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
        kvs = env.get("PMI_KVSNAME", "") or hydra_control_port(parent_args())
        return Detected(actor, rank, coords, f"{stem}-mpi-{kvs}" if kvs else "")
    return None


def hydra_control_port(parent_args: list[str]) -> str:
    """The `host:port` of the mpiexec that started a rank, which all its ranks share: Hydra
    (MPICH, Intel MPI) names the job in no variable; only its proxy, the rank's parent,
    carries the launcher's address on its command line."""
    args = parent_args[:-1]
    return parent_args[args.index("--control-port") + 1] if "--control-port" in args else ""


# --- read from /proc ----------------------------------------------------------------------


def read_proc(pid: int, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read()


def command_line(pid: int) -> list[str]:
    """A process's command's words; OSError when it cannot be read."""
    return [w.decode(errors="replace") for w in read_proc(pid, "cmdline").split(b"\0") if w]


def environment(environ: bytes) -> dict[str, str]:
    """A process's environment as it started, from its /proc `environ`."""
    return dict(item.decode(errors="replace").partition("=")[::2] for item in environ.split(b"\0") if b"=" in item)


def python_of(pid: int) -> tuple[int, int] | None:
    """The Python a process runs, from its executable's name or the libpython it maps; None
    when neither names one (not a Python process, as far as /proc tells)."""
    found: re.Match[str] | re.Match[bytes] | None = re.search(
        r"python(\d+)\.(\d+)", os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    )
    if found is None:
        found = re.search(rb"libpython(\d+)\.(\d+)", read_proc(pid, "maps"))
    return (int(found[1]), int(found[2])) if found is not None else None


def python_version(pid: int) -> tuple[int, int]:
    """The Python a process runs (`python_of`), for what must be a Python process: join and
    `stacks` both refuse any other with this CannotRead."""
    version = python_of(pid)
    if version is None:
        raise CannotRead("not a Python process")
    return version


def program(pid: int) -> str:
    """The name of the program `pid` runs: its command's, or for a program started through the
    dynamic loader (as a gdb shipped in a Python package is), the program the loader runs."""
    words = command_line(pid)
    if words and os.path.basename(words[0]).startswith("ld-linux"):
        words = [w for w in words[1:] if not w.startswith("-")]
    return os.path.basename(words[0]) if words else read_proc(pid, "comm").decode(errors="replace").strip()


def script_of(pid: int) -> str:
    """The name a Python process goes under, as `list` names its actor (`program_name`), from
    its command line: `python-c` for `-c`, the module's last part for `-m`; "processes" for
    what is no Python."""
    try:
        words = command_line(pid)
    except OSError:
        return program_name("")
    if not words or "python" not in os.path.basename(words[0]):
        return "processes"
    values = iter(words[1:])
    for word in values:
        if word == "-m":
            return program_name(next(values, "").rpartition(".")[2])
        if word in OPTIONS_WITH_VALUES:
            next(values, "")
        elif word == "-c" or not word.startswith("-"):
            return program_name(word)
    return program_name("")


def launched(pid: int) -> Detected | None:
    """The rank its launcher gave process `pid`, from its environment as it started; OSError
    when /proc does not tell."""
    script = script_of(pid)
    return from_launcher(environment(read_proc(pid, "environ")), script, script, lambda: parent_args(pid))


def parent_args(pid: int) -> list[str]:
    """The command line of the parent of process `pid`; [] where /proc does not tell."""
    try:
        return command_line(parent_of(pid))
    except OSError:
        return []


def stat(pid: int) -> list[bytes]:
    """The fields of /proc/PID/stat after the command's name (which may hold spaces)."""
    return read_proc(pid, "stat").rsplit(b")", 1)[1].split()


def state(pid: int) -> str:
    """The state of the process's main thread: R running, S or D blocked in a call, T stopped..."""
    return stat(pid)[0].decode()


def parent_of(pid: int) -> int:
    return int(stat(pid)[1])


def children_of(pid: int) -> list[int]:
    """The Python processes that a launcher (torchrun, mpirun, an srun step) runs below `pid`: the
    first Python process down each branch, so a worker's own children (data-loader workers,
    compilers) are not taken for ranks. The fork server of our actor runtime is no rank: its
    workers are."""
    below: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = parent_of(int(entry))
            except (OSError, IndexError, ValueError):
                continue
            below.setdefault(parent, []).append(int(entry))
    found, todo = [], sorted(below.get(pid, []))
    while todo:
        child = todo.pop(0)
        try:
            python = python_of(child) is not None and not is_fork_server(child)
        except OSError:
            python = False
        if python:
            found.append(child)
        else:
            todo += sorted(below.get(child, []))
    return sorted(found)


def is_fork_server(pid: int) -> bool:
    """Whether `pid` is our actor runtime's fork server: its workers, forked, show its command
    line too, but their parent is the fork server."""
    command = read_proc(pid, "cmdline")
    if FORK_SERVER not in command:
        return False
    return read_proc(parent_of(pid), "cmdline") != command
