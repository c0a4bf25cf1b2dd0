"""pdb inside a rank behaves like a local pdb: source, stack, expressions, breakpoints."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from programs import Program, run_debug, wait_for_all_rows, wait_for_lines, wait_for_sessions
from shell_driver import ShellDriver

pytestmark = pytest.mark.each_python

PROGRAM = textwrap.dedent('''
    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host


    def make_adder(n):
        def add(x):
            total = x + n
            breakpoint()
            return total
        return add


    square = lambda v: v * v  # noqa: E731


    class Calc(Actor):
        @endpoint
        def compute(self):
            r = current_rank().rank
            return make_adder(100)(square(r))


    if __name__ == "__main__":
        procs = this_host().spawn_procs(per_host={"gpu": 2})
        print("RESULT", procs.spawn("calc", Calc).compute.call().get().values())
''')


@pytest.fixture
def calc(env, tmp_path):
    """PROGRAM, its two ranks paused; in them, using a part of pdb that their Python deprecates
    is an error."""
    script = tmp_path / "calc.py"
    script.write_text(PROGRAM)
    program = Program(dict(env, PYTHONWARNINGS="error::DeprecationWarning:monarch_pdb.debugger"), script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 2)
        yield program
    finally:
        program.stop()


@pytest.fixture
def attached(env, calc):
    shell = ShellDriver(env)
    try:
        shell.wait_prompt()
        shell.command("attach calc 1")
        yield shell, calc
    finally:
        shell.kill()


@pytest.mark.timeout(90)
def test_source_of_closures_and_main_script_code_is_shown(attached):
    shell, _ = attached
    listing = shell.command("ll")
    assert "def add(x):" in listing and "total = x + n" in listing and "->" in listing
    assert "[EOF]" not in listing and "<dynamic-code>" not in listing
    assert "square = lambda v: v * v" in shell.command("l 10, 13")
    assert shell.command("p square(3)").strip() == "9"


@pytest.mark.timeout(90)
def test_stack_navigation_and_expressions(attached):
    shell, _ = attached
    trace = shell.command("bt")
    assert "compute()" in trace and "add()" in trace.splitlines()[-2]
    assert "compute()" in shell.command("up")
    assert shell.command("p r").strip() == "1"
    shell.command("down")
    assert shell.command("pp {'total': total, 'n': n}").strip() == "{'n': 100, 'total': 101}"
    shell.command("!z = total * 2")
    assert shell.command("p z").strip() == "202"
    assert shell.command("display total").strip() == "display total: 101"


@pytest.mark.skipif(sys.version_info < (3, 12), reason="pdb's convenience variables are new in Python 3.12")
@pytest.mark.timeout(90)
def test_convenience_variables_are_stock_pdbs(attached):
    shell, _ = attached
    assert shell.command("p $_frame.f_code.co_name").strip() == "'add'"
    shell.command("$twice = total * 2")
    assert shell.command("p $twice").strip() == "202"


@pytest.mark.timeout(90)
def test_breakpoints_clear_without_a_question_and_interact_says_no(attached):
    shell, program = attached
    assert shell.command("b 9").startswith("Breakpoint 1 at ")
    out = shell.command("clear")
    assert out.startswith("Deleted breakpoint 1 at ") and "Clear all breaks?" not in out
    assert shell.prompt == "(Pdb)"
    assert "interact is not supported" in shell.command("interact")
    assert shell.prompt == "(Pdb)"
    shell.command("c")
    shell.command("continue")
    code, output = program.finish()
    assert code == 0 and "RESULT [100, 101]" in output


@pytest.mark.timeout(90)
def test_restart_run_and_interact_are_refused_at_every_depth(env, calc):
    refused = ["restart", "run", "interact"]
    lines = [*refused, "debug square(2)", *refused, "c", "p total"]
    done = run_debug(env, *[arg for line in lines for arg in ("-c", f"cast calc ranks(1) {line}")], "-c", "continue")
    assert done.returncode == 0, done.stderr
    answers = done.stdout.split("calc ranks[1] (1)\n")[1:]
    refusals = [
        "*** restart is not supported by monarch-pdb: a rank cannot restart its program; use c or q instead\n",
        "*** run is not supported by monarch-pdb: a rank cannot restart its program; use c or q instead\n",
        "*** interact is not supported by monarch-pdb; use '!' statements, p or pp instead\n",
    ]
    assert answers[:3] == refusals and answers[4:7] == refusals
    assert answers[3].startswith("ENTERING RECURSIVE DEBUGGER\n") and answers[7] == "LEAVING RECURSIVE DEBUGGER\n"
    assert answers[8] == "101\nContinued 2 ranks: calc ranks[0,1]\n", "the rank is still where it stopped"
    code, output = calc.finish()
    assert code == 0 and "RESULT [100, 101]" in output


TWO_CALLS = textwrap.dedent('''
    import pdb

    from monarch_pdb.actor import Actor, endpoint, this_host


    class Stepper(Actor):
        @endpoint
        def first(self):
            value = 1
            breakpoint()
            return value

        @endpoint
        def second(self):
            value = 2
            pdb.set_trace()
            return value


    if __name__ == "__main__":
        stepper = this_host().spawn_procs(per_host={"gpu": 1}).spawn("stepper", Stepper)
        print("RESULT", stepper.first.call().get().values(), stepper.second.call().get().values())
''')


@pytest.mark.timeout(120)
def test_pdb_set_trace_in_an_installed_process_is_a_session_even_after_another_ended(env, tmp_path):
    script = tmp_path / "two_calls.py"
    script.write_text(TWO_CALLS)
    program = Program(env, script, cwd=tmp_path)
    try:
        for function, value in (("first", "1"), ("second", "2")):
            wait_for_all_rows(env, lambda rows: any(r.function == f"two_calls.{function}" and r.state == "breakpoint"
                                                    for r in rows), timeout=60)
            done = run_debug(env, "-c", "cast stepper ranks(0) p value", "-c", "continue")
            assert done.returncode == 0 and done.stdout.startswith(f"stepper ranks[0] (1)\n{value}\n"), done.stdout + done.stderr
        code, output = program.finish()
        assert code == 0 and "RESULT [1] [2]" in output, output
    finally:
        program.stop()


AFTER_A_SESSION = textwrap.dedent('''
    import pdb
    import sys
    import time

    value = 7
    breakpoint()
    print("SESSION OVER", flush=True)
    if sys.argv[1] == "stock":
        pdb.set_trace()
    else:
        done = False
        while not done:  # until a debugger attached by `python -m pdb -p` ends it
            time.sleep(0.05)
    print("LEFT", value, flush=True)
''')


@contextmanager
def after_a_session(env, tmp_path, then: str, stdin: str | None = None) -> Iterator[tuple[Program, str]]:
    """AFTER_A_SESSION under PYTHONBREAKPOINT alone, once its `breakpoint()` session has ended,
    and what it printed so far; `then` is what it does next: `stock` pdb.set_trace(), or wait
    for a debugger `attached` by pid."""
    script = tmp_path / "after.py"
    script.write_text(AFTER_A_SESSION)
    program = Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace"), script, then, cwd=tmp_path, stdin=stdin)
    try:
        wait_for_sessions(env, 1)
        done = run_debug(env, "-c", "cast after ranks(:) p value", "-c", "continue")
        assert done.returncode == 0 and "\n7\n" in done.stdout, done.stdout + done.stderr
        yield program, wait_for_lines(program, "SESSION OVER", 1)
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_stock_pdb_set_trace_reads_the_terminal_once_a_session_ended(env, tmp_path):
    with after_a_session(env, tmp_path, "stock", stdin="p value * 6\nc\n") as (program, printed):
        code, rest = program.finish()
        output = printed + rest
        assert code == 0 and "(Pdb) 42\n" in output and "LEFT 7" in output, output


@pytest.mark.skipif(sys.version_info < (3, 14), reason="python -m pdb -p is new in Python 3.14")
@pytest.mark.timeout(90)
def test_python_m_pdb_attaches_to_a_process_whose_session_ended(env, tmp_path):
    with after_a_session(env, tmp_path, "attached") as (program, _):
        attached = subprocess.run([sys.executable, "-m", "pdb", "-p", str(program.proc.pid), "-c", "p value * 6",
                                   "-c", "!done = True", "-c", "c"], stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=60)
        assert attached.returncode == 0 and "42\n" in attached.stdout, attached.stdout + attached.stderr
        assert "Another PDB instance" not in attached.stdout
        code, output = program.finish()
        assert code == 0 and "LEFT 7" in output, output


AWAITS = textwrap.dedent('''
    import asyncio
    import pdb

    from monarch_pdb.actor import Actor, endpoint, this_host


    async def tenfold(n):
        await asyncio.sleep(0)
        return n * 10


    class Fetcher(Actor):
        @endpoint
        async def fetch(self):
            value = 4
            await pdb.set_trace_async(commands=["p value * 2"])
            return value


    if __name__ == "__main__":
        fetcher = this_host().spawn_procs(per_host={"gpu": 1}).spawn("fetcher", Fetcher)
        print("RESULT", fetcher.fetch.call().get().values())
''')


@pytest.mark.skipif(sys.version_info < (3, 14), reason="pdb.set_trace_async is new in Python 3.14")
@pytest.mark.timeout(90)
def test_await_works_at_the_prompt_of_pdb_set_trace_async(env, tmp_path, shell):
    script = tmp_path / "awaits.py"
    script.write_text(AWAITS)
    program = Program(env, script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 1)
        sh = shell()
        attached = sh.command("attach fetcher 0")
        assert "\n8\n" in attached and "-> await pdb.set_trace_async(" in attached, "its commands ran first"
        assert sh.command("p $_asynctask").startswith("<Task pending name=")
        sh.command("!tenfolded = await tenfold(value)")
        assert sh.command("p tenfolded").strip() == "40"
        assert "Detached from debug session for fetcher 0" in sh.command("c")
        code, output = program.finish()
        assert code == 0 and "RESULT [4]" in output, output
    finally:
        program.stop()
