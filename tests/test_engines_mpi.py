"""MPI, for real: four ranks started by Open MPI's mpirun, then by MPICH's Hydra mpiexec (which
names the job in no variable), stop at breakpoint() and are listed as one job with MPI's ranks
and {host, gpu} coordinates; cast and continue work and the launcher exits 0.
Needs Debian's openmpi-bin and mpich; each launcher that is missing is skipped."""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap

import pytest
from programs import DEBUG_SHELL, Program, wait_for_sessions

AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}
OPEN_MPI = shutil.which("mpirun.openmpi") or (shutil.which("mpirun") if shutil.which("ompi_info") else None)
HYDRA = shutil.which("mpiexec.hydra")
LAUNCHERS = [
    pytest.param([OPEN_MPI, "--oversubscribe", "-np", "4", "-x", "PYTHONBREAKPOINT"], id="openmpi", marks=pytest.mark.skipif(
        OPEN_MPI is None, reason="Open MPI's mpirun is not installed (Debian: apt-get install openmpi-bin)")),
    pytest.param([HYDRA, "-n", "4"], id="mpich", marks=pytest.mark.skipif(
        HYDRA is None, reason="MPICH's mpiexec.hydra is not installed (Debian: apt-get install mpich)")),
]

RANK = textwrap.dedent('''
    import os
    import sys

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["PMI_RANK"])
    value = rank + 100
    breakpoint()
    sys.stdout.write(f"rank {rank} done\\n")  # one write: the launcher interleaves the ranks' output
    sys.stdout.flush()
''')


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_mpi_ranks_are_one_job_with_mpi_ranks(env, tmp_path, shell, launcher):
    script = tmp_path / "solver.py"
    script.write_text(RANK)
    program = Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", **AS_ROOT), script, cwd=tmp_path,
                      launcher=[*launcher, sys.executable])
    try:
        rows = wait_for_sessions(env, 4, timeout=90)
        assert len({r["job"] for r in rows}) == 1 and rows[0]["job"].startswith("solver-mpi-"), rows
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
