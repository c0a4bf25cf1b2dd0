"""`make demo`: run the guide's program with 16 ranks and open the debugger shell on it.

The program runs in the background with its output in a log file; leaving the shell ends the
program, every process it started, and the broker if this demo started it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from monarch_pdb import discovery, settings
from monarch_pdb.client import cli

HERE = Path(__file__).resolve().parent


def start_broker(config: settings.Settings) -> subprocess.Popen | None:
    """A broker for the demo, unless one already serves this port (then share it)."""
    if discovery.broker_running(config):
        return None
    broker = subprocess.Popen([sys.executable, "-m", "monarch_pdb.broker"], stderr=subprocess.PIPE, text=True)
    said = []
    for line in broker.stderr:
        if "listening on" in line:
            threading.Thread(target=broker.stderr.read, daemon=True).start()
            return broker
        said.append(line.strip())
    broker.wait()
    raise SystemExit(f"demo: the broker did not start: {' / '.join(said) or 'no output'}")


def main() -> int:
    config = settings.load()
    broker = start_broker(config)
    log_path = Path(tempfile.gettempdir()) / f"monarch-pdb-demo-{os.getpid()}.log"
    with open(log_path, "w") as log:
        program = subprocess.Popen(
            [sys.executable, str(HERE / "debugging.py")], stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    print(f"Started examples/debugging.py: 16 ranks in a {{'host': 4, 'gpu': 4}} mesh (its output: {log_path}).")
    print("Try: list, attach debugee 13, n, p rank, detach, cast debugee ranks(0,1) n, continue, quit.")
    try:
        return cli.main([])
    finally:
        os.killpg(program.pid, signal.SIGTERM)
        program.wait()
        if broker is not None:
            broker.terminate()
            broker.wait()
        print(f"Stopped the example; its output is in {log_path}.")


if __name__ == "__main__":
    sys.exit(main())
