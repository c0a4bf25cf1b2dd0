"""An editor's `launch`: the job's command started with a broker of its own, and both ended,
with everything the job started, when the debug session stops.

The broker is started first, on a free port and in a runtime directory of its own (within the
settings' one), so that the job's ranks find it and no other job's; the job runs in a process
group of its own, with
`PYTHONBREAKPOINT=monarch_pdb.set_trace` so that each `breakpoint()` pauses its rank for the
editor. Ending the group ends what the job's launcher (torchrun, a mesh) started under it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from monarch_pdb.settings import Settings

END_WAIT = 5.0
"""Seconds the job's processes and the broker have to end on SIGTERM before they are killed."""
LISTENING = re.compile(r"listening on tcp://")


class LaunchError(Exception):
    """A launch that cannot start; the text is the one line the editor shows."""


@dataclass(frozen=True)
class Command:
    """What to run: the command's words, where, and what to add to its environment."""

    argv: list[str]
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, args: dict) -> Command:
        """From the launch configuration: `program` (a Python file, run by the adapter's
        Python) or `command` (its words), with `cwd`, `env` and `args`."""
        program, command = args.get("program"), args.get("command")
        if (program is None) == (command is None):
            raise LaunchError('launch: give either "program" (a Python file) or "command" (a list of words)')
        if program is not None and (not isinstance(program, str) or not program):
            raise LaunchError(f"launch: program must be a file's path, not {program!r}")
        if command is not None and (
            not isinstance(command, list) or not command or not all(isinstance(word, str) for word in command)
        ):
            raise LaunchError(f"launch: command must be a list of words, not {command!r}")
        extra = args.get("args", [])
        if not isinstance(extra, list) or not all(isinstance(word, str) for word in extra):
            raise LaunchError(f"launch: args must be a list of words, not {extra!r}")
        cwd, env = args.get("cwd"), args.get("env", {})
        if cwd is not None and (not isinstance(cwd, str) or not os.path.isdir(cwd)):
            raise LaunchError(f"launch: cwd {cwd!r} is not a directory")
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise LaunchError("launch: env maps names to strings")
        if program is not None and not os.path.isfile(os.path.join(cwd or "", program)):
            raise LaunchError(
                f"launch: program {program} is not a file"
                + (f" in {cwd}" if cwd and not os.path.isabs(program) else "")
            )
        if program is not None:
            argv = [sys.executable, program]
        else:
            assert command is not None
            argv = list(command)
        return cls(argv + extra, cwd, env)


class Launched:
    """A running job and its broker; `stop` ends both."""

    def __init__(
        self, command: Command, settings: Settings, printed: Callable[[str, str], None], ended: Callable[[int], None]
    ) -> None:
        """`printed(category, text)` is told what the job writes (`stdout`, `stderr`), and
        `ended(status)` that it exited, each on a thread of its own."""
        self.stopping = False
        os.makedirs(settings.runtime_dir, mode=0o700, exist_ok=True)
        self.runtime_dir = tempfile.mkdtemp(prefix="launch-", dir=settings.runtime_dir)
        env = {
            **os.environ,
            "MONARCH_PDB_RUNTIME_DIR": self.runtime_dir,
            "MONARCH_DEBUG_SERVER_HOST": "127.0.0.1",
            "MONARCH_DEBUG_SERVER_PORT": "0",
        }
        self.broker = subprocess.Popen(
            [sys.executable, "-m", "monarch_pdb.broker"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        first = self.broker.stderr.readline() if self.broker.stderr is not None else ""
        found = LISTENING.search(first)
        if found is None:
            self.end(self.broker)
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            raise LaunchError(f"launch: the job's broker did not start: {first.strip() or 'it said nothing'}")
        threading.Thread(target=self.broker.communicate, daemon=True).start()  # its log, read so it never blocks
        # Port 0 names the broker's connection file in its directory, where its port and secret are read.
        self.settings = settings.with_overrides(host="127.0.0.1", port=0, runtime_dir=self.runtime_dir)
        env.update(command.env, PYTHONBREAKPOINT="monarch_pdb.set_trace")
        try:
            self.job = subprocess.Popen(
                command.argv,
                cwd=command.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as error:
            self.end(self.broker)
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            raise LaunchError(f"launch: cannot run {command.argv[0]}: {error.strerror or error}") from None
        readers = [
            threading.Thread(target=self.relay, args=(stream, name, printed), daemon=True)
            for stream, name in ((self.job.stdout, "stdout"), (self.job.stderr, "stderr"))
        ]
        for reader in readers:
            reader.start()
        threading.Thread(target=self.watch, args=(readers, ended), daemon=True).start()

    def relay(self, stream, category: str, printed: Callable[[str, str], None]) -> None:
        for line in iter(stream.readline, b""):
            printed(category, line.decode(errors="replace"))

    def watch(self, readers: list[threading.Thread], ended: Callable[[int], None]) -> None:
        """Tell `ended` once the job exits on its own (not when `stop` ends it)."""
        status = self.job.wait()
        for reader in readers:
            reader.join()
        if not self.stopping:
            ended(status)

    def stop(self) -> None:
        """End the job's process group, then its broker; what is left of either is killed."""
        self.stopping = True
        self.end(self.job)
        self.end(self.broker)
        shutil.rmtree(self.runtime_dir, ignore_errors=True)

    @staticmethod
    def end(proc: subprocess.Popen) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(END_WAIT)
            except subprocess.TimeoutExpired:
                continue
            try:  # the group may outlive its leader (ranks a launcher started)
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
