"""Starting the programs under test (the guide's example, small variants) and waiting on them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from monarch_pdb import settings as settings_module
from monarch_pdb import wire
from monarch_pdb.client.connection import ShellConnection

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class Program:
    """A program run in its own process group, so everything it started can be ended at once."""

    def __init__(self, env: dict[str, str], script: Path | str, *args: str, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )

    def finish(self, timeout: float = 30.0) -> tuple[int, str]:
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.communicate()


def settings_for(env: dict[str, str]) -> settings_module.Settings:
    return settings_module.load(env)


def wait_for_sessions(env: dict[str, str], count: int, timeout: float = 30.0, state: str | None = None) -> list[dict]:
    """Block until `count` sessions are listed (optionally in one state); returns the rows.

    Re-lists whenever the broker publishes an event, so it never sleeps on a guess.
    """
    deadline = time.monotonic() + timeout
    changed = threading.Event()
    settings = settings_for(env).with_overrides(connect_timeout=timeout)
    conn = ShellConnection.open(settings, on_events=lambda events: changed.set())
    try:
        while True:
            changed.clear()
            rows = conn.request(wire.ListSessions(), wire.SessionList).rows  # type: ignore[attr-defined]
            if state is not None:
                rows = [r for r in rows if r["state"] == state]
            if len(rows) >= count:
                return rows
            if not changed.wait(max(0.0, deadline - time.monotonic())):
                raise AssertionError(f"expected {count} sessions, saw {len(rows)}: {rows}")
    finally:
        conn.close()
