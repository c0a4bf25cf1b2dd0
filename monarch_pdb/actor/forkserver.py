"""Where a program's workers come from: one process, started with the program's first worker,
that has imported everything a worker runs and forks each new worker from itself, as
multiprocessing's forkserver does. A worker started with `python -m` spent a quarter of a second
of CPU importing the same modules as every other; forked, it starts with them imported.

The fork server is single-threaded and has no ZeroMQ context, so forking it is safe. It asks the
kernel to kill it when its program dies, and each worker it forks asks the same of it, so that
a killed program still takes its workers with it. It tells its program the pid of each worker it
forks and how each one exited, since only it can wait for them.

Run as `python -m monarch_pdb.actor.forkserver FD PROGRAM_PID`.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass

from monarch_pdb.actor import worker

DEBUGGER_MODULES = ("monarch_pdb.rank.hooks", "monarch_pdb.wire.rank_messages")
"""Each worker installs the debugger first thing, and tells its broker the ranks it runs: the
modules for that (ZeroMQ, the rank process, its messages) are imported once in the fork server, before
the forks, not in every worker after its own."""
MAX_REQUEST = 1 << 20
"""The largest request (the program's environment) the fork server reads."""
GONE = "the fork server of this program's workers is gone"


@dataclass(frozen=True)
class Fork:
    """A worker to fork: its working directory and environment, as the program's are now.
    Its connection to the program and the program's stdout and stderr travel beside it."""

    cwd: str
    env: dict[str, str]


@dataclass(frozen=True)
class Kill:
    """Kill a worker, unless it is gone: only its parent, the fork server, knows that its pid
    is not yet free for another process to take."""

    pid: int


@dataclass(frozen=True)
class Started:
    """The worker the program asked for runs, as `pid`."""

    pid: int


@dataclass(frozen=True)
class Exited:
    """How a worker ended: its exit status, or minus the signal that killed it (as Popen says)."""

    pid: int
    returncode: int


def serve(control: socket.socket) -> tuple[int, int] | None:
    """Fork a worker for each request until the program closes `control`. In a forked worker,
    returns its connection's descriptor and its parent's pid; in the fork server, None once the
    program is gone."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live: set[int] = set()
    try:
        while True:
            readable, _, _ = select.select([control.fileno(), wake_r], [], [])
            if wake_r in readable:
                os.read(wake_r, 4096)
                _report_exits(control, live)
            if control.fileno() not in readable:
                continue
            data, fds, _, _ = socket.recv_fds(control, MAX_REQUEST, 3)
            if not data:
                return None
            request: Fork | Kill = pickle.loads(data)
            if isinstance(request, Kill):
                if request.pid in live:
                    os.kill(request.pid, signal.SIGKILL)
                continue
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (wake_r, wake_w, control.fileno()):
                    os.close(fd)
                return _become_worker(request, fds)
            for fd in fds:
                os.close(fd)
            live.add(pid)
            control.send(pickle.dumps(Started(pid)))
    except OSError:
        return None  # the program is gone


def _report_exits(control: socket.socket, live: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        live.discard(pid)
        control.send(pickle.dumps(Exited(pid, os.waitstatus_to_exitcode(status))))


def _become_worker(request: Fork, fds: list[int]) -> tuple[int, int]:
    """This forked process set up as a worker: a session of its own, no stdin, and the
    program's stdout and stderr, directory and environment as they are now."""
    conn, stdout, stderr = fds
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((devnull, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    return conn, os.getppid()


class ForkServer:
    """The program's side: asks for workers, and learns how each one ended."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "monarch_pdb.actor.forkserver", str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self.control = ours
        self.changed = threading.Condition()
        self.started: list[int] = []
        self.exited: dict[int, int] = {}
        self.gone = False
        threading.Thread(target=self._read, name="monarch_pdb.actor fork server", daemon=True).start()

    def fork(self, conn_fd: int) -> Forked:
        """A new worker whose end of its connection to us is `conn_fd`. Called from one
        thread only: the answers come in the order of the requests."""
        request = pickle.dumps(Fork(os.getcwd(), dict(os.environ)))
        try:
            socket.send_fds(self.control, [request], [conn_fd, 1, 2])
        except ConnectionError:
            raise RuntimeError(GONE) from None
        with self.changed:
            self.changed.wait_for(lambda: self.started or self.gone)
            if not self.started:
                raise RuntimeError(GONE)
            return Forked(self, self.started.pop(0))

    def _read(self) -> None:
        while True:
            try:
                data = self.control.recv(4096)
            except OSError:
                data = b""
            with self.changed:
                if not data:
                    self.gone = True
                    self.changed.notify_all()
                    return
                news = pickle.loads(data)
                if isinstance(news, Started):
                    self.started.append(news.pid)
                else:
                    self.exited[news.pid] = news.returncode
                self.changed.notify_all()


@dataclass
class Forked:
    """A worker the fork server forked, as much of a `subprocess.Popen` as a worker needs."""

    server: ForkServer
    pid: int

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status (minus a signal's number); TimeoutError while it runs on past `timeout`."""
        with self.server.changed:
            if not self.server.changed.wait_for(
                lambda: self.pid in self.server.exited or self.server.gone, timeout=timeout
            ):
                raise TimeoutError
            return self.server.exited.get(self.pid, -signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL, sent by the fork server, which knows whether the worker is still there:
        from here, a worker that just ended could have left its pid to another process."""
        try:
            self.server.control.send(pickle.dumps(Kill(self.pid)))
        except OSError:
            pass  # the fork server is gone, and its workers with it


def run(argv: list[str]) -> None:
    """The fork server's life; in each worker it forks, the worker's."""
    fd, program = int(argv[1]), int(argv[2])
    worker.die_with_parent(program)
    for module in DEBUGGER_MODULES:
        importlib.import_module(module)
    forked = serve(socket.socket(fileno=fd))
    if forked is not None:
        worker.main(*forked)


if __name__ == "__main__":
    # What travels between the program and this process names the package's module, never
    # __main__'s copy of it.
    from monarch_pdb.actor import forkserver

    forkserver.run(sys.argv)
