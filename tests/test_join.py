"""`monarch-pdb join`: running processes that never imported monarch-pdb, joined by pid or as a
launcher's children through sys.remote_exec (Python 3.14+), become installed ranks; each process
that cannot be joined is refused in one line and left as it was."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from programs import DEBUG_SHELL, Program, debug, gdb, needs_gdb_calls, wait_for_all_rows, wait_for_lines

from monarch_pdb.processes import children_of

JOIN = [DEBUG_SHELL[0], "join"]
JOINS = sys.version_info >= (3, 14)
needs_remote_exec = pytest.mark.skipif(
    not JOINS, reason="joining a running process needs sys.remote_exec (Python 3.14 or later) on both sides"
)
pytestmark = pytest.mark.each_python
PATIENCE = "60"
"""join's --timeout where a process must join: its import of monarch-pdb on a busy machine."""

WORKER = textwrap.dedent("""
    import os
    import socket
    import threading
    import time

    rank = int(os.environ["RANK"])


    def nap():
        kind = "sleep"
        while True:
            time.sleep(0.2)


    def wait_for_peers(done):
        kind = "event"
        while not done.wait(2.0):
            pass


    def read_reply(sock):
        kind = "socket"
        sock.settimeout(0.2)
        while True:
            try:
                return sock.recv(1)
            except TimeoutError:
                continue


    os.write(1, f"WAITING {rank} {os.getpid()}\\n".encode())  # one write: the ranks share the launcher's stdout
    if rank == 0:
        nap()
    elif rank == 1:
        wait_for_peers(threading.Event())
    else:
        mine, theirs = socket.socketpair()
        read_reply(mine)
""")
"""A rank of a job that hangs, as torchrun starts it: each waits in its own way, and comes back
to Python between two waits (where a joining script runs)."""

LAUNCHER = textwrap.dedent("""
    import os
    import subprocess
    import sys

    workers = [subprocess.Popen([sys.executable, sys.argv[1]], env=dict(
        os.environ, RANK=str(r), LOCAL_RANK=str(r), GROUP_RANK="0", WORLD_SIZE="3", LOCAL_WORLD_SIZE="3",
        TORCHELASTIC_RUN_ID="hang7")) for r in range(3)]
    for worker in workers:
        worker.wait()
""")
"""Three workers with torchrun's variables, under a Python parent as torchrun is."""

IDLE = 'import time\nprint("WAITING", flush=True)\nwhile True:\n    time.sleep(0.2)\n'


def join(env, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*JOIN, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )


@needs_remote_exec
@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["pids", "children-of"])
def test_joined_ranks_are_listed_stacked_interrupted_cast_to_and_continued(env, tmp_path, how):
    (tmp_path / "train.py").write_text(WORKER)
    (tmp_path / "launch.py").write_text(LAUNCHER)
    program = Program(env, tmp_path / "launch.py", "train.py", cwd=tmp_path)
    try:
        started = wait_for_lines(program, "WAITING", 3)
        pids = [int(pid) for _, pid in sorted(re.findall(r"^WAITING (\d) (\d+)$", started, re.M))]
        chosen = [str(pid) for pid in pids] if how == "pids" else ["--children-of", str(program.proc.pid)]
        elsewhere = dict(env, MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "join's own"))
        done = join(elsewhere, *chosen, "--timeout", PATIENCE)  # the ranks' environment names their broker
        assert (done.returncode, done.stdout, done.stderr) == (0, "joined 3 processes: train ranks[0-2]\n", "")

        rows = wait_for_all_rows(env, lambda rows: len(rows) == 3)
        assert sorted((r.actor, r.rank, r.coords, r.pid, r.state, r.job) for r in rows) == [
            ("train", r, {"host": 0, "gpu": r}, pid, "running", "train-torchrun-hang7") for r, pid in enumerate(pids)
        ]

        seen = debug(
            env,
            "stacks train",
            "interrupt train ranks(:)",
            "cast train ranks(1) up 2",
            "cast train ranks(:) p kind",
            "continue",
        )
        assert seen.returncode == 0, seen.stdout + seen.stderr
        stacks, _, rest = seen.stdout.partition("Interrupted 3 ranks: train ranks[0-2] (3)\n")
        for function, rank in (("nap", 0), ("wait_for_peers", 1), ("read_reply", 2)):
            assert re.search(rf"train\.py:\d+ {function}  ranks\[{rank}\] \(1\)$", stacks, re.M), stacks
        assert "train ranks[0] (1)\n'sleep'\ntrain ranks[1] (1)\n'event'\ntrain ranks[2] (1)\n'socket'\n" in rest, rest
        assert "Continued 3 ranks: train ranks[0-2]" in rest, rest

        again = join(elsewhere, *chosen, "--timeout", PATIENCE)
        assert (again.returncode, again.stdout, again.stderr) == (
            0,
            "joined 3 processes: train ranks[0-2] (3 had joined before)\n",
            "",
        )
        assert [r.state for r in wait_for_all_rows(env, lambda rows: len(rows) == 3)] == ["running"] * 3
    finally:
        program.stop()


BLOCKED = textwrap.dedent("""
    import socket
    import sys
    import time

    sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    print("WAITING", flush=True)
    reply = sock.recv(1)
    while True:
        time.sleep(0.2)
""")


@needs_remote_exec
@pytest.mark.timeout(180)
def test_a_process_blocked_in_a_c_call_is_named_and_joins_once_the_call_returns(env, tmp_path):
    (tmp_path / "blocked.py").write_text(BLOCKED)
    with socket.create_server(("127.0.0.1", 0)) as server:
        program = Program(env, tmp_path / "blocked.py", str(server.getsockname()[1]), cwd=tmp_path)
        try:
            peer, _ = server.accept()
            with peer:
                wait_for_lines(program, "WAITING", 1)
                pid = program.proc.pid
                done = join(env, str(pid), "--timeout", "3")
                assert (done.returncode, done.stdout) == (1, "")
                assert done.stderr == (
                    f"monarch-pdb: {pid} (python) has not joined within 3 s: its main thread is blocked in a C call "
                    "under blocked.py:8 <module>; it joins when that call returns or a signal arrives, or at "
                    "once with --wake\n"
                )
                peer.sendall(b"!")
                rows = wait_for_all_rows(env, lambda rows: [r.pid for r in rows] == [pid], timeout=90)
                assert (rows[0].actor, rows[0].rank, rows[0].state) == ("blocked", pid, "running")
        finally:
            program.stop()


@needs_remote_exec
@pytest.mark.timeout(180)
def test_a_process_joined_whose_broker_never_answers_is_named_with_the_rank_it_joined_as(env, tmp_path):
    (tmp_path / "idle.py").write_text(IDLE)
    other = socket.create_server(("127.0.0.1", 0))  # another program holds the port, and speaks no ZeroMQ
    port = other.getsockname()[1]
    remote = dict(
        env, MONARCH_PDB_SECRET="s" * 64, MONARCH_DEBUG_SERVER_PORT=str(port), MONARCH_PDB_CONNECT_TIMEOUT="1"
    )
    program = Program(remote, tmp_path / "idle.py", cwd=tmp_path)
    try:
        wait_for_lines(program, "WAITING", 1)
        pid = program.proc.pid
        done = join(remote, str(pid), "--timeout", "30")
        assert (done.returncode, done.stdout) == (1, "")
        assert re.fullmatch(
            rf"monarch-pdb: {pid} \(python\) joined as idle {pid}, but no debug broker answers at "
            rf"127\.0\.0\.1:{port} .*\n",
            done.stderr,
        ), done.stderr
        assert program.proc.poll() is None
    finally:
        program.stop()
        other.close()


def _other_python() -> str | None:
    """A Python 3.14+ that is not the one running the tests, as python3.X on PATH."""
    for minor in (14, 15, 16):
        if minor != sys.version_info[1] and shutil.which(f"python3.{minor}"):
            return f"python3.{minor}"
    return None


REFUSALS = {
    "remote debugging disabled by the environment": (
        {"PYTHON_DISABLE_REMOTE_DEBUG": "1"},
        [sys.executable],
        r"{pid} \(python\) does not allow remote debugging \(PYTHON_DISABLE_REMOTE_DEBUG, or -X "
        r"disable-remote-debug\); start it with PYTHONBREAKPOINT=monarch_pdb.set_trace or monarch_pdb.install\(\)",
    ),
    "remote debugging disabled by -X": (
        {},
        [sys.executable, "-X", "disable-remote-debug"],
        r"{pid} \(python\) does not allow remote debugging .*",
    ),
    "monarch_pdb not importable there": (
        {},
        [sys.executable, "-S"],
        rf"monarch_pdb cannot be imported in {{pid}} \(python\), whose Python is {re.escape(sys.prefix)}: install it "
        rf"there with `{re.escape(sys.executable)} -m pip install monarch-pdb`",
    ),
    "not a Python process": ({}, ["sleep"], r"{pid} \(sleep\) is not a Python process"),
    "another Python": (
        {},
        [_other_python() or "python3"],
        r"{pid} \(python3\.\d+\) runs Python 3\.\d+ and join runs on Python 3\.\d+: sys\.remote_exec needs the same "
        r"Python on both sides; run join with Python 3\.\d+, or with --wake \(through gdb\)",
    ),
}


@needs_remote_exec
@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_process_that_cannot_be_joined_is_refused_in_one_line_and_left_as_it_was(env, tmp_path, case):
    variables, launcher, refusal = REFUSALS[case]
    if case == "another Python" and _other_python() is None:
        pytest.skip("no other Python 3.14+ on PATH (python3.X)")
    (tmp_path / "idle.py").write_text(IDLE)
    program = Program(
        dict(env, **variables),
        "3600" if launcher == ["sleep"] else tmp_path / "idle.py",
        launcher=launcher,
        cwd=tmp_path,
    )
    try:
        if launcher != ["sleep"]:
            wait_for_lines(program, "WAITING", 1)
        done = join(env, str(program.proc.pid), "--timeout", PATIENCE)
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        assert re.fullmatch(f"monarch-pdb: {refusal.format(pid=program.proc.pid)}\n", done.stderr), done.stderr
        assert program.proc.poll() is None
        os.killpg(program.proc.pid, signal.SIGKILL)
        assert not program.proc.communicate()[0].strip(), "the refused process printed something"
    finally:
        if program.proc.poll() is None:
            program.stop()
    assert not list((tmp_path / "run").glob("broker-*.json")), "a refused process started a broker"


def _older_python() -> str | None:
    if sys.version_info < (3, 14):
        return sys.executable
    return next((f"python3.{m}" for m in (11, 12, 13, 10) if shutil.which(f"python3.{m}")), None)


@pytest.mark.timeout(120)
def test_a_python_older_than_3_14_is_refused_with_what_to_do_instead(env, tmp_path):
    older = _older_python()
    if older is None:
        pytest.skip("no Python older than 3.14 on PATH (python3.X)")
    (tmp_path / "idle.py").write_text(IDLE)
    program = Program(env, tmp_path / "idle.py", launcher=[older], cwd=tmp_path)
    try:
        wait_for_lines(program, "WAITING", 1)
        done = join(env, str(program.proc.pid))
        assert (done.returncode, done.stdout) == (1, "")
        assert re.fullmatch(
            rf"monarch-pdb: {program.proc.pid} runs Python 3\.1[0-3]; joining needs 3\.14 or later "
            r"there, or --wake \(through gdb\); start it with PYTHONBREAKPOINT=monarch_pdb\.set_trace or "
            r"monarch_pdb\.install\(\)\n",
            done.stderr,
        ), done.stderr
        assert program.proc.poll() is None
    finally:
        program.stop()


def _nobody() -> pwd.struct_passwd | None:
    """The user nobody, where the tests run as root and nobody may run this Python."""
    try:
        nobody = pwd.getpwnam("nobody") if os.getuid() == 0 else None
    except KeyError:
        return None
    try:
        subprocess.run(
            [sys.executable, "-c", ""], user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[], check=True, timeout=60
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return nobody


UNDUMPABLE = (
    'import ctypes, time\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\nprint("WAITING", flush=True)\ntime.sleep(3600)\n'
)
"""A process that forbids being read (PR_SET_DUMPABLE 0), as a setuid program or a hardened one does."""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("whose", ["another user's", "an undumpable one"])
def test_a_process_join_may_not_reach_is_refused_in_one_line(env, whose):
    nobody = _nobody()
    if nobody is None:
        pytest.skip("needs root, and a Python the user nobody may run, to run processes as nobody")
    code = IDLE if whose == "another user's" else UNDUMPABLE
    target = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        user=nobody.pw_uid,
        group=nobody.pw_gid,
        extra_groups=[],
        start_new_session=True,
    )
    try:
        assert target.stdout.readline() == "WAITING\n"
        as_user = (
            {} if whose == "another user's" else {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
        )
        done = subprocess.run(
            [*JOIN, str(target.pid)],
            env=dict(env, HOME="/"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=90,
            **as_user,
        )
        assert (done.returncode, done.stdout) == (1, "")
        if whose == "another user's":
            expected = (
                rf"{target.pid} \(python\S*\) belongs to user nobody: join it as nobody, whose broker and "
                "secret it uses"
            )
        else:
            expected = rf"not permitted to reach {target.pid} \(.*\): join it as its user with CAP_SYS_PTRACE, .*"
        assert re.fullmatch(f"monarch-pdb: {expected}\n", done.stderr), done.stderr
        assert target.poll() is None
    finally:
        target.kill()
        target.communicate()


@pytest.mark.timeout(60)
def test_no_process_and_no_children_are_refused(env, tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    done = join(env, str(gone.pid))
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"monarch-pdb: {gone.pid}: no such process\n")
    lonely = Program(env, "3600", launcher=["sleep"])
    try:
        done = join(env, "--children-of", str(lonely.proc.pid))
        assert (done.returncode, done.stderr) == (
            1,
            f"monarch-pdb: {lonely.proc.pid} runs no Python process below it\n",
        )
    finally:
        lonely.stop()


@pytest.mark.timeout(60)
def test_the_ranks_below_a_program_of_our_actor_runtime_are_its_workers_not_their_fork_server(env, example):
    rows = wait_for_all_rows(env, lambda rows: len(rows) == 16)
    assert children_of(example.proc.pid) == sorted(row.pid for row in rows)


HUNG = textwrap.dedent("""
    import os
    import socket
    import threading
    import time

    rank = int(os.environ["RANK"])


    def nap():
        kind = "sleep"
        started = time.monotonic()
        time.sleep(float(os.environ["NAP"]))
        os.write(1, f"WOKE {time.monotonic() - started:.1f}\\n".encode())
        threading.Event().wait()


    def wait_for_peers():
        kind = "event"
        threading.Event().wait()


    def read_reply():
        kind = "socket"
        mine, theirs = socket.socketpair()
        mine.recv(1)


    os.write(1, f"WAITING {rank} {os.getpid()}\\n".encode())
    (nap, wait_for_peers, read_reply)[rank]()
""")
"""A job that hangs for good, as torchrun starts it: each rank's main thread blocked in one C
call that never returns (rank 0's sleep ends, late, then it blocks too)."""
NAP = 15.0


needs_gdb = pytest.mark.skipif(gdb() is None, reason="gdb is not installed (pip install 'monarch-pdb[wake]')")


@needs_gdb
@pytest.mark.timeout(240)
def test_wake_joins_processes_blocked_for_good_on_any_python_and_their_calls_go_on(env, tmp_path):
    needs_gdb_calls()
    (tmp_path / "train.py").write_text(HUNG)
    (tmp_path / "launch.py").write_text(LAUNCHER)
    program = Program(dict(env, NAP=str(NAP)), tmp_path / "launch.py", "train.py", cwd=tmp_path)
    try:
        wait_for_lines(program, "WAITING", 3)
        elsewhere = dict(env, MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "join's own"))
        done = join(elsewhere, "--wake", "--children-of", str(program.proc.pid), "--timeout", PATIENCE)
        assert (done.returncode, done.stdout, done.stderr) == (0, "joined 3 processes: train ranks[0-2]\n", "")

        # A rank blocked for good in a library's wait stops inside it (threading.py): an
        # expression that reads the same in any frame.
        seen = debug(
            env, "interrupt train ranks(:)", "cast train ranks(:) p __import__('os').environ['RANK']", "continue"
        )
        assert seen.returncode == 0, seen.stdout + seen.stderr
        assert "Interrupted 3 ranks: train ranks[0-2] (3)\n" in seen.stdout, seen.stdout
        assert "train ranks[0] (1)\n'0'\ntrain ranks[1] (1)\n'1'\ntrain ranks[2] (1)\n'2'\n" in seen.stdout
        assert "Continued 3 ranks: train ranks[0-2]" in seen.stdout, seen.stdout

        woke = re.search(r"^WOKE ([\d.]+)$", wait_for_lines(program, "WOKE", 1, timeout=NAP + 60), re.M)
        assert woke and float(woke[1]) >= NAP, "the sleep went on after the join, and ended at its own time"
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_wake_without_its_gdb_says_so_and_leaves_the_process_as_it_was(env, tmp_path):
    (tmp_path / "idle.py").write_text(IDLE)
    program = Program(env, tmp_path / "idle.py", cwd=tmp_path)
    try:
        wait_for_lines(program, "WAITING", 1)
        no_gdb = dict(env, MONARCH_PDB_GDB="no-such-gdb")
        done = join(no_gdb, "--wake", str(program.proc.pid))
        assert (done.returncode, done.stdout, done.stderr) == (
            1,
            "",
            f"monarch-pdb: {program.proc.pid} (python): MONARCH_PDB_GDB names 'no-such-gdb', which is not a "
            "program here\n",
        )
        assert program.proc.poll() is None
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_wake_refuses_what_is_not_a_python_process_before_looking_for_gdb(env):
    program = Program(env, "3600", launcher=["sleep"])
    try:
        no_gdb = dict(env, PATH=os.path.dirname(sys.executable))
        done = join(no_gdb, "--wake", str(program.proc.pid))
        assert (done.returncode, done.stdout, done.stderr) == (
            1,
            "",
            f"monarch-pdb: {program.proc.pid} (sleep) is not a Python process\n",
        )
        assert program.proc.poll() is None
    finally:
        program.stop()


def _tracer(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return int(re.search(r"^TracerPid:\s*(\d+)", f.read(), re.M)[1])


@needs_gdb
@pytest.mark.timeout(120)
def test_wake_of_a_process_another_debugger_holds_names_that_debugger_and_leaves_both_be(env, tmp_path):
    (tmp_path / "idle.py").write_text(IDLE)
    program = Program(env, tmp_path / "idle.py", cwd=tmp_path)
    holder = None
    try:
        wait_for_lines(program, "WAITING", 1)
        pid = program.proc.pid
        holder = subprocess.Popen(
            [gdb(), "-nx", "-batch", "-p", str(pid), "-ex=shell read line"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        deadline = time.monotonic() + 60
        while _tracer(pid) != holder.pid:
            assert time.monotonic() < deadline and holder.poll() is None, "gdb never attached"
            time.sleep(0.05)
        done = join(env, "--wake", str(pid))
        assert (done.returncode, done.stdout, done.stderr) == (
            1,
            "",
            f"monarch-pdb: {pid} (python) is traced by process {holder.pid} (gdb), and ptrace allows one debugger "
            "at a time: join it with --wake once that one has detached\n",
        )
        holder.communicate("\n", timeout=60)
        assert holder.returncode == 0 and program.proc.poll() is None
        assert not list((tmp_path / "run").glob("join-*")), "a refused join left files"
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.communicate()
        program.stop()


@pytest.mark.timeout(240)
def test_two_wake_joins_of_one_process_at_once_both_end_joined_and_print_nothing_into_it(env, tmp_path):
    needs_gdb_calls()
    (tmp_path / "idle.py").write_text(IDLE)
    program = Program(env, tmp_path / "idle.py", cwd=tmp_path)
    try:
        wait_for_lines(program, "WAITING", 1)
        pid = program.proc.pid
        both = [
            subprocess.Popen(
                [*JOIN, "--wake", str(pid), "--timeout", PATIENCE],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        said = sorted((*one.communicate(timeout=180), one.returncode) for one in both)
        assert said == [
            (f"joined 1 process: idle ranks[{pid}]\n", "", 0),
            (f"joined 1 process: idle ranks[{pid}] (1 had joined before)\n", "", 0),
        ]
        assert [r.pid for r in wait_for_all_rows(env, lambda rows: len(rows) == 1)] == [pid]
        assert not list((tmp_path / "run").glob("join-*")), "a join left files"
        os.killpg(pid, signal.SIGKILL)
        assert not program.proc.communicate()[0].strip(), "the joined process printed something"
    finally:
        if program.proc.poll() is None:
            program.stop()


SLOW_GDB = {
    "slower than join's time-out": (
        "sleep 4",
        ["--timeout", "2"],
        "",
    ),
    "slower than its own time-out": (
        "exec sleep 600",
        ["--gdb-timeout", "2"],
        "monarch-pdb: {pid} (python): gdb took longer than 2 s (it was stopped), but the process joined\n",
    ),
}
"""How gdb is slow once it has run the loading (as one reading libtorch's symbols was): what
follows it, join's options, and what join says of it."""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", list(SLOW_GDB))
def test_a_process_joined_through_a_slow_gdb_is_joined_and_listed(env, tmp_path, case):
    needs_gdb_calls()
    after, options, note = SLOW_GDB[case]
    slow_gdb = tmp_path / "gdb"
    slow_gdb.write_text(f'#!/bin/sh\n{gdb()} "$@"\n{after}\n')
    slow_gdb.chmod(0o755)
    (tmp_path / "idle.py").write_text(IDLE)
    program = Program(env, tmp_path / "idle.py", cwd=tmp_path)
    try:
        wait_for_lines(program, "WAITING", 1)
        pid = program.proc.pid
        slow = dict(env, MONARCH_PDB_GDB=str(slow_gdb))
        done = join(slow, "--wake", str(pid), *options)
        assert (done.returncode, done.stdout, done.stderr) == (
            0,
            f"joined 1 process: idle ranks[{pid}]\n",
            note.format(pid=pid),
        )
        assert [r.pid for r in wait_for_all_rows(env, lambda rows: len(rows) == 1)] == [pid]
        assert not list((tmp_path / "run").glob("join-*")), "a join left files"
    finally:
        program.stop()


SPINNING = textwrap.dedent("""
    import ctypes
    import sys
    import threading

    libc = ctypes.CDLL(None)
    lock = ctypes.c_int()
    libc.pthread_spin_init(ctypes.byref(lock), 0)
    libc.pthread_spin_lock(ctypes.byref(lock))


    def release():
        sys.stdin.readline()
        libc.pthread_spin_unlock(ctypes.byref(lock))


    threading.Thread(target=release).start()
    print("WAITING", flush=True)
    libc.pthread_spin_lock(ctypes.byref(lock))  # busy in C, without the GIL, until the test says
    for _ in range(1000):  # bytecodes, between which a pending call runs
        pass
    print("DONE", sorted(name for name in sys.modules if name.startswith("monarch_pdb")), flush=True)
""")
"""A process whose main thread is busy in a C call (state R) until a line comes on its stdin."""


@pytest.mark.timeout(180)
def test_a_wake_join_that_times_out_leaves_no_files_and_its_withdrawn_request_prints_nothing(env, tmp_path):
    needs_gdb_calls()
    (tmp_path / "spin.py").write_text(SPINNING)
    program = Program(env, tmp_path / "spin.py", cwd=tmp_path, stdin=subprocess.PIPE)
    try:
        wait_for_lines(program, "WAITING", 1)
        pid = program.proc.pid
        done = join(env, "--wake", str(pid), "--timeout", "2")
        assert (done.returncode, done.stdout) == (1, "")
        assert re.fullmatch(
            rf"monarch-pdb: {pid} \(python\) has not joined within 2 s: its main thread is busy in a C call.*; "
            r"the request is withdrawn \(--wake\): join it again once it runs Python code\n",
            done.stderr,
        ), done.stderr
        assert not list((tmp_path / "run").glob("join-*")), "the join that timed out left files"
        rest, _ = program.proc.communicate("\n", timeout=120)
        assert (program.proc.returncode, rest.strip()) == (0, "DONE []"), "the withdrawn request ran, or printed"
    finally:
        if program.proc.poll() is None:
            program.stop()


@pytest.mark.timeout(90)
def test_stacks_reads_a_hung_job_that_never_loaded_the_debugger_from_outside(env, tmp_path):
    (tmp_path / "train.py").write_text(HUNG)
    (tmp_path / "launch.py").write_text(LAUNCHER)
    program = Program(dict(env, NAP="3600"), tmp_path / "launch.py", "train.py", cwd=tmp_path)
    try:
        wait_for_lines(program, "WAITING", 3)
        stacks = [DEBUG_SHELL[0], "stacks", "--children-of", str(program.proc.pid)]

        def read(*options: str) -> str:
            done = subprocess.run([*stacks, *options], env=env, capture_output=True, text=True, timeout=60)
            assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
            return done.stdout

        plain = read()
        assert plain.startswith("train ranks[0-2] (3): 3 distinct stacks\n"), plain
        for rank, function in enumerate(("nap", "wait_for_peers", "read_reply")):
            assert re.search(rf"train\.py:\d+ {function}  ranks\[{rank}\] \(1\)$", plain, re.M), plain
        assert "libc" not in plain and "(frames only)" not in plain, "Python frames alone unless --native"

        native = read("--native", "--locals")
        assert re.search(r" recv \(libc\.so\.6\)  ranks\[2\] \(1\)$", native, re.M), native
        assert re.search(
            r"^\? \(libc\.so\.6\) … train\.py:\d+ <module> \(\d+ frames\)  ranks\[0-2\] \(3\)$", native, re.M
        ), "the C frames every rank starts in, merged though their addresses differ: " + native
        assert re.search(r"^locals of train\.py:\d+ nap  ranks\[0\] \(1\)\n  kind = .sleep.$", native, re.M), native

        assert json.loads(read("--json"))["actor"] == "train"
    finally:
        program.stop()


@pytest.mark.timeout(30)
def test_stacks_of_what_is_not_a_python_process_says_so_in_one_line(env, tmp_path):
    program = Program(env, "3600", launcher=["sleep"])
    try:
        done = subprocess.run(
            [DEBUG_SHELL[0], "stacks", str(program.proc.pid)], env=env, capture_output=True, text=True, timeout=30
        )
        assert (done.returncode, done.stdout) == (
            1,
            f"no answer from processes pids ranks[{program.proc.pid}] (1): process {program.proc.pid}: "
            "not a Python process\n",
        ), done.stdout + done.stderr
    finally:
        program.stop()
