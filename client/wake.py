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
"""

from __future__ import annotations

import shutil
import subprocess

GDB_TIMEOUT = 60.0
"""Seconds gdb gets to attach, read the process's symbols and run the script in it."""
FIX_PTRACE = "run join as root, or allow it with `sysctl kernel.yama.ptrace_scope=0`"


class CannotWake(Exception):
    """Why gdb could not run the script in a process, in one line for the user."""


def gdb_commands(script: str, blocked: bool) -> list[str]:
    """gdb's commands that run the file `script` on the process's main thread."""
    run = c_string(f"exec(compile(open({script!r}).read(), {script!r}, 'exec'))")
    if blocked:
        return [
            "thread 1",
            "call (int)PyGILState_Ensure()",
            f"call (int)PyRun_SimpleString({run})",
            "call (void)PyGILState_Release($1)",
        ]
    return [f"call (int)Py_AddPendingCall((int (*)(void *))PyRun_SimpleString, (void *){run})"]


def c_string(text: str) -> str:
    """`text` as a C string literal in a gdb expression."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def start(pid: int, script: str, blocked: bool) -> subprocess.Popen:
    """gdb, started on `pid` to run `script` there (its main thread `blocked` in a call, or
    running); `finish` says how it went."""
    gdb = shutil.which("gdb")
    if gdb is None:
        raise CannotWake("--wake needs gdb, which is not installed here (Debian: apt-get install gdb)")
    setup = ["set debuginfod enabled off", "set auto-load off", "set confirm off", "set pagination off"]
    args = [gdb, "-nx", "-batch", *(f"-iex={line}" for line in setup), "-p", str(pid)]
    for command in [*gdb_commands(script, blocked), "detach", "quit"]:
        args.append(f"-ex={command}")
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(gdb: subprocess.Popen) -> None:
    """Wait for gdb; CannotWake with what it said when it could not run the script."""
    try:
        said, _ = gdb.communicate(timeout=GDB_TIMEOUT)
    except subprocess.TimeoutExpired:
        gdb.kill()
        gdb.communicate()
        raise CannotWake(f"gdb did not finish within {GDB_TIMEOUT:g} s") from None
    if "ptrace: Operation not permitted" in said:
        raise CannotWake(f"gdb may not attach to it (ptrace): {FIX_PTRACE}")
    if "No such process" in said:
        raise CannotWake("it exited")
    missing = [name for name in ("PyGILState_Ensure", "PyRun_SimpleString", "Py_AddPendingCall") if f'"{name}"' in said]
    if missing:
        raise CannotWake(f"its Python exports no {missing[0]} for gdb to call (a build without its symbols)")
    if "The program being debugged was signaled" in said or "The program being debugged stopped" in said:
        raise CannotWake("it stopped while gdb ran the script in it: " + _last_line(said))
    if gdb.returncode != 0 and "$1 =" not in said:
        raise CannotWake(f"gdb could not run the script in it: {_last_line(said)}")


def _last_line(said: str) -> str:
    lines = [line for line in said.splitlines() if line.strip()]
    return lines[-1] if lines else "gdb said nothing"
