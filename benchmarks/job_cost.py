"""What monarch-pdb costs a job that keeps it installed and never stops, each row beside its
floor measured in the same run, in alternating batches:

- a process that runs `import monarch_pdb`, beside `python -c pass`;
- one that runs `monarch_pdb.install()` (a broker running), beside one that imports ZeroMQ and
  msgpack, which `install` needs;
- the guide's 16 ranks of the embedded mesh, from start until every rank's call returned, beside
  the same program with a debugger that does nothing (`install` and `endpoint_call` stubbed);
- 1,000 endpoint calls in a rank with the rank process, beside 1,000 entries of a context manager that
  does nothing (what a runtime without a debugger pays);
- on Python 3.12+: 1,000 calls of a function whose line holds a breakpoint with a false condition,
  beside the same calls with no breakpoint, and the difference, the condition's cost;
  `sys._getframe`, `open()` and `logging.info` 1,000 times each after a breakpoint waited for a
  file that was then imported, beside a process where none waited; setting a breakpoint in a
  process with 3 million live objects, beside one with few (the time its thread holds the GIL);
- the CPU an idle installed rank uses in a second, beside a bare process sleeping; and the
  broker's with 1,024 idle ranks, beside a bare ROUTER's (`broker_rows`, from idle.py's figures).

Rows of 1,000 operations read in ms as microseconds each. They, and setting a breakpoint (which
holds the GIL throughout), are the CPU time of the thread that does them, which a shared machine's
other work does not inflate as it does the wall clock; the rows of whole processes are wall time,
from start to end. Each measured process is started once (the per-process rows start one per
sample) and answers sample requests on its stdin:

    python job_cost.py subject MODE PARENT_PID
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from floors import die_with_parent
from report import Result, Target

from monarch_pdb import discovery
from monarch_pdb import settings as settings_module
from monarch_pdb.actor.forkserver import DEBUGGER_MODULES

OPS = 1000
"""Operations in one sample of a per-operation row."""
ROUNDS = {"full": 10, "quick": 3}
SAMPLES = {"full": 200, "quick": 30}
"""Samples of each in-process row over the run."""
LAUNCHES = {"full": 20, "quick": 6}
"""Processes started for each process row over the run (and their floors')."""
MESH_RUNS = {"full": 6, "quick": 2}
IDLE_SECONDS = {"full": 10, "quick": 3}
HEAP_OBJECTS = 3_000_000
START_TIMEOUT = 60.0
MONITORING = sys.version_info >= (3, 12)

HOT = textwrap.dedent("""
    def hot(x):
        return x + 1
""")
HOT_LINE = 3
LATE = "def late():\n    return 1\n"
MESH = textwrap.dedent("""
    from monarch_pdb.actor import Actor, endpoint, this_host

    class Nop(Actor):
        @endpoint
        def ping(self):
            return 0

    if __name__ == "__main__":
        this_host().spawn_procs(per_host={"host": 4, "gpu": 4}).spawn("nop", Nop).ping.call().get()
""")
NO_DEBUGGER = textwrap.dedent("""
    import contextlib
    import sys
    import types

    import monarch_pdb

    monarch_pdb.install = lambda **_: None
    monarch_pdb.endpoint_call = lambda *_, **__: contextlib.nullcontext()
    sys.modules.update((name, types.ModuleType(name)) for name in {DEBUGGER_MODULES!r})
""").format(DEBUGGER_MODULES=DEBUGGER_MODULES)
"""sitecustomize of the mesh's floor: every process of the program has a debugger that does nothing
(and the fork server has none of the debugger's modules to import for its workers)."""
HEAP: list[list] = []
"""The live objects of the process that sets a breakpoint among millions."""


# --- the measured processes ---------------------------------------------------------------


def _per_op(once: Callable[[], None]) -> Callable[[], int]:
    def sample() -> int:
        start = time.thread_time_ns()
        for _ in range(OPS):
            once()
        return time.thread_time_ns() - start

    return sample


def _set(path: str, spots: list) -> list[str]:
    from monarch_pdb.rank.rank_process import RankProcess

    rank_process = RankProcess.existing()
    assert rank_process is not None
    return rank_process.breakpoints.change(path, spots, b"bench")


def _subject(mode: str, workdir: Path) -> Callable[[], int]:
    """What one sample of `mode` is, once the process is set up for it."""
    if mode == "idle_bare":
        mode = "idle"
    elif mode != "nop_call":
        import monarch_pdb

        monarch_pdb.install(announce=mode == "idle")
    if mode == "nop_call":

        class Nothing:
            def __enter__(self) -> None:
                pass

            def __exit__(self, *_: object) -> None:
                pass

        def enter() -> None:
            with Nothing():
                pass

        return _per_op(enter)
    if mode == "endpoint_call":
        import monarch_pdb

        coords = {"host": 0, "gpu": 1}

        def call() -> None:
            with monarch_pdb.endpoint_call("bench", 1, coords):
                pass

        return _per_op(call)
    if mode == "idle":

        def idle() -> int:
            used = time.process_time_ns()
            time.sleep(1.0)
            return time.process_time_ns() - used

        return idle
    from monarch_pdb import wire

    sys.path.insert(0, str(workdir))
    if mode in ("condition", "no_condition"):
        import bench_hot

        if mode == "condition":
            assert _set(bench_hot.__file__, [wire.Spot(line=HOT_LINE, condition="x < 0")]) == [""]
        hot = bench_hot.hot
        return _per_op(lambda: hot(1))
    if mode in ("deferred", "not_deferred"):
        import logging

        if mode == "deferred":
            assert _set(str(workdir / "bench_late.py"), [wire.Spot(line=2)]) == [""]
            import bench_late  # noqa: F401 (the file the breakpoint waited for)

        def calls() -> None:
            sys._getframe()
            open(os.devnull).close()
            logging.info("x")

        return _per_op(calls)
    if mode in ("heap", "small_heap"):
        import bench_hot

        if mode == "heap":
            HEAP.extend([] for _ in range(HEAP_OBJECTS))

        def setting() -> int:
            start = time.thread_time_ns()
            assert _set(bench_hot.__file__, [wire.Spot(line=HOT_LINE)]) == [""]
            took = time.thread_time_ns() - start
            _set(bench_hot.__file__, [])
            return took

        return setting
    raise SystemExit(f"no such subject: {mode}")


def subject(mode: str, parent: int) -> None:
    """A measured process: set up for `mode`, say READY, then answer each line N on stdin with
    N samples."""
    die_with_parent(parent)
    sample = _subject(mode, Path(os.environ["BENCH_WORKDIR"]))
    print("READY", flush=True)
    for line in sys.stdin:
        print(" ".join(str(sample()) for _ in range(int(line))), flush=True)


# --- the runner ---------------------------------------------------------------------------


class Subjects:
    """The measured processes, each started once, asked for samples in turn."""

    def __init__(self, env: dict[str, str], modes: list[str]) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        try:
            for mode in modes:
                self.procs[mode] = subprocess.Popen(
                    [sys.executable, __file__, "subject", mode, str(os.getpid())],
                    env=env,
                    cwd=env["BENCH_WORKDIR"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            for mode, proc in self.procs.items():
                assert proc.stdout.readline() == "READY\n", f"the {mode} process did not start"
        except BaseException:
            self.close()
            raise

    def samples(self, mode: str, count: int) -> list[int]:
        proc = self.procs[mode]
        proc.stdin.write(f"{count}\n")
        proc.stdin.flush()
        return [int(ns) for ns in proc.stdout.readline().split()]

    def close(self) -> None:
        for proc in self.procs.values():
            proc.stdin.close()
            proc.wait(timeout=30)
            proc.stdout.close()


@contextlib.contextmanager
def broker(workdir: Path) -> Iterator[dict[str, str]]:
    """A broker of this run's own; the environment that finds it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONARCH_PDB_", "MONARCH_DEBUG_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a job imports from bytecode caches, not from source
    env.update(
        MONARCH_PDB_RUNTIME_DIR=str(workdir / "run"),
        MONARCH_DEBUG_SERVER_HOST="127.0.0.1",
        MONARCH_DEBUG_SERVER_PORT="0",
        BENCH_WORKDIR=str(workdir),
    )
    proc = subprocess.Popen([sys.executable, "-m", "monarch_pdb.broker"], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while discovery.locate(settings_module.load(env)) is None:
            assert time.monotonic() < deadline and proc.poll() is None, "the broker did not start"
            time.sleep(0.05)
        yield env
    finally:
        proc.terminate()
        proc.wait()


def launch(argv: list[str], env: dict[str, str]) -> int:
    """Nanoseconds from starting a process to its end."""
    start = time.perf_counter_ns()
    subprocess.run(argv, env=env, cwd=env["BENCH_WORKDIR"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter_ns() - start


def alternate(runs: dict[str, Callable[[], list[int]]], rounds: int) -> dict[str, list[int]]:
    """The samples of every run, the runs in turn, `rounds` times."""
    samples: dict[str, list[int]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            samples[name] += run()
    return samples


def differences(measured: list[int], floor: list[int]) -> list[int]:
    """Each sample minus the floor's taken in the same batch."""
    return [m - f for m, f in zip(measured, floor)]


def measure(mode: str, say) -> list[Result]:
    """The rows, each beside its floor."""
    rounds = ROUNDS[mode]
    with tempfile.TemporaryDirectory(prefix="monarch-pdb-job-cost-") as tmp:
        workdir = Path(tmp)
        (workdir / "bench_hot.py").write_text(HOT)
        (workdir / "bench_late.py").write_text(LATE)
        (workdir / "mesh.py").write_text(MESH)
        (workdir / "no_debugger").mkdir()
        (workdir / "no_debugger" / "sitecustomize.py").write_text(NO_DEBUGGER)
        with broker(workdir) as env:
            py = sys.executable
            say("cost to the job: starting processes (import, install)")
            starts = max(1, LAUNCHES[mode] // rounds)
            launches = alternate(
                {
                    name: lambda argv=argv: [launch([py, "-c", argv], env) for _ in range(starts)]
                    for name, argv in (
                        ("bare", "pass"),
                        ("import", "import monarch_pdb"),
                        ("zmq", "import zmq, msgpack"),
                        ("install", "import monarch_pdb; monarch_pdb.install()"),
                    )
                },
                rounds,
            )
            say("cost to the job: the embedded mesh's 16 ranks")
            paths = [str(workdir / "no_debugger"), env.get("PYTHONPATH", "")]
            floor_env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, paths)))
            mesh_run = [py, str(workdir / "mesh.py")]
            mesh = alternate(
                {"nop": lambda: [launch(mesh_run, floor_env)], "mesh": lambda: [launch(mesh_run, env)]},
                MESH_RUNS[mode],
            )
            modes = ["nop_call", "endpoint_call", "idle_bare", "idle"]
            if MONITORING:
                modes += ["no_condition", "condition", "not_deferred", "deferred", "small_heap", "heap"]
            say(f"cost to the job: {len(modes)} measured processes")
            subjects = Subjects(env, modes)
            try:
                each = max(1, SAMPLES[mode] // rounds)
                timed = [m for m in modes if not m.startswith(("idle", "small_heap", "heap"))]
                per_op = alternate({m: lambda m=m: subjects.samples(m, each) for m in timed}, rounds)
                setting = [m for m in modes if m in ("small_heap", "heap")]
                heavy = alternate({m: lambda m=m: subjects.samples(m, 3) for m in setting}, rounds)
                idle = {m: subjects.samples(m, IDLE_SECONDS[mode]) for m in ("idle_bare", "idle")}
            finally:
                subjects.close()
    return rows(launches, mesh, per_op, heavy, idle)


def rows(
    launches: dict[str, list[int]],
    mesh: dict[str, list[int]],
    per_op: dict[str, list[int]],
    heavy: dict[str, list[int]],
    idle: dict[str, list[int]],
) -> list[Result]:
    bare = Result("process: python -c pass (floor J1)", launches["bare"])
    zmq = Result("process: import zmq, msgpack (floor J2)", launches["zmq"])
    nop = Result("16 ranks of the embedded mesh, a debugger doing nothing (floor J3)", mesh["nop"])
    nothing = Result(f"{OPS:,} entries of a context manager doing nothing (floor J4)", per_op["nop_call"])
    sleeping = Result("a bare process sleeping, CPU per s (floor J5)", idle["idle_bare"])
    found = [
        bare,
        Result("process: import monarch_pdb", launches["import"], floor=bare, target=Target(times_floor=1.1)),
        zmq,
        Result("process: monarch_pdb.install()", launches["install"], floor=zmq, target=Target(times_floor=1.1)),
        nop,
        Result("16 ranks of the embedded mesh, installed", mesh["mesh"], floor=nop, target=Target(times_floor=1.2)),
        nothing,
        Result(f"{OPS:,} endpoint calls, agent running", per_op["endpoint_call"], floor=nothing, target=Target(ms=2.0)),
        sleeping,
        Result("an idle installed rank, CPU per s", idle["idle"], floor=sleeping, target=Target(times_floor=1.2)),
    ]
    if not MONITORING:
        return found
    plain = Result(f"{OPS:,} calls of a function (floor J6)", per_op["no_condition"])
    untouched = Result(f"{OPS:,} x getframe + open + logging.info (floor J7)", per_op["not_deferred"])
    small = Result("setting a breakpoint, few objects (floor J8)", heavy["small_heap"])
    return found + [
        plain,
        Result("same, its line's breakpoint's condition false", per_op["condition"], floor=plain),
        Result(
            f"a false condition, {OPS:,} hits (difference)",
            differences(per_op["condition"], per_op["no_condition"]),
            target=Target(ms=1.0),
        ),
        untouched,
        Result(
            "same, after a breakpoint waited for a file since imported",
            per_op["deferred"],
            floor=untouched,
            target=Target(times_floor=1.1),
        ),
        small,
        Result(
            f"setting a breakpoint, {HEAP_OBJECTS:,} live objects",
            heavy["heap"],
            floor=small,
            target=Target(ms=5.0),
        ),
    ]


def broker_rows(idle_cpu: dict[str, float]) -> list[Result]:
    """idle.py's figures (% of a core, one reading each) as CPU per second of idle."""
    router = Result("a bare ROUTER, 1,024 idle connections, CPU per s (floor J9)", [round(idle_cpu["floor"] * 1e7)])
    return [
        router,
        Result(
            "the broker, 1,024 idle ranks, CPU per s",
            [round(idle_cpu["broker"] * 1e7)],
            floor=router,
            target=Target(times_floor=1.2),
        ),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["subject"]:
        subject(sys.argv[2], int(sys.argv[3]))
    else:
        import report

        results = measure("quick" if "--quick" in sys.argv else "full", report.say)
        print(report.table([result.row() for result in results]))
