"""The embedded actor runtime, exercised by real programs run as subprocesses."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import MARKER, processes_with_marker, wait_for_exit

from monarch_pdb.actor.errors import name_ranks
from monarch_pdb.actor.point import Extent

HEADER = """\
import asyncio, inspect, json, linecache, os, socket, sys, threading, time
import monarch_pdb
from monarch_pdb.rank import identity
from monarch_pdb.actor import Actor, ActorError, current_rank, endpoint, this_host

def report(**values):
    print("RESULT " + json.dumps(values), flush=True)
"""


def write_program(tmp_path, source: str, name: str = "program.py"):
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(source))
    return path


def run_program(tmp_path, env, source: str, *args: str, timeout: float = 45) -> subprocess.CompletedProcess:
    path = write_program(tmp_path, source)
    return subprocess.run(
        [sys.executable, str(path), *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout
    )


def result(done: subprocess.CompletedProcess, expect_rc: int = 0) -> dict:
    assert done.returncode == expect_rc, f"rc={done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"no RESULT line\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return json.loads(lines[-1][len("RESULT ") :])


def test_rank_sets_and_selection_are_row_major():
    extent = Extent.of({"host": 2, "gpu": 3})
    assert [extent.point(rank).coords for rank in (0, 2, 3, 5)] == [
        {"host": 0, "gpu": 0},
        {"host": 0, "gpu": 2},
        {"host": 1, "gpu": 0},
        {"host": 1, "gpu": 2},
    ]
    assert extent.select(range(6), {"gpu": slice(1, None), "host": -1}) == (4, 5)
    assert name_ranks([14, 2, 6, 10]) == "ranks 2,6,10,14"
    assert name_ranks([0, 1, 2, 3, 5, 8, 9]) == "ranks 0-3,5,8,9"
    assert name_ranks([7]) == "rank 7"


@pytest.mark.timeout(60)
def test_sixteen_ranks_have_row_major_coords_and_values(tmp_path, env):
    done = run_program(
        tmp_path,
        env,
        """
        class Where(Actor):
            @endpoint
            def where(self, offset):
                point = current_rank()
                print(f"hello from rank {point.rank}")
                return {"rank": point.rank, "host": point.get("host"), "value": point.rank * 10 + offset,
                        "pid": os.getpid()}

        if __name__ == "__main__":
            mesh = this_host().spawn_procs(per_host={"host": 4, "gpu": 4}).spawn("where", Where)
            answers = mesh.where.call(offset=1).get()
            try:
                current_rank()
            except RuntimeError as exc:
                outside = str(exc)
            cube = this_host().spawn_procs(per_host={"a": 2, "b": 3, "c": 2}).spawn("cube", Where)
            report(pairs=[[point.rank, point.coords, value] for point, value in answers],
                   values=answers.values(), repr=repr(answers), outside=outside,
                   cube=[[point.rank, point.coords] for point, _ in cube.where.call(0).get()])
    """,
    )
    out = result(done)
    assert [rank for rank, _, _ in out["pairs"]] == list(range(16))
    for rank, coords, value in out["pairs"]:
        assert coords == {"host": rank // 4, "gpu": rank % 4}
        assert value["rank"] == rank and value["host"] == rank // 4 and value["value"] == rank * 10 + 1
    assert out["values"] == [value for _, _, value in out["pairs"]]
    assert len({value["pid"] for value in out["values"]}) == 16
    assert out["repr"].startswith("ValueMesh(host=4, gpu=4):")
    assert "(host=3, gpu=1): {'rank': 13, 'host': 3, 'value': 131" in out["repr"]
    assert "current_rank() only works inside an actor's endpoint" in out["outside"]
    assert out["cube"] == [[r, {"a": r // 6, "b": r // 2 % 3, "c": r % 2}] for r in range(12)]
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("hello")) == sorted(
        f"hello from rank {rank}" for rank in [*range(16), *range(12)]
    )


@pytest.mark.timeout(60)
def test_sync_and_async_endpoints_run_one_at_a_time_in_order(tmp_path, env):
    out = result(
        run_program(
            tmp_path,
            env,
            """
        class Journal(Actor):
            def __init__(self):
                self.entries = []

            @endpoint
            def add(self, entry):
                self.entries.append(entry)

            @endpoint
            async def add_later(self, entry):
                await asyncio.sleep(0.01)
                self.entries.append(entry)
                return current_rank().rank

            @endpoint
            def read(self):
                return self.entries

        async def awaited(mesh):
            return (await mesh.add_later.call("awaited")).values()

        if __name__ == "__main__":
            mesh = this_host().spawn_procs(per_host={"gpu": 2}).spawn("journal", Journal)
            for entry in range(5):
                mesh.add.broadcast(entry)
            mesh.add_later.broadcast("async")
            report(awaited=asyncio.run(awaited(mesh)), entries=mesh.read.call().get().values())
    """,
        )
    )
    assert out["awaited"] == [0, 1]
    assert out["entries"] == [[0, 1, 2, 3, 4, "async", "awaited"]] * 2


@pytest.mark.timeout(60)
def test_error_names_every_failing_rank_and_the_original_exception(tmp_path, env):
    done = run_program(
        tmp_path,
        env,
        """
        def _bad_rank():
            raise ValueError("bad rank")

        class DebugeeActor(Actor):
            @endpoint
            async def to_debug(self):
                rank = current_rank().rank
                if rank % 4 == 2:
                    _bad_rank()
                return rank + 1

            @endpoint
            def die(self, rank):
                if current_rank().rank == rank:
                    os._exit(3)
                return "alive"

        if __name__ == "__main__":
            mesh = this_host().spawn_procs(per_host={"host": 4, "gpu": 4}).spawn("debugee", DebugeeActor)
            try:
                mesh.to_debug.call().get()
            except ActorError as exc:
                error = exc
            try:
                mesh.die.call(5).get()
            except ActorError as exc:
                died = str(exc)
            try:
                mesh.to_debug.call().get()
            except ActorError as exc:
                after = [(e.rank, e.type_name) for e in exc.errors]
            report(message=str(error), call=error.call, total=error.total,
                   errors=[[e.rank, e.coords, e.type_name, e.message, isinstance(e.exception, ValueError)]
                           for e in error.errors],
                   traceback=error.errors[0].traceback, died=died, after=after)
    """,
    )
    out = result(done)
    head, _, rest = out["message"].partition("\n")
    assert head == "4 of 16 ranks of debugee.to_debug raised: ranks 2,6,10,14: ValueError: bad rank"
    assert "rank 2 (host=0, gpu=2) remote traceback:" in rest and "_bad_rank()" in rest
    assert (out["call"], out["total"]) == ("debugee.to_debug", 16)
    assert out["errors"] == [
        [r, {"host": r // 4, "gpu": r % 4}, "ValueError", "bad rank", True] for r in (2, 6, 10, 14)
    ]
    program = str(tmp_path / "program.py")
    assert out["traceback"].startswith(f'Traceback (most recent call last):\n  File "{program}"')
    assert "monarch_pdb/actor" not in out["traceback"]
    assert out["died"].startswith(
        "1 of 16 ranks of debugee.die raised: rank 5: WorkerExited: worker of rank 5 (host=1, gpu=1), pid "
    )
    assert out["died"].endswith("exited with code 3")
    assert sorted(out["after"]) == [
        [2, "ValueError"],
        [5, "WorkerExited"],
        [6, "ValueError"],
        [10, "ValueError"],
        [14, "ValueError"],
    ]
    assert "worker of rank 5 (host=1, gpu=1)" in done.stderr


@pytest.mark.timeout(60)
def test_call_one_choose_broadcast_and_slicing(tmp_path, env):
    done = run_program(
        tmp_path,
        env,
        """
        class Echo(Actor):
            def __init__(self):
                self.seen = []

            @endpoint
            def rank(self):
                return current_rank().rank

            @endpoint
            def remember(self, value):
                self.seen.append(value)

            @endpoint
            def seen_values(self):
                return self.seen

            @endpoint
            def fail(self):
                raise RuntimeError("broadcast failure")

            @endpoint
            def wait_for(self, port):
                with socket.create_connection(("127.0.0.1", port)) as gate:
                    return gate.recv(64).decode()

        def error_of(action):
            try:
                action()
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"

        if __name__ == "__main__":
            mesh = this_host().spawn_procs(per_host={"host": 2, "gpu": 3}).spawn("echo", Echo)
            out = {}
            out["one"] = mesh.slice(host=1, gpu=2).rank.call_one().get()
            out["call_one_error"] = error_of(lambda: mesh.rank.call_one())
            out["choose"] = sorted({mesh.rank.choose().get() for _ in range(12)})
            out["choose_slice"] = mesh.slice(gpu=1).rank.choose().get()
            out["row"] = [[p.rank, p.coords, v] for p, v in mesh.slice(host=1).rank.call().get()]
            out["block"] = mesh.slice(host=slice(0, 2), gpu=slice(1, None)).rank.call().get().values()
            out["twice"] = mesh.slice(host=1).slice(gpu=0).rank.call().get().values()
            out["item"] = mesh.rank.call().get().item(host=1, gpu=1)
            out["bad_dim"] = error_of(lambda: mesh.slice(gpus=1))
            out["bad_index"] = error_of(lambda: mesh.slice(host=2))
            mesh.slice(host=0).remember.broadcast("host 0 only")
            mesh.fail.broadcast()
            out["seen"] = mesh.seen_values.call().get().values()
            gate = socket.create_server(("127.0.0.1", 0))
            blocked = mesh.slice(host=0).wait_for.call(gate.getsockname()[1])
            out["timeout"] = error_of(lambda: blocked.get(timeout=0.2))
            out["others"] = mesh.slice(host=1).rank.call().get(timeout=10).values()
            for _ in range(3):
                waiter, _ = gate.accept()
                waiter.sendall(b"released")
                waiter.close()
            out["released"] = blocked.get(timeout=10).values()
            report(**out)
    """,
    )
    out = result(done)
    assert out["one"] == 5
    assert out["call_one_error"].startswith("ValueError: call_one() needs a mesh of exactly one rank, but echo has 6")
    assert set(out["choose"]) <= set(range(6)) and len(out["choose"]) > 1
    assert out["choose_slice"] in (1, 4)
    assert out["row"] == [[r, {"host": 1, "gpu": r - 3}, r] for r in (3, 4, 5)]
    assert out["block"] == [1, 2, 4, 5]
    assert out["twice"] == [3]
    assert out["item"] == 4
    assert out["bad_dim"] == "ValueError: this mesh has no dimension 'gpus'; its dimensions are: host, gpu"
    assert out["bad_index"] == "ValueError: host=2 is out of range for a dimension of size 2"
    assert out["seen"] == [["host 0 only"]] * 3 + [[]] * 3
    assert (
        "monarch_pdb.actor: broadcast failed: 6 of 6 ranks of echo.fail raised: ranks 0-5: "
        "RuntimeError: broadcast failure" in done.stderr
    )
    assert out["timeout"] == "TimeoutError: echo.wait_for: 3 of 3 ranks did not answer within 0.2s: ranks 0-2"
    assert out["others"] == [3, 4, 5]
    assert out["released"] == ["released"] * 3


@pytest.mark.timeout(60)
def test_constructor_arguments_and_constructor_errors(tmp_path, env):
    out = result(
        run_program(
            tmp_path,
            env,
            """
        class Scaled(Actor):
            def __init__(self, base, *, step=1):
                self.value = base + step * current_rank().rank

            @endpoint
            def get_value(self):
                return self.value

            def helper(self):
                return None

        class Picky(Actor):
            def __init__(self, refused_gpu):
                if current_rank()["gpu"] == refused_gpu:
                    raise ValueError(f"gpu {refused_gpu} refuses")

        def error_of(action):
            try:
                action()
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}".partition("\\n")[0]

        if __name__ == "__main__":
            procs = this_host().spawn_procs(per_host={"host": 2, "gpu": 2})
            scaled = procs.spawn("scaled", Scaled, 100, step=5)
            report(values=scaled.get_value.call().get().values(),
                   refused=error_of(lambda: procs.spawn("picky", Picky, 1)),
                   not_actor=error_of(lambda: procs.spawn("plain", dict)),
                   missing=error_of(lambda: scaled.nothing),
                   unmarked=error_of(lambda: scaled.helper),
                   unpicklable=error_of(lambda: scaled.get_value.call(threading.Lock())))
    """,
        )
    )
    assert out["values"] == [100, 105, 110, 115]
    assert out["refused"] == "ActorError: 2 of 4 ranks of picky.__init__ raised: ranks 1,3: ValueError: gpu 1 refuses"
    assert out["not_actor"].startswith("TypeError: spawn() needs a subclass of monarch_pdb.actor.Actor")
    assert out["missing"] == "AttributeError: Scaled.nothing has no such attribute"
    assert out["unmarked"] == "AttributeError: Scaled.helper is not marked @endpoint"
    assert out["unpicklable"].startswith("TypeError: cannot send the arguments of scaled.get_value to another process")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("run_as", ["script", "module"])
def test_classes_of_the_main_program_work_and_keep_their_source(tmp_path, env, run_as):
    path = write_program(
        tmp_path,
        """
        from dataclasses import dataclass

        @dataclass
        class Box:
            value: int

        class Inspector(Actor):
            @endpoint
            def grow(self, box):
                code = Inspector.grow.__code__
                return Box(box.value + 1), {
                    "file": code.co_filename,
                    "line": linecache.getline(code.co_filename, code.co_firstlineno + 1).strip(),
                    "source": inspect.getsource(Inspector.grow).splitlines()[1].strip(),
                    "module": __name__,
                }

        if __name__ == "__main__":
            box, seen = this_host().spawn_procs().spawn("inspector", Inspector).grow.call_one(Box(1)).get()
            report(box_is_main_class=type(box) is Box, value=box.value, **seen)
    """,
        name="mainprog.py",
    )
    command = [str(path)] if run_as == "script" else ["-m", "mainprog"]
    out = result(
        subprocess.run([sys.executable, *command], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=45)
    )
    assert out["box_is_main_class"] and out["value"] == 2
    assert out["file"] == str(path)
    assert out["line"] == out["source"] == "def grow(self, box):"
    assert out["module"] == "__mp_main__"


@pytest.mark.timeout(60)
def test_without_a_script_classes_of_main_travel_by_value(tmp_path, env):
    """`python -c`: an actor of __main__, the function of __main__ it calls and the exception
    class it raises reach the workers by value, with the program's lines for tracebacks; an
    imported actor still travels by name."""
    (tmp_path / "greeters.py").write_text(
        textwrap.dedent("""
        from monarch_pdb.actor import Actor, current_rank, endpoint

        class Greeter(Actor):
            @endpoint
            def greet(self, name):
                return f"hello {name} from {current_rank().rank}"
    """)
    )
    program = textwrap.dedent("""
        import json
        from monarch_pdb.actor import Actor, ActorError, current_rank, endpoint, this_host
        from greeters import Greeter

        class Odd(Exception):
            pass

        def twice(n):
            if n % 2:
                raise Odd(f"rank {n} is odd")
            return 2 * n

        class Local(Actor):
            @endpoint
            def double(self):
                return twice(current_rank().rank)

        procs = this_host().spawn_procs(per_host={"gpu": 2})
        greetings = procs.spawn("greeter", Greeter).greet.call("you").get().values()
        try:
            procs.spawn("local", Local).double.call().get()
        except ActorError as exc:
            error = exc.errors[0]
            print("RESULT " + json.dumps({"greetings": greetings, "rank": error.rank, "summary": error.summary,
                                          "same_class": type(error.exception) is Odd, "traceback": error.traceback}))
    """)
    out = result(
        subprocess.run(
            [sys.executable, "-c", program], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=45
        )
    )
    assert 'File "<string>", line 11, in twice\n    raise Odd(f"rank {n} is odd")\n' in out.pop("traceback")
    assert out == {
        "greetings": ["hello you from 0", "hello you from 1"],
        "rank": 1,
        "summary": "Odd: rank 1 is odd",
        "same_class": True,
    }


@pytest.mark.timeout(60)
def test_nested_workers_are_set_up_like_top_level_ones(tmp_path, env):
    out = result(
        run_program(
            tmp_path,
            env,
            """
        def probe():
            who, point = identity.current(), current_rank()
            return {"hook": sys.breakpointhook == monarch_pdb.set_trace, "actor": who.actor,
                    "rank": who.rank, "coords": who.coords, "job": who.job,
                    "point": [point.rank, point.coords], "forked_by_a_child_of": parent_of(os.getppid())}

        def parent_of(pid):
            with open(f"/proc/{pid}/stat") as stat:
                return int(stat.read().rsplit(")", 1)[1].split()[1])

        class Probe(Actor):
            @endpoint
            def probe(self):
                return probe()

            @endpoint
            async def probe_async(self):
                await asyncio.sleep(0)
                return probe()

        class Outer(Probe):
            @endpoint
            def nest(self):
                inner = this_host().spawn_procs(per_host={"inner": 2}).spawn("inner", Probe)
                return {"pid": os.getpid(), "sync": inner.probe.call().get().values(),
                        "async": inner.probe_async.call().get().values()}

        if __name__ == "__main__":
            outer = this_host().spawn_procs(per_host={"host": 2}).spawn("outer", Outer)
            report(job=os.environ["MONARCH_PDB_JOB"], pid=os.getpid(),
                   top=outer.probe.call().get().values() + outer.probe_async.call().get().values(),
                   nested=outer.nest.call().get().values())
    """,
        )
    )
    assert out["job"] == f"program-{out['pid']}"
    for index, seen in enumerate(out["top"]):
        rank = index % 2
        assert seen == {
            "hook": True,
            "actor": "outer",
            "rank": rank,
            "coords": {"host": rank},
            "job": out["job"],
            "point": [rank, {"host": rank}],
            "forked_by_a_child_of": out["pid"],
        }
    for outer in out["nested"]:
        for index, seen in enumerate(outer["sync"] + outer["async"]):
            rank = index % 2
            assert seen == {
                "hook": True,
                "actor": "inner",
                "rank": rank,
                "coords": {"inner": rank},
                "job": out["job"],
                "point": [rank, {"inner": rank}],
                "forked_by_a_child_of": outer["pid"],
            }


TREE = """
    class Node(Actor):
        @endpoint
        def pid(self):
            return os.getpid()

        @endpoint
        def grow(self):
            self.children = this_host().spawn_procs(per_host={"child": 2}).spawn("child", Node)
            return self.children.pid.call().get().values()

        @endpoint
        def spin(self):
            while True:
                pass

    if __name__ == "__main__":
        nodes = this_host().spawn_procs(per_host={"node": 2}).spawn("node", Node)
        pids = nodes.pid.call().get().values() + sum(nodes.grow.call().get().values(), [])
        nodes.slice(node=0).spin.broadcast()
        report(pids=pids)
"""


def alive(pids: list[int]) -> list[int]:
    """The pids that still run (zombies waiting for a reaper do not count)."""
    running = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                    running.append(pid)
        except OSError:
            pass
    return running


def read_result(stream, timeout: float) -> dict:
    """The RESULT line of a still running program, read as soon as it is written."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data.partition(b"RESULT ")[2]:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"no RESULT line within {timeout}s; output so far: {data.decode(errors='replace')}"
        chunk = os.read(stream.fileno(), 65536)
        assert chunk, f"the program ended without a RESULT line: {data.decode(errors='replace')}"
        data += chunk
    return json.loads(data.partition(b"RESULT ")[2].partition(b"\n")[0])


def assert_all_gone(pids: list[int], marker: str) -> None:
    """Every worker is gone; only the debug broker the workers started may outlive the job
    (by design: other jobs and shells use it)."""
    wait_for_exit(pids, timeout=5)
    assert alive(pids) == [], f"workers survived: {alive(pids)}"

    def job_processes() -> list[tuple[int, str]]:
        return [(pid, cmd) for pid, cmd in processes_with_marker(marker) if "monarch_pdb.broker" not in cmd]

    wait_for_exit([pid for pid, _ in job_processes()], timeout=5)
    assert job_processes() == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ending", ["return", "exception"])
def test_root_exit_ends_every_worker_even_a_stuck_one(tmp_path, env, ending):
    ends = "" if ending == "return" else "        raise SystemExit('root gives up')\n"
    done = run_program(tmp_path, env, TREE + ends, timeout=20)  # a hang in exiting fails here
    out = result(done, expect_rc=0 if ending == "return" else 1)
    assert len(set(out["pids"])) == 6
    assert_all_gone(out["pids"], env[MARKER])


@pytest.mark.timeout(60)
def test_sigkilled_root_leaves_no_worker(tmp_path, env):
    path = write_program(
        tmp_path,
        TREE
        + """
        threading.Event().wait()
    """,
    )
    root = subprocess.Popen(
        [sys.executable, str(path)], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        pids = read_result(root.stdout, timeout=30)["pids"]
        assert len(set(pids)) == 6 and alive(pids) == pids
    finally:
        root.kill()
        root.wait()
    assert_all_gone(pids, env[MARKER])
    root.stdout.close()
