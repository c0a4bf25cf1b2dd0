"""Open MPI, for real: four ranks started by mpirun stop at breakpoint() and are listed as one
job with MPI's ranks and {host, gpu} coordinates; cast and continue work and mpirun exits 0.
Needs mpirun (Debian's openmpi-bin)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap

import pytest
from programs import DEBUG_SHELL, Program, wait_for_sessions

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun is not installed (Debian: apt-get install openmpi-bin)")

RANK = textwrap.dedent('''
    import os
    import sys

    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    value = rank + 100
    breakpoint()
    sys.stdout.write(f"rank {rank} done\\n")  # one write: mpirun interleaves the ranks' output
    sys.stdout.flush()
''')


@pytest.mark.timeout(120)
def test_mpirun_ranks_are_one_job_with_mpi_ranks(env, tmp_path, shell):
    script = tmp_path / "solver.py"
    script.write_text(RANK)
    as_root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}
    program = Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", **as_root), script, cwd=tmp_path,
                      launcher=[MPIRUN, "--oversubscribe", "-np", "4", "-x", "PYTHONBREAKPOINT", sys.executable])
    try:
        rows = wait_for_sessions(env, 4, timeout=90)
        assert len({r["job"] for r in rows}) == 1 and rows[0]["job"].startswith("solver-mpi-")
        sh = shell(command=DEBUG_SHELL)
        listed = re.findall(r"^\| (\w+) +\| (\d) +\| (\{.*?\}) +\|", sh.command("list"), re.M)
        assert listed == [("solver", str(r), f"{{'host': 0, 'gpu': {r}}}") for r in range(4)]
        assert sh.command("cast solver ranks(::2) p value") == (
            "solver ranks[0] (1)\n100\nsolver ranks[2] (1)\n102\n"
            "numbers: count 2, min 100 (rank 0), max 102 (rank 2), mean 101, NaN/Inf 0, beyond 3 sd 0\n")
        assert "Continued 4 ranks: solver ranks[0-3]" in sh.command("continue")
        code, output = program.finish(timeout=60)
        assert code == 0 and all(f"rank {r} done" in output for r in range(4)), output
    finally:
        program.stop()
