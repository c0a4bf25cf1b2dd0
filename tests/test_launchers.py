"""Identity under each launcher, from the variables it sets (torchrun, Slurm, Open MPI, PMI),
set_identity over them, and install()'s post-mortem for uncaught exceptions of a plain process."""

from __future__ import annotations

import re
import textwrap

import pytest
from programs import Program, wait_for_all_rows, wait_for_sessions

PROBE = textwrap.dedent("""
    import os

    import monarch_pdb

    if os.environ.get("PROBE_NAMES"):
        monarch_pdb.set_identity(actor="learner", rank=9, coords={"node": 1})
    breakpoint()
""")

LAUNCHERS = {
    "torchrun": (
        {
            "RANK": "5",
            "LOCAL_RANK": "1",
            "GROUP_RANK": "2",
            "WORLD_SIZE": "8",
            "LOCAL_WORLD_SIZE": "2",
            "TORCHELASTIC_RUN_ID": "run7",
        },
        "probe-torchrun-run7",
        5,
        {"host": 2, "gpu": 1},
    ),
    "slurm": (
        {"SLURM_PROCID": "6", "SLURM_NODEID": "3", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "77"},
        "probe-slurm-77",
        6,
        {"host": 3, "gpu": 0},
    ),
    "openmpi": (
        {
            "OMPI_COMM_WORLD_RANK": "7",
            "OMPI_COMM_WORLD_LOCAL_RANK": "3",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
            "OMPI_MCA_ess_base_jobid": "123",
        },
        "probe-mpi-123",
        7,
        {"host": 1, "gpu": 3},
    ),
    "pmi": (
        {"PMI_RANK": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2", "PMI_KVSNAME": "kvs_9"},
        "probe-mpi-kvs_9",
        2,
        {"host": 1, "gpu": 0},
    ),
}


@pytest.mark.timeout(90)
def test_each_launcher_names_rank_coordinates_and_job(env, tmp_path, shell):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    hooked = dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace")
    programs = {
        name: Program(dict(hooked, **variables), script, cwd=tmp_path) for name, (variables, *_) in LAUNCHERS.items()
    }
    programs["bare"] = Program(dict(hooked, MONARCH_PDB_ACTOR="trainer"), script, cwd=tmp_path)
    programs["named"] = Program(
        dict(hooked, PROBE_NAMES="1", MONARCH_PDB_JOB="named", **LAUNCHERS["torchrun"][0]), script, cwd=tmp_path
    )
    try:
        rows = {row.job: row for row in wait_for_sessions(env, len(programs))}
        for name, (_, job, rank, coords) in LAUNCHERS.items():
            assert (rows[job].actor, rows[job].rank, rows[job].coords) == ("probe", rank, coords), name
        bare_pid = programs["bare"].proc.pid
        bare = rows[f"probe-{bare_pid}"]
        assert (bare.actor, bare.rank, bare.coords) == ("trainer", bare_pid, {})
        assert (rows["named"].actor, rows["named"].rank, rows["named"].coords) == ("learner", 9, {"node": 1})
        assert shell().command("continue").strip().startswith(f"Continued {len(programs)} ranks")
        for name, program in programs.items():
            assert program.finish()[0] == 0, name
    finally:
        for program in programs.values():
            program.stop()


FAILING = textwrap.dedent("""
    import os

    import monarch_pdb


    def lookup():
        table = {"present": 1}
        return table["missing"]


    monarch_pdb.install()
    if os.environ.get("PROBE_BREAK"):
        breakpoint()
    lookup()
""")


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
        assert (row.function, row.rank) == ("failing.lookup", program.proc.pid)
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


OTHER_RELEASES = {
    "ray/__init__.py": textwrap.dedent('''
        """A Ray release without the private post-mortem function monarch-pdb replaces."""
        from types import SimpleNamespace

        WORKER_MODE = 1


        def is_initialized():
            return True


        def get_runtime_context():
            return SimpleNamespace(worker=SimpleNamespace(mode=WORKER_MODE), get_task_function_name=lambda: None)
    '''),
    "monarch/__init__.py": "",
    "monarch/_src/__init__.py": "",
    "monarch/_src/actor/__init__.py": "",
    "monarch/_src/actor/host_mesh.py": '"""A Monarch release whose proc meshes are spawned by another class."""\n',
}

BESIDE_ENGINES = textwrap.dedent("""
    import monarch._src.actor.host_mesh
    import ray

    import monarch_pdb

    monarch_pdb.install()
    value = 42
    breakpoint()
    print("FINISHED", flush=True)
""")


@pytest.mark.timeout(60)
def test_engine_releases_whose_insides_differ_are_named_and_the_program_still_runs(env, tmp_path, shell):
    for name, text in OTHER_RELEASES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    script = tmp_path / "beside.py"
    script.write_text(BESIDE_ENGINES)
    program = Program(dict(env, MONARCH_PDB_POST_MORTEM="always"), script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 1)
        assert shell().command("cast beside ranks(:) p value").endswith("\n42\n")
        shell().command("continue")
        code, output = program.finish()
        assert code == 0 and output.splitlines()[-1] == "FINISHED", output
        said = [line for line in output.splitlines() if line.startswith("monarch-pdb:")]
        assert [re.sub(r"into (\S+) \S+ \(", r"into \1 RELEASE (", line, count=1) for line in said] == [
            "monarch-pdb: cannot hook into ray RELEASE (No module named 'ray.util'): "
            "post-mortem of Ray tasks stops in Ray's own debugger",
            "monarch-pdb: cannot hook into ray RELEASE (No module named 'ray._private'): "
            "stacks and interrupt of an async actor reach its event loop, not its methods",
            "monarch-pdb: cannot hook into torchmonarch RELEASE (cannot import name 'HostMesh' from "
            f"'monarch._src.actor.host_mesh' ({tmp_path / 'monarch/_src/actor/host_mesh.py'})): "
            "breakpoints of Monarch's procs stay with Monarch's debugger",
        ], output
    finally:
        program.stop()


WAITING_RANK = textwrap.dedent("""
    import os
    import sys
    import time

    value = int(os.environ["RANK"]) + 100
    breakpoint()
    while not os.path.exists(sys.argv[1]):  # the other ranks' all-reduce
        time.sleep(0.05)
""")


@pytest.mark.timeout(90)
def test_a_rank_continued_without_install_stays_known_as_an_installed_one(env, tmp_path, shell):
    script = tmp_path / "train.py"
    script.write_text(WAITING_RANK)
    released = tmp_path / "released"
    hooked = dict(
        env,
        PYTHONBREAKPOINT="monarch_pdb.set_trace",
        TORCHELASTIC_RUN_ID="run8",
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        GROUP_RANK="0",
    )
    programs = [
        Program(dict(hooked, RANK=str(r), LOCAL_RANK=str(r)), script, str(released), cwd=tmp_path) for r in range(2)
    ]
    try:
        wait_for_sessions(env, 2)
        sh = shell()
        sh.command("cast train ranks(0) c")
        listed = sh.command("list --all")
        assert re.search(r"^\| train +\| 0 .*\| running", listed, re.M), listed
        assert re.search(r"^\| train +\| 1 .*\| breakpoint", listed, re.M), listed
        drawn = sh.command("mesh train")
        assert "\n0  R S\n" in drawn, drawn
        assert re.search(r"train\.py:\d+ <module>  ranks\[0\]", sh.command("stacks train ranks(0)")), "stacks"
        assert sh.command("peek train ranks(0) value") == "train ranks[0] (1)\n100\n"
        assert "Interrupted 1 rank" in sh.command("interrupt train ranks(0)")
        wait_for_sessions(env, 2)
        sh.command("continue")
        released.touch()
        for program in programs:
            assert program.finish()[0] == 0
        rows = wait_for_all_rows(env, lambda rows: [r.state for r in rows] == ["finished"] * 2)
        assert [(r.actor, r.rank) for r in rows] == [("train", 0), ("train", 1)]
    finally:
        for program in programs:
            program.stop()
