"""MPI, for real: four ranks started by Open MPI's mpirun, then by MPICH's Hydra mpiexec (which
names the job in no variable), stop at breakpoint() and are listed as one job with MPI's ranks
and {host, gpu} coordinates; cast and continue work and the launcher exits 0.
Needs Debian's openmpi-bin and mpich; each launcher that is missing is skipped."""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from programs import LAUNCHED_RANK, Program, debug_launched_ranks

AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}
OPEN_MPI = shutil.which("mpirun.openmpi") or (shutil.which("mpirun") if shutil.which("ompi_info") else None)
HYDRA = shutil.which("mpiexec.hydra")
LAUNCHERS = [
    pytest.param(
        [OPEN_MPI, "--oversubscribe", "-np", "4", "-x", "PYTHONBREAKPOINT"],
        "OMPI_COMM_WORLD_RANK",
        id="openmpi",
        marks=pytest.mark.skipif(
            OPEN_MPI is None, reason="Open MPI's mpirun is not installed (Debian: apt-get install openmpi-bin)"
        ),
    ),
    pytest.param(
        [HYDRA, "-n", "4"],
        "PMI_RANK",
        id="mpich",
        marks=pytest.mark.skipif(
            HYDRA is None, reason="MPICH's mpiexec.hydra is not installed (Debian: apt-get install mpich)"
        ),
    ),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("launcher", "rank_variable"), LAUNCHERS)
def test_mpi_ranks_are_one_job_with_mpi_ranks(env, tmp_path, shell, launcher, rank_variable):
    script = tmp_path / "solver.py"
    script.write_text(LAUNCHED_RANK)
    program = Program(
        dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", **AS_ROOT),
        script,
        rank_variable,
        cwd=tmp_path,
        launcher=[*launcher, sys.executable],
    )
    try:
        debug_launched_ranks(env, shell, program, lambda job: job.startswith("solver-mpi-"))
    finally:
        program.stop()
