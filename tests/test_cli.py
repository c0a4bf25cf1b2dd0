"""`monarch-pdb` and `monarch` on the command line: which program runs which subcommand.
With torchmonarch installed, `monarch` runs Monarch's own commands too
(tests/test_engines_monarch.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from monarch_pdb.cli import monarch_command

BIN = os.path.dirname(sys.executable)


def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        env=dict(env, MONARCH_PDB_HISTORY=""),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.timeout(90)
@pytest.mark.skipif(
    monarch_command() is not None, reason="torchmonarch is installed: its `monarch` runs other commands"
)
def test_without_torchmonarch_monarch_debug_is_the_shell_and_another_command_a_one_line_error(env, broker):
    jobs = run(env, os.path.join(BIN, "monarch"), "debug", "-c", "jobs")
    assert (jobs.returncode, jobs.stderr) == (0, ""), jobs.stderr
    for program in ("monarch", "monarch-pdb"):
        wrong = run(env, os.path.join(BIN, program), "apply", "job.py")
        assert (wrong.returncode, wrong.stdout) == (2, "")
        said = (
            f"{program}: 'apply' is not a command of monarch-pdb (debug, broker, join, stacks, dap, mcp, web, snapshot)"
        )
        if program == "monarch":
            said += ", and torchmonarch, whose `monarch` runs Monarch's own, is not installed"
        assert wrong.stderr.splitlines() == [said]
