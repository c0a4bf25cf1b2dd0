"""`join --wake` of processes that imported torch, for real: gdb reads the symbols of the Python
library alone, not libtorch's, so the join is quick, and each process is listed by the broker
once join has said so. Needs torch (`make test-engines` installs it) and a gdb that can run code
in a process."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from programs import DEBUG_SHELL, Program, needs_gdb_calls, wait_for_all_rows, wait_for_lines

pytest.importorskip("torch", reason="torch is not installed (make test-engines installs monarch-pdb[torch])")

MODEL = 'import threading\nimport torch\nprint("WAITING", flush=True)\nthreading.Event().wait()\n'
"""A process that imported torch (libtorch mapped) and waits for good, its main thread blocked."""
PROCESSES = 2


@pytest.mark.timeout(300)
def test_processes_that_imported_torch_are_joined_with_wake_and_listed(env, tmp_path):
    needs_gdb_calls()
    (tmp_path / "model.py").write_text(MODEL)
    programs = [Program(env, tmp_path / "model.py", cwd=tmp_path) for _ in range(PROCESSES)]
    try:
        for program in programs:
            wait_for_lines(program, "WAITING", 1, timeout=180)
        pids = sorted(program.proc.pid for program in programs)
        done = subprocess.run(
            [DEBUG_SHELL[0], "join", "--wake", *map(str, pids)],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=240,
        )
        joined = ", ".join(f"model-{pid}:model ranks[{pid}]" for pid in pids)
        assert (done.returncode, done.stdout, done.stderr) == (0, f"joined {PROCESSES} processes: {joined}\n", "")
        rows = wait_for_all_rows(env, lambda rows: len(rows) == PROCESSES)
        assert sorted((r.pid, r.actor, r.state) for r in rows) == [(pid, "model", "running") for pid in pids]
        for program in programs:
            os.killpg(program.proc.pid, signal.SIGKILL)
            assert not program.proc.communicate()[0].strip(), "a joined process printed something"
    finally:
        for program in programs:
            if program.proc.poll() is None:
                program.stop()
