"""Identity under each launcher, from the variables it sets (torchrun, Slurm, Open MPI, PMI),
set_identity over them, and install()'s post-mortem for uncaught exceptions of a plain process."""

from __future__ import annotations

import textwrap

import pytest
from programs import Program, wait_for_sessions

PROBE = textwrap.dedent('''
    import os

    import monarch_pdb

    if os.environ.get("PROBE_NAMES"):
        monarch_pdb.set_identity(actor="learner", rank=9, coords={"node": 1})
    breakpoint()
''')

LAUNCHERS = {
    "torchrun": ({"RANK": "5", "LOCAL_RANK": "1", "GROUP_RANK": "2", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2",
                  "TORCHELASTIC_RUN_ID": "run7"}, "probe-torchrun-run7", 5, {"host": 2, "gpu": 1}),
    "slurm": ({"SLURM_PROCID": "6", "SLURM_NODEID": "3", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "77"},
              "probe-slurm-77", 6, {"host": 3, "gpu": 0}),
    "openmpi": ({"OMPI_COMM_WORLD_RANK": "7", "OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
                 "OMPI_MCA_ess_base_jobid": "123"}, "probe-mpi-123", 7, {"host": 1, "gpu": 3}),
    "pmi": ({"PMI_RANK": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2", "PMI_KVSNAME": "kvs_9"},
            "probe-mpi-kvs_9", 2, {"host": 1, "gpu": 0}),
}


@pytest.mark.timeout(90)
def test_each_launcher_names_rank_coordinates_and_job(env, tmp_path, shell):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    hooked = dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace")
    programs = {name: Program(dict(hooked, **variables), script, cwd=tmp_path)
                for name, (variables, *_) in LAUNCHERS.items()}
    programs["bare"] = Program(dict(hooked, MONARCH_PDB_ACTOR="trainer"), script, cwd=tmp_path)
    programs["named"] = Program(dict(hooked, PROBE_NAMES="1", MONARCH_PDB_JOB="named", **LAUNCHERS["torchrun"][0]),
                                script, cwd=tmp_path)
    try:
        rows = {row["job"]: row for row in wait_for_sessions(env, len(programs))}
        for name, (_, job, rank, coords) in LAUNCHERS.items():
            assert (rows[job]["actor"], rows[job]["rank"], rows[job]["coords"]) == ("probe", rank, coords), name
        bare_pid = programs["bare"].proc.pid
        bare = rows[f"probe-{bare_pid}"]
        assert (bare["actor"], bare["rank"], bare["coords"]) == ("trainer", bare_pid, {})
        assert (rows["named"]["actor"], rows["named"]["rank"], rows["named"]["coords"]) == ("learner", 9, {"node": 1})
        assert shell().command("continue").strip().startswith(f"Continued {len(programs)} ranks")
        for name, program in programs.items():
            assert program.finish()[0] == 0, name
    finally:
        for program in programs.values():
            program.stop()


FAILING = textwrap.dedent('''
    import os

    import monarch_pdb


    def lookup():
        table = {"present": 1}
        return table["missing"]


    monarch_pdb.install()
    if os.environ.get("PROBE_BREAK"):
        breakpoint()
    lookup()
''')


@pytest.mark.timeout(90)
@pytest.mark.parametrize("policy, stops_first", [("always", False), ("after-breakpoint", True)])
def test_install_stops_an_uncaught_exception_in_post_mortem(env, tmp_path, shell, policy, stops_first):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    extra = {"PROBE_BREAK": "1"} if stops_first else {}
    program = Program(dict(env, MONARCH_PDB_POST_MORTEM=policy, **extra), script, cwd=tmp_path)
    try:
        sh = None
        if stops_first:
            wait_for_sessions(env, 1, state="breakpoint")
            sh = shell()
            sh.command("continue")
        [row] = wait_for_sessions(env, 1, state="post-mortem")
        assert (row["function"], row["rank"]) == ("failing.lookup", program.proc.pid)
        sh = sh or shell()
        assert sh.command("cast failing ranks(:) p table").endswith("\n{'present': 1}\n")
        sh.command("continue")
        code, output = program.finish()
        assert code == 1 and "KeyError: 'missing'" in output
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_install_leaves_an_uncaught_exception_alone_without_a_breakpoint(env, tmp_path):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    code, output = Program(env, script, cwd=tmp_path).finish()
    assert code == 1 and "KeyError: 'missing'" in output and "monarch-pdb" not in output
