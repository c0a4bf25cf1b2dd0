"""Ray, for real: four actors of examples/ray_actors.py on a local Ray instance stop in a method,
then a task in its function; their breakpoints reach our broker, not Ray's debugger, and with
post-mortem `always` a failing method stops where it raised. A sync actor, an async actor and a
task that run without a breakpoint are seen and stopped in their code, on the thread Ray runs
it on. Needs ray (`make test-engines` installs it)."""

from __future__ import annotations

import re
import textwrap

import pytest
from programs import DEBUG_SHELL, EXAMPLES, Program, interrupt_running_ranks, wait_for_all_rows, wait_for_sessions

pytest.importorskip("ray", reason="ray is not installed (make test-engines installs monarch-pdb[ray])")

TABLE_ROW = re.compile(r"^\| (\w+) +\| (\d+) +\| (\{.*?\}) +\| (\S+) +\| (\S+) +\| (\d+) +\| (\w+ \w+) +\|$", re.M)
ANSWER = re.compile(r"^Learner ranks\[(\d+)\] \(1\)\n'(\w+)'$", re.M)


def cells_of(table: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith("| Actor Name")
    ]


def start(env, *args: str, **extra: str) -> Program:
    return Program(dict(env, **extra), EXAMPLES / "ray_actors.py", *args)


@pytest.mark.timeout(180)
def test_ray_actors_stop_in_our_broker_and_continue(env, shell):
    program = start(env)
    try:
        wait_for_sessions(env, 4, timeout=120)
        sh = shell(command=DEBUG_SHELL)
        rows = TABLE_ROW.findall(sh.command("list"))
        assert [(actor, rank, function) for actor, rank, _, _, function, _, _ in rows] == [
            ("Learner", str(r), "ray_actors.step") for r in range(4)
        ]
        # The Instance column names each actor as Ray itself does.
        ids = dict(
            ANSWER.findall(sh.command("cast Learner ranks(:) p __import__('ray').get_runtime_context().get_actor_id()"))
        )
        assert len(set(ids.values())) == 4
        assert [instance for _, rank, *_, instance in rows] == [f"actor {ids[str(r)]}" for r in range(4)]
        assert sh.command("cast Learner ranks(:) p value") == "".join(
            f"Learner ranks[{r}] (1)\n{r * 10}\n" for r in range(4)
        ) + ("numbers: count 4, min 0 (rank 0), max 30 (rank 3), mean 15, NaN/Inf 0, beyond 3 sd 0\n")
        assert sh.command("continue").strip() == "Continued 4 ranks: Learner ranks[0-3]"
        assert "1 ranks of evaluate stopped" in sh.command("wait evaluate 1 --timeout 60", timeout=70)
        [task] = [r for r in wait_for_sessions(env, 1) if r.actor == "evaluate"]
        assert (task.rank, task.function) == (task.pid, "ray_actors.evaluate")
        assert re.fullmatch(r"task [0-9a-f]+", task.instance), task
        # Every process once: the actors run on as themselves, the task's worker is its session.
        assert [(c[0], c[1], c[6], c[7]) for c in cells_of(sh.command("list --all"))] == [
            ("Learner", str(r), f"actor {ids[str(r)]}", "running") for r in range(4)
        ] + [("evaluate", str(task.pid), task.instance, "breakpoint")]
        assert sh.command("cast evaluate ranks(:) p score").endswith(f"evaluate ranks[{task.pid}] (1)\n300\n")
        assert "Continued 1 rank: evaluate" in sh.command("continue")
        code, output = program.finish(timeout=60)
        assert code == 0 and "STEPPED [1, 11, 21, 31]" in output and "EVALUATED 300" in output, output
    finally:
        program.stop()


@pytest.mark.timeout(180)
def test_ray_post_mortem_always_stops_where_the_method_raised(env, shell):
    program = start(env, "--fail", MONARCH_PDB_POST_MORTEM="always")
    try:
        wait_for_sessions(env, 4, timeout=120, state="breakpoint")
        sh = shell(command=DEBUG_SHELL)
        sh.command("continue")
        sh.command("wait evaluate 1 --timeout 60", timeout=70)
        sh.command("continue")
        rows = wait_for_sessions(env, 4, timeout=60, state="post-mortem")
        assert sorted((r.actor, r.rank, r.function) for r in rows) == [
            ("Learner", r, "ray_actors.fail") for r in range(4)
        ]
        # Events of the ranks stopping may still be printed above an answer: the answer ends the output.
        assert sh.command("cast Learner ranks(2) p lookup").endswith("Learner ranks[2] (1)\n{'rank': 2}\n")
        assert "Continued 4 ranks: Learner ranks[0-3]" in sh.command("continue")
        code, output = program.finish(timeout=60)
        assert code == 0 and "FAILED with KeyError" in output, output
    finally:
        program.stop()


LOOPS = textwrap.dedent("""
    import asyncio
    import os
    import sys
    import time

    import ray


    def wait_for_data(stop):
        polls = 0
        while not os.path.exists(stop):
            time.sleep(0.05)
            polls += 1
        return polls >= 0


    @ray.remote
    class Loader:
        def load(self, stop):
            return wait_for_data(stop)


    @ray.remote
    class Fetcher:
        async def fetch(self, stop):
            polls = 0
            while not os.path.exists(stop):
                await asyncio.sleep(0.05)
                polls += 1
            return polls >= 0


    @ray.remote
    def shuffle(stop):
        return wait_for_data(stop)


    if __name__ == "__main__":
        ray.init(num_cpus=3, include_dashboard=False, runtime_env={"worker_process_setup_hook": "monarch_pdb.install"})
        stop = sys.argv[1]
        print("DONE", ray.get([Loader.remote().load.remote(stop), Fetcher.remote().fetch.remote(stop), shuffle.remote(stop)]))
        ray.shutdown()
""")


@pytest.mark.timeout(180)
def test_running_ray_actors_and_tasks_are_seen_and_stopped_in_their_code(env, tmp_path):
    script = tmp_path / "loops.py"
    script.write_text(LOOPS)
    program = Program(env, script, str(tmp_path / "stop"), cwd=tmp_path)
    try:
        wanted = {"Loader", "Fetcher", "shuffle"}
        wait_for_all_rows(env, lambda rows: wanted <= {r.actor for r in rows if r.state == "running"}, timeout=120)
        interrupt_running_ranks(env, "Loader", "wait_for_data", script)
        interrupt_running_ranks(env, "Fetcher", "fetch", script)
        interrupt_running_ranks(env, "shuffle", "wait_for_data", script)
        (tmp_path / "stop").touch()
        code, output = program.finish(timeout=60)
        assert code == 0 and "DONE [True, True, True]" in output, output
    finally:
        program.stop()
