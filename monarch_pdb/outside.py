"""A process's stacks read from outside it, running no code in it: for a process whose rank process
cannot answer (C code holds the GIL), one that never loaded the debugger, and the C/C++ frames no
rank process can see. The standard library's remote unwinder reads a process that runs this Python,
from 3.14 on; py-spy (`pip install monarch-pdb[outside]`) reads any other, and alone reads
native frames and locals.

py-spy was chosen over pystack because it reads every CPython from 3.10 on from a single static
binary in its wheel, with no debug symbols and no gdb needed, in tens of milliseconds.

The broker reads the processes of its own host (broker/host_reads.py), `join` names where a
process it waits for is, and `monarch-pdb stacks` reads processes that never joined.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.places import program_frame
from monarch_pdb.processes import CannotRead
from monarch_pdb.settings import DEFAULT_READ_TIMEOUT

READS_AT_ONCE = 8
"""Processes read at the same time: each read is a py-spy process, or the unwinder's syscalls."""
LOCAL_WIDTH = 80
"""Characters of one local's value shown; the rank process's `stacks --locals` cuts at the same width."""
ADDRESS = re.compile(r"0x[0-9a-f]+")


@dataclass(frozen=True)
class Outside:
    """What was read of one process: its threads' stacks, outermost frame first (native frames
    among them when asked for), and, when asked for, the locals of the main thread's program
    frame as one-line reprs."""

    threads: list[wire.ThreadStack]
    locals: dict[str, str] = field(default_factory=dict)


def one_line(text: str) -> str:
    """A value's text on one line of at most LOCAL_WIDTH characters."""
    text = " ".join(text.split())
    return text if len(text) <= LOCAL_WIDTH else text[: LOCAL_WIDTH - 3] + "..."


def time_limit(base: float, at_once: int, native: bool) -> float:
    """Seconds py-spy gets to read one process: `base` with a core to itself, twice that for
    native frames (it loads each library's symbols, and libtorch's are large), times the reads
    that share each core when `at_once` processes are read together."""
    sharing = min(at_once, READS_AT_ONCE) / (os.cpu_count() or 1)
    return base * (2 if native else 1) * max(1.0, sharing)


def read(
    pid: int,
    every_thread: bool = False,
    native: bool = False,
    with_locals: bool = False,
    limit: float = DEFAULT_READ_TIMEOUT,
) -> Outside:
    """The stacks of process `pid`'s threads (its main thread's alone unless `every_thread`),
    with native frames and the program frame's locals if asked, py-spy given `limit` seconds;
    CannotRead with why. Only py-spy reads native frames and locals: where it cannot, the
    unwinder's frames come alone."""
    readers = [_unwound, _py_spy]
    if native or with_locals:
        readers.reverse()
    whys = []
    for reader in readers:
        try:
            threads, values = reader(pid, native, with_locals, limit)
            break
        except CannotRead as why:
            whys.append((reader, why))
    else:
        raise next(why for reader, why in whys if reader is _py_spy)
    if not every_thread:
        threads = [t for t in threads if t[0]][:1] or threads[:1]
    return Outside([stack for _, stack in threads], values)


Threads = list[tuple[bool, wire.ThreadStack]]
"""Each thread's stack, and whether it is the main thread."""


def _unwound(pid: int, native: bool, with_locals: bool, limit: float) -> tuple[Threads, dict[str, str]]:
    """The standard library's remote unwinder (3.14+), whose answers' shape changes between
    releases: a process of another Python, or a shape not known here, is left to py-spy. It
    reads Python frames only."""
    try:
        import _remote_debugging  # type: ignore[import-not-found]

        trace = _remote_debugging.RemoteUnwinder(pid, all_threads=True).get_stack_trace()
        threads = [t for item in trace for t in getattr(item, "threads", [item])]
        found = []
        for thread in threads:
            frames = [
                wire.Frame(f.filename, getattr(f, "lineno", None) or f.location.lineno, f.funcname)
                for f in reversed(thread.frame_info)
            ]
            found.append((thread.thread_id == pid, wire.ThreadStack(f"thread {thread.thread_id}", frames)))
        return found, {}
    except Exception as error:
        raise CannotRead(str(error)) from None


def py_spy() -> str:
    """py-spy's path: on PATH, else beside this Python (a venv's bin, not activated)."""
    return shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")


def _py_spy(pid: int, native: bool, with_locals: bool, limit: float) -> tuple[Threads, dict[str, str]]:
    spy = py_spy()
    if not os.access(spy, os.X_OK):
        raise CannotRead("py-spy is not installed (pip install monarch-pdb[outside])")
    command = [spy, "dump", "--pid", str(pid), "--json"] + ["--native"] * native + ["--locals"] * with_locals
    try:
        done = subprocess.run(command, capture_output=True, encoding="utf-8", errors="replace", timeout=limit)
    except subprocess.TimeoutExpired:
        raise CannotRead(f"py-spy did not finish within {limit:.3g} s") from None
    if done.returncode != 0:
        raise CannotRead(f"py-spy: {_failure(done.stderr) or f'exit {done.returncode}'}")
    threads = []
    values: dict[str, str] = {}
    for thread in json.loads(done.stdout):
        main = thread.get("os_thread_id") == pid
        spied = list(reversed(thread["frames"]))
        frames = [_frame(f) for f in spied]
        threads.append(
            (main, wire.ThreadStack(thread.get("thread_name") or f"thread {thread.get('thread_id')}", frames))
        )
        if main and with_locals and frames:
            chosen = spied[frames.index(program_frame(frames))]
            values = {
                v["name"]: one_line(v.get("repr") or "?")
                for v in chosen.get("locals") or []
                if not v["name"].startswith("__")
            }
    unreadable = _not_utf8(pid)
    if unreadable and any(main and all(f.native for f in stack.frames) for main, stack in threads):
        raise CannotRead(f"py-spy cannot read the frames of {unreadable}, a file whose name is not UTF-8")
    return threads, values


def _not_utf8(pid: int) -> str:
    """The first word of a process's command line that is not UTF-8 (its script's name, as a
    rule), escaped; "" for none. py-spy leaves out every frame of a file so named."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().split(b"\0")
    except OSError:
        return ""
    for word in words:
        try:
            word.decode()
        except UnicodeDecodeError:
            return os.path.basename(word).decode(errors="backslashreplace")
    return ""


def _failure(said: str) -> str:
    """py-spy's error in one line: what failed, and its innermost cause."""
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    error = next((line.removeprefix("Error:").strip() for line in lines if line.startswith("Error:")), "")
    causes = [line.split(":", 1)[1].strip() for line in lines if re.match(r"\d+:", line)]
    return f"{error} ({causes[-1]})" if error and causes else error or (lines[-1] if lines else "")


def _frame(spied: dict) -> wire.Frame:
    """A frame as py-spy tells it: a Python one named by its code's name, as the rank process names it
    (py-spy names it by its qualified name from 3.11); a native one (py-spy names its module)
    with its library for file, an unnamed one's address (which differs between processes) as
    `?`, so that ranks in the same place merge."""
    if not spied.get("module"):
        return wire.Frame(spied["filename"], spied["line"], spied["name"].rpartition(".")[2])
    return wire.Frame(spied["module"], 0, ADDRESS.sub("?", spied["name"]), native=True)
