"""`join --wake`: run join's script in a process now, through gdb, on any Python from 3.10,
instead of waiting for its main thread to come back to Python on its own (PEP 768's
`sys.remote_exec` runs the script only then, and only on 3.14+).

gdb attaches to the process, which stops every thread where it is: a blocking call (a sleep, a
lock or event wait, a socket read) is interrupted, to be restarted by the kernel when gdb
detaches. If the main thread was blocked, it had let go of the GIL: gdb makes it take the GIL
(`PyGILState_Ensure`), run the script (`PyRun_SimpleString`) and let go again, as debugpy's
attach does. If it was running, the script is queued as a pending call (`Py_AddPendingCall`),
which the interpreter runs on the main thread at its next safe point, between two bytecodes.
Either way the process then goes on as it was: its blocking call is restarted (a sleep still
ends when it would have), and only what joining installs changes.

The process stays stopped while gdb reads symbols, so gdb reads those of the Python library
alone (libpython, or the executable's own for a Python linked statically), not those of every
library the process maps (libtorch's take gdb tens of seconds).
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import sys
import sysconfig

from monarch_pdb import settings as settings_module

GDB_TIMEOUT = 60.0
"""Seconds gdb gets to attach, read the Python library's symbols and run the script in a
process, with a core to itself."""
FIX_PTRACE = "run join as root, or allow it with `sysctl kernel.yama.ptrace_scope=0`"
PYTHON_LIBRARY = "libpython"
"""gdb's pattern for the libraries whose symbols it reads: the one that holds Python's C API."""
CANNOT_WRITE = "Couldn't write extended state status"
"""What gdb says where it cannot set the registers a call needs (some gdbs on CPUs with AMX)."""


class CannotWake(Exception):
    """Why gdb could not run the script in a process, in one line for the user."""


class TooSlow(CannotWake):
    """gdb did not finish within its time: the script may have run all the same."""


def time_limit(processes: int) -> float:
    """Seconds the gdbs of `processes` processes, run side by side, get to finish: GDB_TIMEOUT
    for each round of as many as there are cores."""
    return GDB_TIMEOUT * math.ceil(processes / (os.cpu_count() or 1))


def gdb_commands(script: str, blocked: bool) -> list[str]:
    """gdb's commands that run the file `script` on the process's main thread, and print `$1 = 0`
    once they have. Nothing is called unless gdb can set the process's registers ($ok): where it
    cannot, a call would leave the process with registers half restored."""
    run = c_string(
        f"try:\n    exec(compile(open({script!r}).read(), {script!r}, 'exec'), {{}})\nexcept OSError:\n    pass\n"
    )
    probe = ["set $ok = 1"]
    if platform.machine() == "x86_64":
        probe = ["set $ok = 0", "set $ok = ($mxcsr = $mxcsr ^ 1, $mxcsr = $mxcsr ^ 1, 1)"]
    if blocked:
        calls = [
            "thread 1",
            "set $gil = $ok ? (int)PyGILState_Ensure() : -1",
            f"set $ran = $gil != -1 ? (int)PyRun_SimpleString({run}) : -1",
            "set $gil = $gil != -1 ? ((void)PyGILState_Release($gil), -1) : -1",
        ]
    else:
        calls = [f"set $ran = $ok ? (int)Py_AddPendingCall((int (*)(void *))PyRun_SimpleString, (void *){run}) : -1"]
    return [*probe, *calls, "print $ran"]


def c_string(text: str) -> str:
    """`text` as a C string literal in a gdb expression."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def start(pid: int, script: str, blocked: bool) -> subprocess.Popen:
    """gdb, started on `pid` to run `script` there (its main thread `blocked` in a call, or
    running); `finish` says how it went."""
    gdb = gdb_path(settings_module.load())
    setup = [
        "set debuginfod enabled off",
        "set auto-load off",
        "set auto-solib-add off",
        "set confirm off",
        "set pagination off",
    ]
    args = [gdb, "-nx", "-batch", *(f"-iex={line}" for line in setup), "-p", str(pid)]
    for command in [f"sharedlibrary {PYTHON_LIBRARY}", *gdb_commands(script, blocked), "detach", "quit"]:
        args.append(f"-ex={command}")
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def gdb_path(settings: settings_module.Settings) -> str:
    """The gdb to run: MONARCH_PDB_GDB, else the one the `wake` extra installs beside this
    Python (a gdb that can call functions on every CPU: Debian 12's gdb 13 cannot where the CPU
    has AMX) where it can start, which needs this Python's shared libpython, else gdb on PATH;
    CannotWake naming what is missing."""
    if settings.gdb:
        named = shutil.which(settings.gdb)
        if named is None:
            raise CannotWake(f"MONARCH_PDB_GDB names {settings.gdb!r}, which is not a program here")
        return named
    beside = os.path.join(os.path.dirname(sys.executable), "gdb")
    if os.access(beside, os.X_OK) and sysconfig.get_config_var("Py_ENABLE_SHARED"):
        return beside
    found = shutil.which("gdb")
    if found is None:
        raise CannotWake(
            "--wake needs gdb, which is not installed here (pip install 'monarch-pdb[wake]', or Debian: apt-get install gdb)"
        )
    return found


def finish(gdb: subprocess.Popen, timeout: float) -> None:
    """Wait for gdb, `timeout` seconds at most; CannotWake with what it said when it could not
    run the script, TooSlow when it did not finish in time."""
    try:
        said, _ = gdb.communicate(timeout=max(0.0, timeout))
    except subprocess.TimeoutExpired:
        gdb.kill()
        gdb.communicate()
        raise TooSlow("gdb did not finish within its time") from None
    if "ptrace: Operation not permitted" in said:
        raise CannotWake(f"gdb may not attach to it (ptrace): {FIX_PTRACE}")
    if "No such process" in said:
        raise CannotWake("it exited")
    missing = [name for name in ("PyGILState_Ensure", "PyRun_SimpleString", "Py_AddPendingCall") if f'"{name}"' in said]
    if missing:
        raise CannotWake(f"its Python exports no {missing[0]} for gdb to call (a build without its symbols)")
    if CANNOT_WRITE in said:
        raise CannotWake(
            f"gdb cannot set the registers of a process on this machine (it says: {CANNOT_WRITE}), so it cannot "
            "run the joining code there; the process is left as it was (a newer gdb can: pip install "
            "'monarch-pdb[wake]'; joining without --wake needs no gdb)"
        )
    if "The program being debugged was signaled" in said or "The program being debugged stopped" in said:
        raise CannotWake("it stopped while gdb ran the script in it: " + _last_line(said))
    if "$1 = 0" not in said:
        raise CannotWake(f"gdb could not run the script in it: {_last_line(said)}")


def _last_line(said: str) -> str:
    lines = [line for line in said.splitlines() if line.strip()]
    return lines[-1] if lines else "gdb said nothing"
