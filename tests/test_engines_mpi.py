"""Open MPI, for real: four ranks started by mpirun stop at breakpoint() and are listed as one
job with MPI's ranks and {host, gpu} coordinates; cast and continue work and mpirun exits 0.
Needs mpirun (Debian's openmpi-bin)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from programs import LAUNCHED_RANK, Program, debug_launched_ranks

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun is not installed (Debian: apt-get install openmpi-bin)")


@pytest.mark.timeout(120)
def test_mpirun_ranks_are_one_job_with_mpi_ranks(env, tmp_path, shell):
    script = tmp_path / "solver.py"
    script.write_text(LAUNCHED_RANK)
    as_root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}
    program = Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", **as_root), script, "OMPI_COMM_WORLD_RANK",
                      cwd=tmp_path,
                      launcher=[MPIRUN, "--oversubscribe", "-np", "4", "-x", "PYTHONBREAKPOINT", sys.executable])
    try:
        debug_launched_ranks(env, shell, program, lambda job: job.startswith("solver-mpi-"))
    finally:
        program.stop()
