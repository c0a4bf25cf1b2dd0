"""Real Monarch: the guide's program, unchanged but for importing `monarch.actor` and one line
(`monarch_pdb.install()`), sends its breakpoints to our broker with Monarch's actor names,
ranks and coordinates, and its ranks that raise after a breakpoint stop in post-mortem, as in
Monarch's own debugger. The code of its main script, which Monarch's procs run as
`<dynamic-code>`, is named by the script's file. Ranks that run without a breakpoint, on the
actor's thread, are seen and stopped there. Needs torchmonarch (`make test-engines` installs it)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from programs import DEBUG_SHELL, EXAMPLES, Program, interrupt_running_ranks, wait_for_all_rows, wait_for_sessions

pytest.importorskip(
    "monarch.actor", reason="torchmonarch is not installed (make test-engines installs monarch-pdb[monarch])"
)

EMBEDDED = "from monarch_pdb.actor import Actor, current_rank, endpoint, this_host\n"
REAL = "from monarch.actor import Actor, current_rank, endpoint, this_host\nimport monarch_pdb\nmonarch_pdb.install()\n"
TABLE_ROW = re.compile(r"^\| (\w+) +\| (\d+) +\| (\{.*?\}) +\| (\S+) +\| (\S+) +\| (\d+) +\|$", re.M)


@pytest.mark.timeout(240)
def test_the_guides_program_on_real_monarch(env, tmp_path, shell):
    source = (EXAMPLES / "debugging.py").read_text()
    assert EMBEDDED in source
    script = tmp_path / "debugging.py"
    script.write_text(source.replace(EMBEDDED, REAL))
    program = Program(env, script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 16, timeout=180)
        sh = shell(command=DEBUG_SHELL)
        rows = TABLE_ROW.findall(sh.command("list"))
        assert [(actor, rank, coords) for actor, rank, coords, *_ in rows] == [
            ("debugee", str(r), f"{{'host': {r // 4}, 'gpu': {r % 4}}}") for r in range(16)
        ]
        assert {function for *_, function, _ in rows} == {"debugging._debugee_actor_internal"}
        stacks = sh.command("stacks debugee")
        assert re.search(r"^\W*debugging\.py:\d+ _debugee_actor_internal  ranks\[", stacks, re.M), stacks
        assert "selectors.py" not in stacks and "<dynamic-code>" not in stacks
        assert f"> {script}(" in sh.command("cast debugee ranks(0) bt")
        assert "breakpoint()  # noqa" in sh.command("cast debugee ranks(0) l")
        assert sh.command("cast debugee ranks(:) p rank % 2") == (
            "debugee ranks[0,2,4,6,8,10,12,14] (8)\n0\ndebugee ranks[1,3,5,7,9,11,13,15] (8)\n1\n"
            "numbers: count 16, min 0 (rank 0), max 1 (rank 1), mean 0.5, NaN/Inf 0, beyond 3 sd 0\n"
        )
        assert sh.command("continue").strip() == "Continued 16 ranks: debugee ranks[0-15]"
        raised = wait_for_sessions(env, 4, timeout=60, state="post-mortem")
        assert sorted(r.rank for r in raised) == [2, 6, 10, 14]
        assert {(r.function, r.filename) for r in raised} == {("debugging._bad_rank", str(script))}
        # Events of those ranks stopping may still be printed above the answer.
        assert "Continued 4 ranks: debugee ranks[2,6,10,14]" in sh.command("continue")
        code, output = program.finish(timeout=60)
        assert code != 0 and "ValueError: bad rank" in output, output
    finally:
        program.stop()


LOOPS = textwrap.dedent("""
    import asyncio
    import os
    import sys
    import time

    from monarch.actor import Actor, endpoint, this_host
    import monarch_pdb
    monarch_pdb.install()


    def wait_for_data(stop):
        polls = 0
        while not os.path.exists(stop):
            time.sleep(0.05)
            polls += 1
        return polls >= 0


    class Loader(Actor):
        @endpoint
        def load(self, stop):
            return wait_for_data(stop)


    class Fetcher(Actor):
        @endpoint
        async def fetch(self, stop):
            polls = 0
            while not os.path.exists(stop):
                await asyncio.sleep(0.05)
                polls += 1
            return polls >= 0


    if __name__ == "__main__":
        procs = this_host().spawn_procs(per_host={"gpu": 2})
        loading = procs.spawn("loader", Loader).load.call(sys.argv[1])
        fetching = procs.spawn("fetcher", Fetcher).fetch.call(sys.argv[1])
        print("LOADED", [value for _, value in loading.get()], "FETCHED", [value for _, value in fetching.get()])
""")


@pytest.mark.timeout(240)
def test_running_monarch_ranks_are_seen_and_stopped_on_their_actors_thread(env, tmp_path):
    script = tmp_path / "loops.py"
    script.write_text(LOOPS)
    program = Program(env, script, str(tmp_path / "stop"), cwd=tmp_path)
    try:
        wanted = {("loader", 0), ("loader", 1), ("fetcher", 0), ("fetcher", 1)}
        wait_for_all_rows(env, lambda rows: wanted <= {(r.actor, r.rank) for r in rows}, timeout=180)
        interrupt_running_ranks(env, "loader", "wait_for_data", script)
        interrupt_running_ranks(env, "fetcher", "fetch", script)
        (tmp_path / "stop").touch()
        code, output = program.finish(timeout=60)
        assert code == 0 and "LOADED [True, True] FETCHED [True, True]" in output, output
    finally:
        program.stop()


@pytest.mark.timeout(120)
def test_monarch_runs_monarchs_own_commands_and_ours_runs_debug(env, broker, tmp_path):
    ours = Path(sys.executable).parent / "monarch"
    if "monarch_pdb" not in ours.read_text():
        pytest.skip("torchmonarch's `monarch` was installed after ours: it runs Monarch's commands itself")

    def monarch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(ours), *args],
            env=dict(env, MONARCH_PDB_HISTORY=""),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = monarch("context", "ls")
    assert (listed.returncode, listed.stdout) == (0, "No contexts.\n"), listed.stderr
    applied = monarch("apply")
    assert applied.returncode == 1 and "No spec found at .monarch/default/spec" in applied.stderr, applied.stderr
    unknown = monarch("bogus")
    assert unknown.returncode == 2 and "invalid choice: 'bogus' (choose from 'context', 'apply'" in unknown.stderr
    for shell in ([str(ours), "debug"], DEBUG_SHELL):
        jobs = subprocess.run(
            [*shell, "-c", "jobs"],
            env=dict(env, MONARCH_PDB_HISTORY=""),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (jobs.returncode, jobs.stderr) == (0, ""), jobs.stderr
