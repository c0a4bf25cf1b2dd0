"""What a job that keeps monarch-pdb installed and never stops pays for it: the modules it
loads, the hooks it leaves, the heap it scans. Each check runs in a fresh interpreter, where
nothing else has loaded what it looks for; how fast is benchmarks/job_cost.py's business."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from monarch_pdb import wire
from monarch_pdb.rank import log_points

MONITORING = sys.version_info >= (3, 12)
HEAVY = ["zmq", "msgpack", "asyncio", "ssl", "pdb", "bdb", "inspect", "ctypes", "subprocess", "typing", "dataclasses"]
"""What a bare interpreter does not load, and `import monarch_pdb` must not either."""


def run(env: dict[str, str], code: str, cwd=None) -> dict:
    """Run `code` in a new interpreter; what it printed last, read as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def loaded(names: list[str]) -> str:
    return f"print(json.dumps([name for name in {names!r} if name in sys.modules]))"


@pytest.mark.timeout(60)
def test_importing_the_package_loads_nothing_a_bare_interpreter_does_not(env):
    bare = run(env, f"import json, sys\n{loaded(HEAVY)}")
    assert run(env, f"import json, sys\nimport monarch_pdb\n{loaded(HEAVY)}") == bare
    entry_points = "[callable(getattr(monarch_pdb, name)) for name in monarch_pdb.__all__]"
    assert run(env, f"import json, monarch_pdb\nprint(json.dumps({entry_points}))") == [True] * 6


@pytest.mark.timeout(60)
def test_an_endpoint_call_in_a_process_that_never_installed_loads_no_debugger(env):
    code = f"""
        import json, sys
        import monarch_pdb

        with monarch_pdb.endpoint_call("trainer", 3, {{"gpu": 3}}) as call:
            assert (call.actor, call.rank, call.coords) == ("trainer", 3, {{"gpu": 3}})
        try:
            with monarch_pdb.endpoint_call("trainer", 3, {{"gpu": 3}}):
                raise KeyError("x")
        except KeyError:
            pass
        {loaded(["zmq", "msgpack", "pdb", "asyncio", "monarch_pdb.rank.rank_process"])}
    """
    assert run(env, code) == []


DEBUGGER = [
    "pdb",
    "asyncio",
    "ssl",
    "ctypes",
    "monarch_pdb.rank.debugger",
    "monarch_pdb.rank.interrupt",
    "monarch_pdb.rank.peek",
    "monarch_pdb.rank.running_breakpoints",
    "monarch_pdb.wire.clients",
    "monarch_pdb.wire.brokers",
]
"""What a rank that is never stopped, read or given breakpoints does not load: pdb, the parts of
the agent that do those, and the messages of shells and brokers."""


@pytest.mark.timeout(60)
def test_install_loads_zeromq_and_msgpack_and_pdb_is_taken_when_the_program_imports_it(env):
    code = f"""
        import json, sys
        import monarch_pdb

        monarch_pdb.install()
        before = [name for name in ["zmq", "msgpack", *{DEBUGGER!r}] if name in sys.modules]
        waiting = [type(finder).__name__ for finder in sys.meta_path]
        import pdb
        print(json.dumps([before, pdb.set_trace.__module__, len(sys.meta_path) - len(waiting)]))
    """
    before, set_trace, finders = run(env, code)
    assert before == ["zmq", "msgpack"]
    assert set_trace == "monarch_pdb.rank.breakpoint_hook", "pdb.set_trace() reaches the broker"
    assert finders == -1, "the finder that waited for pdb is gone once pdb loaded"


@pytest.mark.timeout(60)
def test_an_endpoint_call_runs_while_another_thread_is_importing_asyncio(env):
    """install() does not load asyncio, so a rank's first stop may (3.14's pdb does) while its
    other threads run endpoint calls: they find a half-made asyncio in sys.modules."""
    code = """
        import json, sys, types
        import monarch_pdb

        monarch_pdb.install()
        sys.modules["asyncio"] = types.ModuleType("asyncio")  # as another thread's import leaves it
        with monarch_pdb.endpoint_call("trainer", 3, {"gpu": 3}) as call:
            pass
        print(json.dumps([call.rank]))
    """
    assert run(env, code) == [3]


@pytest.mark.timeout(60)
def test_an_endpoint_calls_identity_is_worked_out_once_and_again_after_set_identity_or_a_fork(env):
    code = """
        import json, os
        import monarch_pdb
        from monarch_pdb.rank import identity

        def named():
            with monarch_pdb.endpoint_call("trainer", 3, {"gpu": 3}):
                me = identity.current()
                return [me.job, me.actor, me.rank, me.coords, me.pid]

        first, again = named(), named()
        monarch_pdb.set_identity(job="renamed", actor="learner")
        renamed = named()
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            os.write(write, json.dumps(named()).encode())
            os._exit(0)
        os.waitpid(child, 0)
        forked = json.loads(os.read(read, 4096))
        print(json.dumps([first, again, renamed, forked, child, os.getpid()]))
    """
    first, again, renamed, forked, child, parent = run(env, code)
    assert first == again and first[1:] == ["trainer", 3, {"gpu": 3}, parent]
    assert renamed == ["renamed", "learner", 3, {"gpu": 3}, parent]
    assert forked == ["renamed", "learner", 3, {"gpu": 3}, child]


def test_conditions_and_log_messages_are_compiled_when_set_and_their_mistakes_said_then():
    frame = sys._getframe()
    x = 5  # noqa: F841 (read by the conditions below, in this frame)
    assert log_points.compiled(wire.Spot(line=1, condition="x > 3")).holds(frame)
    assert not log_points.compiled(wire.Spot(line=1, condition="x < 3")).holds(frame)
    assert log_points.compiled(wire.Spot(line=1, condition="nosuch > 3")).holds(frame), "one that raises holds"
    logged = log_points.compiled(wire.Spot(line=1, log="x={x} {{x}} {nosuch}"))
    assert logged.message(frame) == "x=5 {x} <NameError: name 'nosuch' is not defined>"
    for spot, said in (
        (wire.Spot(line=1, condition="x >"), "the condition is not a Python expression"),
        (wire.Spot(line=1, log="a {x >} b"), "the log message's {x >} is not a Python expression"),
        (wire.Spot(line=1, log="a {x"), "the log message has a { at 3 that no } closes"),
    ):
        with pytest.raises(log_points.Unusable, match=said):
            log_points.compiled(spot)


LATE = "def late(n):\n    return n + 1\n"
MADE = textwrap.dedent("""
    def make():
        def made(n):
            return n * 2
        return made

    KEPT = [make()]
    del make
""")
"""`made` is no module's attribute, and `make` is gone: only the heap holds its code."""


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring comes with Python 3.12")
@pytest.mark.timeout(60)
def test_a_breakpoint_that_waits_for_a_file_leaves_no_hook_once_the_file_is_imported(env, tmp_path):
    (tmp_path / "late.py").write_text(LATE)
    code = f"""
        import json, sys
        import monarch_pdb
        from monarch_pdb import wire
        from monarch_pdb.rank.rank_process import RankProcess

        monarch_pdb.install()
        import pdb
        finders = list(sys.meta_path)
        said = RankProcess.existing().breakpoints.change({str(tmp_path / "late.py")!r}, [wire.Spot(line=2)], b"editor")
        waiting = len(sys.meta_path) - len(finders)
        import late
        print(json.dumps([said, waiting, sys.meta_path == finders, late.__loader__.__class__.__name__]))
    """
    said, waiting, restored, loader = run(env, code, cwd=tmp_path)
    assert said == [""] and waiting == 1
    assert restored, "the import hook left sys.meta_path once the file loaded"
    assert loader == "SourceFileLoader", "the module keeps its own loader"


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring comes with Python 3.12")
@pytest.mark.timeout(60)
def test_setting_a_breakpoint_looks_at_the_heap_only_for_code_no_module_names(env, tmp_path):
    (tmp_path / "late.py").write_text(LATE)
    (tmp_path / "made.py").write_text(MADE)
    code = """
        import gc, json
        import monarch_pdb
        from monarch_pdb import wire
        from monarch_pdb.rank.rank_process import RankProcess
        import late, made

        monarch_pdb.install()
        scans = []
        get_objects = gc.get_objects
        gc.get_objects = lambda *args: scans.append(1) or get_objects(*args)
        change = RankProcess.existing().breakpoints.change
        named = change(late.__file__, [wire.Spot(line=2)], b"editor")
        named_scans = len(scans)
        unnamed = change(made.__file__, [wire.Spot(line=4)], b"editor")
        print(json.dumps([named, named_scans, unnamed, len(scans)]))
    """
    named, named_scans, unnamed, scans = run(env, code, cwd=tmp_path)
    assert named == [""] and named_scans == 0, "a module's function is found without the heap"
    assert unnamed == [""] and scans == 1, "a function only the heap holds is still found"
