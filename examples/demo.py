"""`make demo`: run the guide's program with 16 ranks and open the debugger shell on it.

The program runs in the background with its output in a log file; leaving the shell ends the
program, every process it started, and the broker if this demo started it. The broker and the
program run in sessions of their own, and the shell in a process group of its own at the
terminal's foreground, as a shell runs a job: Ctrl-C at its prompt reaches the shell alone, not
the broker (which would die and be replaced under a new secret) nor `make` (which would exit).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from monarch_pdb import discovery, settings

HERE = Path(__file__).resolve().parent


def start_broker(config: settings.Settings) -> subprocess.Popen | None:
    """A broker for the demo, unless one already serves this port (then share it)."""
    if discovery.broker_running(config):
        return None
    broker = subprocess.Popen(
        [sys.executable, "-m", "monarch_pdb.broker"], stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    said = []
    for line in broker.stderr:
        if "listening on" in line:
            threading.Thread(target=broker.stderr.read, daemon=True).start()
            return broker
        said.append(line.strip())
    broker.wait()
    raise SystemExit(f"demo: the broker did not start: {' / '.join(said) or 'no output'}")


OWN_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
"""Popen's arguments that start a child in a process group of its own (`process_group` from 3.11)."""


def run_shell() -> int:
    """`monarch-pdb debug`, its exit status. At a terminal it runs as a job-control shell runs
    a foreground job: in its own process group, given the terminal; when it stops (Ctrl-Z), the
    terminal goes back and this process's group (`make`'s) stops too, so the user's shell sees
    the job stopped, and `fg` gives the terminal to the debugger shell again."""
    shell = subprocess.Popen([sys.executable, "-m", "monarch_pdb", "debug"], **OWN_GROUP)
    if not sys.stdin.isatty():
        return shell.wait()
    tty = sys.stdin.fileno()
    ours = os.getpgrp()
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # to hand the terminal over from the background
    try:
        while True:
            with contextlib.suppress(OSError):  # unless it has ended already
                os.tcsetpgrp(tty, shell.pid)
                os.killpg(shell.pid, signal.SIGCONT)  # one that read the terminal before it had it waits
            _, status = os.waitpid(shell.pid, os.WUNTRACED)
            if not os.WIFSTOPPED(status):
                shell.returncode = os.waitstatus_to_exitcode(status)
                return shell.returncode
            if os.WSTOPSIG(status) not in (signal.SIGTTIN, signal.SIGTTOU):
                os.tcsetpgrp(tty, ours)
                os.killpg(ours, signal.SIGTSTP)
    finally:
        os.tcsetpgrp(tty, ours)
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)


def main() -> int:
    config = settings.load()
    broker = start_broker(config)
    log_path = Path(tempfile.gettempdir()) / f"monarch-pdb-demo-{os.getpid()}.log"
    with open(log_path, "w") as log:
        program = subprocess.Popen(
            [sys.executable, str(HERE / "debugging.py")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    print(f"Started examples/debugging.py: 16 ranks in a {{'host': 4, 'gpu': 4}} mesh (its output: {log_path}).")
    print("Try: list, attach debugee 13, n, p rank, detach, cast debugee ranks(0,1) n, continue, quit.")
    try:
        return run_shell()
    finally:
        os.killpg(program.pid, signal.SIGTERM)
        program.wait()
        if broker is not None:
            broker.terminate()
            broker.wait()
        print(f"Stopped the example; its output is in {log_path}.")


if __name__ == "__main__":
    sys.exit(main())
