"""The product's round trips: a real broker, and the guide's example paused at 16 breakpoints.

The example starts exactly as the tests start it (private runtime dir, port 0, loopback), so
its embedded broker belongs to this run alone. The shell side is `BrokerConnection` without a
terminal: what is timed is the shell's connection, the wire, the broker and the agents, not
cmd2 or a pseudo-terminal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from timing import timed

from monarch_pdb import discovery, wire
from monarch_pdb import settings as settings_module
from monarch_pdb.client.connection import BrokerConnection

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "debugging.py"
RANKS = 16
ATTACHED_RANK = 5
START_TIMEOUT = 60.0
ANSWER_TIMEOUT = 10.0


class Example:
    """examples/debugging.py in its own process group, and a shell connection to its broker.

    Leaving the `with` block ends every process the run started, the embedded broker too.
    """

    def __init__(
        self, workdir: Path, script: Path = EXAMPLE, ranks: int = RANKS, attached_rank: int = ATTACHED_RANK
    ) -> None:
        self.script, self.ranks, self.attached_rank = script, ranks, attached_rank
        self.log = workdir / "example.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("MONARCH_PDB_", "MONARCH_DEBUG_"))}
        self.env.update(
            {
                "MONARCH_PDB_RUNTIME_DIR": str(workdir / "run"),
                "MONARCH_DEBUG_SERVER_HOST": "127.0.0.1",
                "MONARCH_DEBUG_SERVER_PORT": "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.proc: subprocess.Popen | None = None
        self.conn: BrokerConnection | None = None
        self.changed = threading.Event()

    def __enter__(self) -> Example:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _start(self) -> None:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(self.script)],
                env=self.env,
                cwd=self.script.parent,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        settings = self._settings().with_overrides(connect_timeout=START_TIMEOUT)
        self.conn = BrokerConnection.open(settings, on_events=lambda events: self.changed.set())
        self._wait_for_sessions()

    def _settings(self) -> settings_module.Settings:
        """The shell's settings read from the example's environment, as a shell in it would."""
        return settings_module.load(self.env)

    def _wait_for_sessions(self) -> None:
        """Re-list whenever the broker announces an event, until every rank is paused."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            self.changed.clear()
            if len(self.list_sessions()) >= self.ranks:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"the example exited ({self.proc.returncode}):\n{self.log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {self.ranks} ranks paused within {START_TIMEOUT:g} s")
            self.changed.wait(0.5)

    def stop(self) -> None:
        """End the example (its workers die with it) and the broker it started, which would
        otherwise outlive it by design."""
        broker = discovery.read_connection_file(self._settings())
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        if broker is not None:
            try:
                os.kill(broker.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    # --- the measurements ----------------------------------------------------------------

    def list_sessions(self) -> list[wire.SessionRow]:
        return self.conn.request(wire.ListSessions(), wire.SessionList).rows  # type: ignore[attr-defined]

    def list_round_trips(self, warmup: int, repeat: int) -> list[int]:
        """`list`: ListSessions -> SessionList with every rank paused, in nanoseconds."""

        def once() -> None:
            rows = self.list_sessions()
            if len(rows) != self.ranks:
                raise RuntimeError(f"list showed {len(rows)} sessions, not {self.ranks}")

        return timed(once, warmup, repeat)

    def attached_round_trips(self, warmup: int, repeat: int) -> list[int]:
        """Attached `p rank`: Send -> the rank's pdb -> SessionOutput(paused), in nanoseconds."""
        attached = self.conn.request(wire.Attach(actor="debugee", rank=self.attached_rank), wire.Attached)
        if not isinstance(attached, wire.Attached):
            raise RuntimeError(f"attach failed: {attached}")
        session = attached.session

        def answer(msg: wire.Message) -> bool:
            return (
                isinstance(msg, (wire.SessionEnded, wire.Error))
                or isinstance(msg, wire.SessionOutput)
                and msg.session == session
                and msg.paused
            )

        def once() -> None:
            self.conn.post(wire.Send(session=session, line="p rank"))
            reply = self.conn.collect(answer, ANSWER_TIMEOUT)
            if not isinstance(reply, wire.SessionOutput) or reply.text != f"{self.attached_rank}\n":
                raise RuntimeError(f"attached `p rank` answered {reply}")

        try:
            return timed(once, warmup, repeat)
        finally:
            self.conn.request(wire.Detach(session=session), wire.Detached)
            self.conn.aside.clear()

    def cast_round_trips(self, warmup: int, repeat: int) -> list[int]:
        """`cast debugee ranks(:) p rank`: every rank's answer back, grouped, in nanoseconds."""

        def once() -> None:
            check_cast(self.conn.cast("debugee", "ranks(:)", "p rank", ANSWER_TIMEOUT), self.ranks)

        return timed(once, warmup, repeat)


def check_cast(result: wire.CastResult, ranks: int) -> None:
    """One group per rank, each holding that rank's own number."""
    if result.missing or len(result.groups) != ranks:
        raise RuntimeError(f"cast gave {len(result.groups)} groups, missing {result.missing}")
    for group in result.groups:
        if group.outcome or len(group.ranks) != 1 or group.output != f"{group.ranks.first}\n":
            raise RuntimeError(f"cast group {group.ranks} printed {group.output!r} ({group.outcome or 'paused'})")
