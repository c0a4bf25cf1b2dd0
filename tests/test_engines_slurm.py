"""Slurm, for real: srun starts four ranks on a private one-node cluster (slurm_cluster.py); they
stop at breakpoint() and are listed as one job named after Slurm's job and step, with Slurm's
ranks and {host, gpu} coordinates; cast and continue work and srun exits 0.
Needs root and Debian's slurm-wlm."""

from __future__ import annotations

import sys

import pytest
from programs import LAUNCHED_RANK, Program, debug_launched_ranks
from slurm_cluster import SKIP_REASON, SRUN, slurm  # noqa: F401 (slurm: the fixture)

pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


@pytest.mark.timeout(180)
def test_srun_ranks_are_one_job_with_slurm_ranks(env, slurm, tmp_path, shell):
    script = tmp_path / "solver.py"
    script.write_text(LAUNCHED_RANK)
    program = Program(
        dict(slurm.env, PYTHONBREAKPOINT="monarch_pdb.set_trace"),
        script,
        "SLURM_PROCID",
        cwd=tmp_path,
        launcher=[SRUN, "--ntasks=4", sys.executable],
    )

    def is_the_step(job: str) -> bool:
        """The job id Slurm itself reports for the running job, and srun's first step."""
        return job == f"solver-slurm-{slurm.run('squeue', '--noheader', '--format=%i').strip()}.0"

    try:
        debug_launched_ranks(env, shell, program, is_the_step)
    finally:
        program.stop()
