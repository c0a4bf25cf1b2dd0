"""pdb inside a rank behaves like a local pdb: source, stack, expressions, breakpoints."""

from __future__ import annotations

import textwrap

import pytest
from programs import Program, run_debug, wait_for_sessions
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
    """PROGRAM, its two ranks paused."""
    script = tmp_path / "calc.py"
    script.write_text(PROGRAM)
    program = Program(env, script, cwd=tmp_path)
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
