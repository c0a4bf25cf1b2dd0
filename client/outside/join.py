"""`monarch-pdb join`: load the agent into running Python processes that never imported
monarch-pdb, through PEP 768's `sys.remote_exec` (Python 3.14+), so that each becomes what a
process that called `monarch_pdb.install()` at that moment is.

What /proc says of a process (its owner, its interpreter, its environment) is read first, and a
process that cannot be joined is refused in one line and left untouched. The others are asked to
run a small script at their next safe point: between two bytecodes of the main thread, so one
blocked in a C call runs it once the call returns. The script imports monarch_pdb from the
process's own environment and calls `hooks.join`, or says why it cannot, in a file of the runtime
directory that environment names; join then waits, within its time-out, for the broker that
environment finds to list the process, so that `stacks` and `interrupt` reach it once join returns.
One join of a process runs at a time (a lock file beside the script): two would write the same
files.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pwd
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, fields
from typing import cast

from monarch_pdb import discovery, outside, processes, wire
from monarch_pdb import settings as settings_module
from monarch_pdb.client.connection import BrokerConnection, NoBroker, Timeout
from monarch_pdb.client.escapes import visible
from monarch_pdb.client.outside import wake as wake_module
from monarch_pdb.client.outside.chosen import NoProcess, chosen_pids, process_arguments
from monarch_pdb.ranks import counted, format_ranks

JOIN_TIMEOUT = 30.0
NEEDED = (3, 14)
"""The first Python with `sys.remote_exec`, on both sides."""
ANSWER_POLL = 0.05
"""Seconds between two looks for the answers of the processes asked to join."""
LIST_POLL = 0.2
"""Seconds at most between two lists of the broker, while it names none of them yet."""
RESTART_HINT = "start it with PYTHONBREAKPOINT=monarch_pdb.set_trace or monarch_pdb.install()"
WITHDRAWN = "the request is withdrawn (--wake): join it again once it runs Python code"

SCRIPT = """\
# Run by `monarch-pdb join` in process {pid}, on its main thread, at a safe point (PEP 768).
def _answer():
    import sys
    try:
        import importlib.util
        if importlib.util.find_spec("monarch_pdb") is None:
            return {{"missing": sys.prefix, "executable": sys.executable}}
        from monarch_pdb.rank import hooks
        return hooks.join()
    except (Exception, SystemExit) as error:
        return {{"failed": f"{{type(error).__name__}}: {{error}}"}}


def _tell(answer, path={answer!r}):
    import json
    import os
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(answer, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


_tell(_answer())
"""


class CannotJoin(Exception):
    """A process that cannot be joined, left as it was; the text is one line for the user."""


@dataclass(frozen=True)
class JoinTarget:
    """A process to join: what /proc says of it."""

    pid: int
    name: str
    settings: settings_module.Settings
    """Where its agent will find its broker: the settings its environment gives."""

    @property
    def who(self) -> str:
        return f"{self.pid} ({self.name})"

    @property
    def script(self) -> str:
        return os.path.join(self.settings.runtime_dir, f"join-{self.pid}.py")

    @property
    def answer(self) -> str:
        return os.path.join(self.settings.runtime_dir, f"join-{self.pid}.json")

    @property
    def lock(self) -> str:
        return os.path.join(self.settings.runtime_dir, f"join-{self.pid}.lock")


@dataclass(frozen=True)
class JoinAnswer:
    """What the script said from inside the process: whom it joined as, or why it could not."""

    actor: str = ""
    rank: int = 0
    before: bool = False
    """Whether monarch-pdb was installed there already (joined before, or install() called)."""
    missing: str = ""
    """The sys.prefix of a Python that cannot import monarch_pdb."""
    executable: str = ""
    failed: str = ""
    """What went wrong while monarch-pdb loaded."""

    @classmethod
    def read(cls, path: str) -> JoinAnswer:
        with open(path, encoding="utf-8") as f:
            said = json.load(f)
        return cls(**{field.name: said[field.name] for field in fields(cls) if field.name in said})


def _version(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def _permission(pid: int) -> str:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope", encoding="ascii") as f:
            scope = f.read().strip()
    except OSError:
        scope = ""
    because = f"kernel.yama.ptrace_scope is {scope}" if scope and scope != "0" else "it is not dumpable"
    return (
        f"not permitted to reach {pid} ({because}, or it belongs to another user): join it as its user with "
        "CAP_SYS_PTRACE, or set kernel.yama.ptrace_scope to 0"
    )


def target(pid: int, wake: bool = False) -> JoinTarget:
    """The process `pid`, if /proc shows nothing that rules out joining it (by `sys.remote_exec`,
    or with `wake` through gdb, which any Python allows); CannotJoin otherwise."""
    try:
        status = processes.read_proc(pid, "status").decode(errors="replace")
        name = processes.read_proc(pid, "comm").decode(errors="replace").strip()
    except FileNotFoundError:
        raise CannotJoin(f"{pid}: no such process") from None
    uid = re.search(r"^Uid:\s*(\d+)", status, re.M)
    assert uid is not None
    owner = int(uid[1])
    if owner != os.getuid():
        try:
            user = pwd.getpwuid(owner).pw_name
        except KeyError:
            user = f"uid {owner}"
        raise CannotJoin(f"{pid} ({name}) belongs to user {user}: join it as {user}, whose broker and secret it uses")
    if pid == os.getpid():
        raise CannotJoin(f"{pid} is this join itself")
    try:
        version = processes.python_version(pid)
        environ = processes.read_proc(pid, "environ")
    except processes.CannotRead as why:
        raise CannotJoin(f"{pid} ({name}) is {why}") from None
    except PermissionError:
        raise CannotJoin(_permission(pid)) from None
    except FileNotFoundError:
        raise CannotJoin(f"{pid} ({name}) exited") from None
    if not wake:
        _check_remote_exec(pid, name, version)
    env = processes.environment(environ)
    try:
        settings = settings_module.load(env)
    except SystemExit as error:
        raise CannotJoin(f"{pid} ({name}): in its environment, {str(error).removeprefix('monarch-pdb: ')}") from None
    return JoinTarget(pid, name, settings)


def _tracer(target: JoinTarget) -> str:
    """Why gdb cannot attach to the process, which another debugger holds (ptrace allows one),
    or "" when none does: told before gdb would say it may not attach."""
    found = re.search(rb"^TracerPid:\s*(\d+)", processes.read_proc(target.pid, "status"), re.M)
    tracer = int(found[1]) if found else 0
    if not tracer:
        return ""
    try:
        name = processes.program(tracer)
    except OSError:
        name = "gone"
    return (
        f"{target.who} is traced by process {tracer} ({name}), and ptrace allows one debugger at a time: join it "
        "with --wake once that one has detached"
    )


def _check_remote_exec(pid: int, name: str, version: tuple[int, int]) -> None:
    """CannotJoin unless `sys.remote_exec` can reach the process from here: Python 3.14+ on both
    sides, the same on both."""
    ours = sys.version_info[:2]
    if version < NEEDED:
        raise CannotJoin(
            f"{pid} runs Python {_version(version)}; joining needs {_version(NEEDED)} or later there, or "
            f"--wake (through gdb); {RESTART_HINT}"
        )
    if version != ours:
        raise CannotJoin(
            f"{pid} ({name}) runs Python {_version(version)} and join runs on Python {_version(ours)}: "
            f"sys.remote_exec needs the same Python on both sides; run join with Python {_version(version)}, "
            "or with --wake (through gdb)"
        )
    if ours < NEEDED:
        raise CannotJoin(
            f"join runs on Python {_version(ours)}; loading code into a running process (sys.remote_exec) "
            f"needs Python {_version(NEEDED)} or later, or --wake (through gdb)"
        )


def _causes(error: BaseException | None):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _refusal(target: JoinTarget, error: BaseException) -> str:
    """What `sys.remote_exec`'s error means for the user."""
    text = " ".join(str(e) for e in _causes(error))
    if "not enabled" in text:
        return (
            f"{target.who} does not allow remote debugging (PYTHON_DISABLE_REMOTE_DEBUG, or -X "
            f"disable-remote-debug); {RESTART_HINT}"
        )
    if any(isinstance(e, PermissionError) for e in _causes(error)):
        return _permission(target.pid)
    if "different Python version" in text or "Python process" in text:
        return (
            f"{target.who} runs another Python than join's {sys.version.split()[0]}: sys.remote_exec needs the "
            "same Python on both sides; run join with that process's Python"
        )
    if any(isinstance(e, (FileNotFoundError, ProcessLookupError)) for e in _causes(error)):
        return f"{target.who} exited"
    if "PyRuntime" in text:
        return f"{target.who} is not a Python process"
    return f"{target.who} cannot be joined: {error}"


def lock(target: JoinTarget, deadline: float) -> int:
    """The lock on joining the process, held by this join alone: another join of it writes the
    same files. Waits for one that holds it until `deadline`, then CannotJoin."""
    try:
        discovery.ensure_runtime_dir(target.settings)
        while True:
            fd = os.open(target.lock, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise CannotJoin(f"{target.who}: another join of it is under way and has not ended") from None
                time.sleep(ANSWER_POLL)
                continue
            with contextlib.suppress(FileNotFoundError):
                if os.stat(target.lock).st_ino == os.fstat(fd).st_ino:  # not removed by the join before us
                    return fd
            os.close(fd)
    except (discovery.Insecure, OSError) as error:
        raise CannotJoin(f"{target.who}: {error}") from None


def unlock(target: JoinTarget, fd: int) -> None:
    """Let the next join of the process go on, leaving no lock file behind."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(target.lock)
    os.close(fd)


def forget(target: JoinTarget) -> None:
    """Remove the files of a join of the process; the code gdb runs there says nothing if its
    script is gone by then."""
    for path in (target.script, target.answer, target.answer + ".tmp"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def ask(target: JoinTarget, wake: bool = False) -> subprocess.Popen | None:
    """Ask the process to run our script at its next safe point, or with `wake` now, through
    gdb (whose process is returned, for `woken`); CannotJoin if it cannot be asked."""
    try:
        if wake and (traced := _tracer(target)):
            raise CannotJoin(traced)
        forget(target)
        fd = os.open(target.script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(SCRIPT.format(pid=target.pid, answer=target.answer))
    except OSError as error:
        raise CannotJoin(f"{target.who}: {error}") from None
    try:
        if wake:
            return wake_module.start(target.pid, target.script, blocked=processes.state(target.pid) in ("S", "D"))
        sys.remote_exec(target.pid, target.script)  # type: ignore[attr-defined]
    except wake_module.CannotWake as why:
        forget(target)
        raise CannotJoin(f"{target.who}: {why}") from None
    except (OSError, RuntimeError) as error:
        forget(target)
        raise CannotJoin(_refusal(target, error)) from None
    return None


def woken(target: JoinTarget, gdb: subprocess.Popen, deadline: float, limit: float) -> str:
    """Once gdb has run our script in the process, or `deadline` passed: "", or a line that says
    gdb took longer than `limit` s though the process joined; CannotJoin with why it did not."""
    try:
        wake_module.finish(gdb, deadline - time.monotonic())
    except wake_module.TooSlow:
        if os.path.exists(target.answer):
            return f"{target.who}: gdb took longer than {limit:g} s (it was stopped), but the process joined"
        forget(target)
        raise CannotJoin(f"{target.who}: gdb did not run the joining code in it within {limit:g} s") from None
    except wake_module.CannotWake as why:
        forget(target)
        raise CannotJoin(f"{target.who}: {why}") from None
    return ""


def answers(asked: list[JoinTarget], deadline: float) -> dict[int, JoinAnswer]:
    """What each process's script said, for those that ran it before `deadline`."""
    said: dict[int, JoinAnswer] = {}
    while True:
        for t in asked:
            if t.pid not in said and os.path.exists(t.answer):
                said[t.pid] = JoinAnswer.read(t.answer)
                forget(t)
        if len(said) == len(asked) or time.monotonic() >= deadline:
            return said
        time.sleep(ANSWER_POLL)


def listed(settings: settings_module.Settings, pids: set[int], deadline: float) -> dict[int, list[wire.SessionRow]]:
    """The broker's rows of each of `pids` (processes of this host), once it lists them all or
    `deadline` passes."""
    host = socket.gethostname()
    conn = BrokerConnection(settings)
    try:
        conn.wait_for_broker(max(0.0, deadline - time.monotonic()))
        while True:
            conn.changed.clear()
            reply = conn.request(wire.ListAll(), wire.SessionList, timeout=max(1.0, deadline - time.monotonic()))
            rows = cast(wire.SessionList, reply).rows
            found: dict[int, list[wire.SessionRow]] = {}
            for row in rows:
                if row.pid in pids and row.host == host:
                    found.setdefault(row.pid, []).append(row)
            left = deadline - time.monotonic()
            if len(found) == len(pids) or left <= 0:
                return found
            conn.changed.wait(min(LIST_POLL, left))
    finally:
        conn.close()


def waiting_because(pid: int, wake: bool = False) -> str:
    """Why a process asked to join has not run our script yet, and when it will: by itself, or,
    with `wake`, whose request is withdrawn, once joined again."""
    try:
        state = processes.state(pid)
    except OSError:
        state = "Z"
    if state in ("Z", "X"):
        return "it exited"
    if state in ("T", "t"):
        why, then = "it is stopped (SIGSTOP, or a debugger holds it)", "it joins once it runs again"
    elif state in ("S", "D"):
        why = f"its main thread is blocked in a C call{_main_frame(pid)}"
        then = "it joins when that call returns or a signal arrives, or at once with --wake"
    else:
        why, then = f"its main thread is busy in a C call{_main_frame(pid)}", "it joins when that call returns"
    return f"{why}; {WITHDRAWN if wake else then}"


def _main_frame(pid: int) -> str:
    """` under FILE:LINE FUNCTION`, the main thread's innermost Python frame, read from outside
    the process where it can be."""
    try:
        frames = outside.read(pid).threads[0].frames
    except (outside.CannotRead, IndexError):
        return ""
    return f" under {os.path.basename(frames[-1].file)}:{frames[-1].line} {frames[-1].function}" if frames else ""


def joined_line(rows: dict[int, list[wire.SessionRow]], before: int) -> str:
    """`joined 4 processes: train ranks[0-3]`, by job and actor as `list` names them."""
    every = [row for pid in sorted(rows) for row in rows[pid]]
    several_jobs = len({row.job for row in every}) > 1
    by_actor: dict[str, list[int]] = {}
    for row in every:
        by_actor.setdefault(f"{row.job}:{row.actor}" if several_jobs else row.actor, []).append(row.rank)
    parts = ", ".join(f"{actor} ranks[{format_ranks(sorted(ranks))}]" for actor, ranks in by_actor.items())
    count = len(rows)
    again = f" ({before} had joined before)" if before else ""
    return f"joined {counted(count, 'process', 'processes')}: {parts}{again}"


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from monarch_pdb.client.commands.arguments import seconds

    parser = parser or argparse.ArgumentParser(prog="monarch-pdb join")
    parser.description = (
        "Load the debugger into running Python 3.14+ processes (sys.remote_exec), or with --wake into "
        "any Python 3.10+ process through gdb, as if each had called monarch_pdb.install() now."
    )
    process_arguments(parser, "join", "join")
    parser.add_argument(
        "--wake",
        action="store_true",
        help="run the loading now, through gdb, in processes blocked in a C call, and on any Python from 3.10",
    )
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=JOIN_TIMEOUT,
        metavar="S",
        help=f"seconds to wait for each process to reach a safe point and join (default {JOIN_TIMEOUT:g})",
    )
    parser.add_argument(
        "--gdb-timeout",
        type=seconds,
        metavar="S",
        help=f"with --wake, seconds gdb gets to run the loading in the processes (default {wake_module.GDB_TIMEOUT:g} "
        "for each round of as many processes as there are cores)",
    )
    return parser


def not_joined(t: JoinTarget, answer: JoinAnswer | None, timeout: float, wake: bool = False) -> str:
    """Why a process asked to join is not loaded, or "" when it is."""
    if answer is None:
        return f"{t.who} has not joined within {timeout:g} s: {waiting_because(t.pid, wake)}"
    if answer.missing:
        return (
            f"monarch_pdb cannot be imported in {t.who}, whose Python is {answer.missing}: install it there "
            f"with `{answer.executable} -m pip install monarch-pdb`"
        )
    if answer.failed:
        return f"{t.who} could not load monarch-pdb: {answer.failed}"
    return ""


def rows_of(
    loaded: list[JoinTarget], said: dict[int, JoinAnswer], deadline: float, timeout: float
) -> tuple[dict[int, list[wire.SessionRow]], list[str]]:
    """Each loaded process's rows in the broker its environment names, and a line for each that
    broker does not list by `deadline`."""
    rows: dict[int, list[wire.SessionRow]] = {}
    unlisted: list[str] = []
    for settings in dict.fromkeys(t.settings for t in loaded):
        these = [t for t in loaded if t.settings == settings]
        try:
            found = listed(settings, {t.pid for t in these}, deadline)
            why = (
                f"the broker at {settings.host}:{settings.port} has not listed it within {timeout:g} s "
                f"(its log: {discovery.log_file(settings)})"
            )
        except (NoBroker, Timeout) as error:
            found, why = {}, str(error)
        for t in these:
            if t.pid in found:
                rows[t.pid] = found[t.pid]
            else:
                unlisted.append(f"{t.who} joined as {said[t.pid].actor} {said[t.pid].rank}, but {why}")
    return rows, unlisted


def _say(problem: str) -> None:
    print(f"monarch-pdb: {visible(problem)}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    try:
        pids = chosen_pids(args)
    except NoProcess as refusal:
        _say(str(refusal))
        return 2 if not args.pids and args.children_of is None else 1
    locks: list[tuple[JoinTarget, int]] = []
    try:
        return _join(pids, args, locks)
    finally:
        for held in locks:
            unlock(*held)


def _join(pids: list[int], args: argparse.Namespace, locks: list[tuple[JoinTarget, int]]) -> int:
    """Join `pids`, each under its lock (added to `locks`); the exit status."""
    asked: list[JoinTarget] = []
    waking: list[tuple[JoinTarget, subprocess.Popen]] = []
    refused = 0
    others_end = time.monotonic() + args.timeout
    for pid in pids:
        try:
            chosen = target(pid, args.wake)
            locks.append((chosen, lock(chosen, others_end)))
            gdb = ask(chosen, args.wake)
            if gdb is None:
                asked.append(chosen)
            else:
                waking.append((chosen, gdb))
        except CannotJoin as refusal:
            _say(str(refusal))
            refused += 1
    limit = args.gdb_timeout or wake_module.time_limit(len(waking))
    gdb_end = time.monotonic() + limit
    for chosen, gdb in waking:  # one gdb per process, side by side
        try:
            slow = woken(chosen, gdb, gdb_end, limit)
            if slow:
                _say(slow)
            asked.append(chosen)
        except CannotJoin as refusal:
            _say(str(refusal))
            refused += 1
    deadline = time.monotonic() + args.timeout  # from when each process was asked, however long gdb took
    said = answers(asked, deadline)
    if args.wake:
        for t in asked:
            if t.pid not in said:
                forget(t)
    verdicts = {t.pid: not_joined(t, said.get(t.pid), args.timeout, args.wake) for t in asked}
    rows, unlisted = rows_of([t for t in asked if not verdicts[t.pid]], said, deadline, args.timeout)
    problems = [why for why in verdicts.values() if why] + unlisted
    for problem in problems:
        _say(problem)
    if rows:
        print(visible(joined_line(rows, sum(said[pid].before for pid in rows))), flush=True)
    return 1 if refused or problems else 0
