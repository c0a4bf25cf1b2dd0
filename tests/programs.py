"""Starting the programs under test (the guide's example, small variants) and waiting on them."""

from __future__ import annotations

import functools
import os
import platform
import re
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from monarch_pdb import settings as settings_module
from monarch_pdb import wire
from monarch_pdb.client.connection import BrokerConnection
from monarch_pdb.client.outside import wake

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PDB_STOPS_ON_BREAKPOINT = sys.version_info >= (3, 13)
"""Python 3.13's pdb stops at the `breakpoint()` line itself, earlier ones at the line after;
ours does what stock pdb does on each."""


def stop_line(line_after: int) -> int:
    """The line a rank paused by `breakpoint()` reports, given the line after the call."""
    return line_after - 1 if PDB_STOPS_ON_BREAKPOINT else line_after


def stop_text(after: str, call: str = "breakpoint()  # noqa") -> str:
    """pdb's `-> ` line for a rank paused by `call` (the guide's `breakpoint()  # noqa`), given
    the line after it."""
    return f"-> {call}" if PDB_STOPS_ON_BREAKPOINT else f"-> {after}"


DEBUG_SHELL = [os.path.join(os.path.dirname(sys.executable), "monarch-pdb"), "debug"]
"""`monarch-pdb debug`: always ours, where `monarch` may be Monarch's own command when
torchmonarch is installed too."""


class Program:
    """A program run in its own process group, so everything it started can be ended at once."""

    def __init__(
        self,
        env: dict[str, str],
        script: Path | str,
        *args: str,
        cwd: Path | None = None,
        launcher: list[str] | None = None,
        stdin: IO[str] | int = subprocess.DEVNULL,
    ) -> None:
        """`python SCRIPT ARGS`, or `LAUNCHER SCRIPT ARGS` (torchrun, ip netns exec ...) when given;
        `python - ` reads its program from `stdin`."""
        self.proc = subprocess.Popen(
            [*(launcher or [sys.executable]), str(script), *args],
            env=env,
            cwd=cwd,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def finish(self, timeout: float = 30.0) -> tuple[int, str]:
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.communicate()


def wait_for_lines(program: Program, word: str, count: int, timeout: float = 60.0) -> str:
    """What the program printed until `count` lines start with `word`."""
    deadline = time.monotonic() + timeout
    text = ""
    fd = program.proc.stdout.fileno()
    while sum(line.startswith(word) for line in text.splitlines()) < count:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"expected {count} {word} lines; the program printed:\n{text}"
        chunk = os.read(fd, 65536).decode()
        assert chunk, f"the program ended; it printed:\n{text}"
        text += chunk
    return text


def run_debug(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """`monarch-pdb debug ARGS` without a terminal (a script, -c, --json), run to its end."""
    return subprocess.run(
        [*DEBUG_SHELL, *args],
        env=dict(env, MONARCH_PDB_HISTORY=""),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


RESERVED: list[socket.socket] = []
"""The sockets that hold the ports `free_port` gave out."""


def free_port() -> int:
    """A port for a broker that must listen on a known port (one a rank starts, or one
    restarted on the same port), held for the rest of the test run: a socket bound to it
    with SO_REUSEADDR, never listening, lets a broker (ZeroMQ sets SO_REUSEADDR too) bind
    it as often as it likes, and keeps the system from giving it to any other program,
    which a port merely found free an instant before does not."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    RESERVED.append(holder)
    return holder.getsockname()[1]


def settings_for(env: dict[str, str]) -> settings_module.Settings:
    return settings_module.load(env)


def wait_for_sessions(
    env: dict[str, str], count: int, timeout: float = 30.0, state: str | None = None
) -> list[wire.SessionRow]:
    """Block until `count` sessions are listed (optionally in one state); returns the rows.

    The shell's own `wait` mechanism: it re-lists whenever the broker publishes an event.
    """
    conn = BrokerConnection.open(settings_for(env).with_overrides(connect_timeout=timeout))
    try:

        def chosen(rows: list[wire.SessionRow]) -> list[wire.SessionRow]:
            return [r for r in rows if state is None or r.state == state]

        rows = chosen(conn.wait_for_rows(lambda rows: len(chosen(rows)) >= count, timeout))
        assert len(rows) >= count, f"expected {count} sessions, saw {len(rows)}: {rows[:8]}"
        return rows
    finally:
        conn.close()


def wait_for_all_rows(
    env: dict[str, str],
    enough: Callable[[list], bool],
    timeout: float = 30.0,
    ask: wire.Message = wire.ListAll(),
    answer: type[wire.Message] = wire.SessionList,
) -> list:
    """`list --all` rows (or those of another list: `ask` and its `answer`) once `enough(rows)`;
    asked again after every event, or a moment later."""
    conn = BrokerConnection.open(settings_for(env).with_overrides(connect_timeout=timeout))
    try:
        deadline = time.monotonic() + timeout
        while True:
            conn.changed.clear()
            rows = conn.request(ask, answer).rows
            if enough(rows):
                return rows
            assert time.monotonic() < deadline, f"never enough rows: {rows}"
            conn.changed.wait(0.1)
    finally:
        conn.close()


def debug(
    env: dict[str, str], *commands: str, flags: tuple[str, ...] = (), timeout: float = 60
) -> subprocess.CompletedProcess:
    """`monarch-pdb debug -c COMMAND ...`, without a terminal."""
    args = [a for command in commands for a in ("-c", command)]
    return subprocess.run(
        [*DEBUG_SHELL, *flags, *args],
        env=dict(env, MONARCH_PDB_HISTORY=""),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def interrupt_running_ranks(env: dict[str, str], actor: str, function: str, script: Path) -> str:
    """What a user does with the ranks of `actor`, running in `function` of `script` without a
    breakpoint(): `stacks` names the function under the script's name, `interrupt` stops every
    rank, `bt` shows each in that function, and `continue` lets them run on. The shell's output."""
    done = debug(env, f"stacks {actor}", f"interrupt {actor} ranks(:)", f"cast {actor} ranks(:) bt", "continue")
    assert done.returncode == 0, done.stdout + done.stderr
    stacks, _, stopped = done.stdout.partition("Interrupted ")
    assert re.search(rf"^\W*{re.escape(script.name)}:\d+ {function}  ranks\[", stacks, re.M), stacks
    assert "<dynamic-code>" not in done.stdout
    assert re.search(rf"^> {re.escape(str(script))}\(\d+\){function}\(\)$", stopped, re.M), stopped
    return done.stdout


def start_broker(env: dict[str, str], *args: str, launcher: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    """`python -m monarch_pdb.broker ARGS` in the foreground (behind LAUNCHER when given);
    returns it and its first line, once it says it listens."""
    proc = subprocess.Popen(
        [*(launcher or []), sys.executable, "-m", "monarch_pdb.broker", *args],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = first_line(proc.stderr)
    assert "listening on" in first, first
    return proc, first


def first_line(stream: IO[str]) -> str:
    """A pipe's first line, read a byte at a time: a buffered read would take the lines that
    follow it too, which `stop_broker` (whose `communicate` reads the pipe itself) would then
    never see."""
    line = b""
    while not line.endswith(b"\n") and (byte := os.read(stream.fileno(), 1)):
        line += byte
    return line.decode()


def stop_broker(proc: subprocess.Popen) -> str:
    """Stop it as SIGTERM would in production; returns what else it logged. It has half a
    minute: on 2 cores shared by four workers' jobs, a broker's exit took more than 10 s."""
    proc.terminate()
    return proc.communicate(timeout=30)[1]


class BrokerLog:
    """What a broker from `start_broker` logs after its first line, read as it comes, so that
    a test can wait for a line of it."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.seen = 0
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        """The next line that holds `text`, once the broker has logged it."""

        def found() -> int | None:
            return next((n for n in range(self.seen, len(self.lines)) if text in self.lines[n]), None)

        with self.changed:
            self.changed.wait_for(lambda: found() is not None, timeout)
            at = found()
            assert at is not None, f"the broker never logged {text!r}; it logged:\n{''.join(self.lines)}"
            self.seen = at + 1
            return self.lines[at]

    def during(self, seconds: float) -> str:
        """What the broker logs in the next `seconds` after the lines waited for: a deadline
        on what it must not say meanwhile."""
        with self.changed:
            self.changed.wait_for(lambda: self.proc.poll() is not None, seconds)
            text, self.seen = "".join(self.lines[self.seen :]), len(self.lines)
            return text

    def stop(self) -> str:
        """Stop the broker as `stop_broker` does; returns all it logged after its first line."""
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.reader.join(timeout=10)
        return "".join(self.lines)


RUNS = textwrap.dedent("""
    import time

    import monarch_pdb

    monarch_pdb.install()
    print("RUNNING", flush=True)
    time.sleep(3600)
""")
"""A rank that runs and never stops, known to the broker from `install()` (its launcher's
RANK names it): saved as train.py, it is rank RANK of actor train."""


NAMED_RANKS = textwrap.dedent("""
    import sys
    import threading
    import time

    import monarch_pdb


    def rank_main(actor, rank, running):
        with monarch_pdb.endpoint_call(actor, rank, {"gpu": rank}):
            if rank == running:
                print("RUNNING", flush=True)
            while rank == running:
                time.sleep(0.05)
            value = rank * 10
            breakpoint()
            return value


    monarch_pdb.install()
    actors, running = sys.argv[1].split(","), int(sys.argv[2])
    for rank, actor in enumerate(actors):
        threading.Thread(target=rank_main, args=(actor, rank, running), daemon=True).start()
    threading.Event().wait()
""")
"""Ranks 0, 1, ... of the actors named in its first argument (comma-separated), in one process:
each stops at a breakpoint but the rank its second argument names, which runs on, a sleep at a time."""


HOSTILE_NAMES = ("<img src=x onerror=alert(1)>", "</script><script>alert(2)</script>")
"""Actor names that would be markup, or end a script, in a page that took them as HTML."""


def hostile_ranks(env: dict[str, str], tmp_path: Path) -> Program:
    """Rank 0 of an actor named HOSTILE_NAMES[0], paused, and rank 1 of HOSTILE_NAMES[1], running."""
    script = tmp_path / "named.py"
    script.write_text(NAMED_RANKS)
    program = Program(env, script, ",".join(HOSTILE_NAMES), "1", cwd=tmp_path)
    wait_for_lines(program, "RUNNING", 1)
    wait_for_sessions(env, 1)
    return program


LAUNCHED_RANK = textwrap.dedent("""
    import os
    import sys

    rank = int(os.environ[sys.argv[1]])  # the variable the launcher names the rank with
    value = rank + 100
    breakpoint()
    sys.stdout.write(f"rank {rank} done\\n")  # one write: the launcher interleaves the ranks' output
    sys.stdout.flush()
""")
"""A rank of a multi-process launcher (mpirun, srun), saved as solver.py by the tests of launchers."""


def debug_launched_ranks(env: dict[str, str], shell: Callable, program: Program, job_is: Callable[[str], bool]) -> None:
    """What a user does with four LAUNCHED_RANKs: they are one job (`job_is` judges its name while
    they are paused), ranks 0-3 on host 0 with their local rank as gpu; a cast reaches the ranks
    chosen, `continue` all of them, and the launcher then exits 0 with every rank's last line."""
    rows = wait_for_sessions(env, 4, timeout=90)
    assert len({r.job for r in rows}) == 1 and job_is(rows[0].job), rows
    sh = shell(command=DEBUG_SHELL)
    listed = re.findall(r"^\| (\w+) +\| (\d) +\| (\{.*?\}) +\|", sh.command("list"), re.M)
    assert listed == [("solver", str(r), f"{{'host': 0, 'gpu': {r}}}") for r in range(4)]
    assert sh.command("cast solver ranks(::2) p value") == (
        "solver ranks[0] (1)\n100\nsolver ranks[2] (1)\n102\n"
        "numbers: count 2, min 100 (rank 0), max 102 (rank 2), mean 101, NaN/Inf 0, beyond 3 sd 0\n"
    )
    assert "Continued 4 ranks: solver ranks[0-3]" in sh.command("continue")
    code, output = program.finish(timeout=60)
    assert code == 0 and all(f"rank {r} done" in output for r in range(4)), output


def gdb() -> str | None:
    """The gdb `join --wake` runs here, or None where it finds none."""
    try:
        return wake.gdb_path(settings_module.load())
    except wake.CannotWake:
        return None


def needs_gdb_calls() -> None:
    """Skip the test unless gdb can run code in a process here (`join --wake`)."""
    why = _gdb_cannot_call()
    if why:
        pytest.skip(why)


@functools.cache
def _gdb_cannot_call() -> str:
    """Why gdb cannot run code in a process here ("" when it can): not installed, or it cannot
    set a process's registers, which a call needs (some gdbs on CPUs with AMX)."""
    found = gdb()
    if found is None:
        return "gdb is not installed (pip install 'monarch-pdb[wake]', or Debian: apt-get install gdb)"
    if platform.machine() != "x86_64":
        return ""
    target = subprocess.Popen(["sleep", "60"])
    try:
        said = subprocess.run(
            [found, "-nx", "-batch", "-p", str(target.pid), "-ex=set $mxcsr ^= 1", "-ex=set $mxcsr ^= 1"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        target.kill()
        target.wait()
    if "Couldn't write extended state status" in said.stdout + said.stderr:
        return "gdb cannot set a process's registers on this machine, so it cannot call a function there"
    return ""
