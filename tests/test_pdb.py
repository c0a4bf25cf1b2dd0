"""pdb inside a rank behaves like a local pdb: source, stack, expressions, breakpoints."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from programs import Program, run_debug, wait_for_all_rows, wait_for_lines, wait_for_sessions
from shell_driver import ShellDriver

from monarch_pdb.rank.debugger import PDB_TAKES_EXCEPTIONS

pytestmark = pytest.mark.each_python

PROGRAM = textwrap.dedent("""
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
""")


@pytest.fixture
def calc(env, tmp_path):
    """PROGRAM, its two ranks paused; in them, using a part of pdb that their Python deprecates
    is an error."""
    script = tmp_path / "calc.py"
    script.write_text(PROGRAM)
    program = Program(
        dict(env, PYTHONWARNINGS="error::DeprecationWarning:monarch_pdb.rank.debugger"), script, cwd=tmp_path
    )
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
def test_clear_asks_before_it_clears_every_breakpoint_and_interact_says_no(attached):
    shell, program = attached
    assert shell.command("b 9").startswith("Breakpoint 1 at ")
    assert shell.command("clear").strip() == "" and shell.prompt == "Clear all breaks?"
    assert shell.command("n").strip() == "" and shell.prompt == "(Pdb)"
    assert "at " in shell.command("b").splitlines()[-1], "the breakpoint is kept"
    shell.command("clear")
    assert shell.command("yes").startswith("Deleted breakpoint 1 at ")
    assert shell.prompt == "(Pdb)"
    assert "interact is not supported" in shell.command("interact")
    assert shell.prompt == "(Pdb)"
    shell.command("c")
    shell.command("continue")
    code, output = program.finish()
    assert code == 0 and "RESULT [100, 101]" in output


@pytest.mark.timeout(90)
def test_a_cast_shows_the_question_a_rank_waits_at_and_the_next_cast_answers_it(env, calc):
    lines = ["b 9", "clear", "y", "b"]
    done = run_debug(env, *[arg for line in lines for arg in ("-c", f"cast calc ranks(:) {line}")], "-c", "continue")
    assert done.returncode == 0, done.stderr
    answers = done.stdout.split("calc ranks[0,1] (2)\n")[1:]
    assert answers[0].startswith("Breakpoint 1 at ")
    assert answers[1] == "Clear all breaks?\n"
    assert answers[2].startswith("Deleted breakpoint 1 at ")
    assert answers[3].startswith("(no output)\n"), "no breakpoint is left"


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


CHAINED = textwrap.dedent("""
    from monarch_pdb.actor import Actor, endpoint, this_host


    def load(table):
        return table["missing"]


    class Loader(Actor):
        @endpoint
        def step(self):
            table = {"present": 1}
            breakpoint()
            try:
                load(table)
            except KeyError as error:
                raise ValueError("step failed") from error


    if __name__ == "__main__":
        try:
            this_host().spawn_procs(per_host={"gpu": 1}).spawn("loader", Loader).step.call().get()
        except Exception as error:
            print("FAILED", error)
""")


@pytest.mark.timeout(120)
def test_post_mortem_is_handed_the_exception_with_its_chain(env, tmp_path):
    script = tmp_path / "chained.py"
    script.write_text(CHAINED)
    program = Program(env, script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 1)
        assert run_debug(env, "-c", "continue").returncode == 0
        wait_for_sessions(env, 1, state="post-mortem")
        lines = ["bt", "p $_exception", "exceptions", "exceptions 0", "bt"]
        done = run_debug(
            env, *[arg for line in lines for arg in ("-c", f"cast loader ranks(0) {line}")], "-c", "continue"
        )
        assert done.returncode == 0, done.stderr
        *answers, last = done.stdout.split("loader ranks[0] (1)\n")[1:]
        last, continued = last.split("Continued ")
        answers.append(last)
        assert continued == "1 rank: loader ranks[0]\n"
        raised = f'> {script}(17)step()\n-> raise ValueError("step failed") from error\n'
        assert answers[0] == raised, "the stack starts at the program's frame"
        if sys.version_info >= (3, 12):
            assert answers[1] == "ValueError('step failed')\n"
        if PDB_TAKES_EXCEPTIONS:
            assert answers[2] == "    0 KeyError('missing')\n>   1 ValueError('step failed')\n"
            assert answers[3] == f'> {script}(6)load()\n-> return table["missing"]\n'
            assert answers[4] == f"  {script}(15)step()\n-> load(table)\n{answers[3]}"
        code, output = program.finish()
        assert code == 0 and "FAILED 1 of 1 rank" in output, output
    finally:
        program.stop()


BROKEN_STR = textwrap.dedent("""
    import monarch_pdb


    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no words for it")


    monarch_pdb.install()
    value = 3
    raise Broken()
""")


@pytest.mark.timeout(90)
def test_an_exception_whose_str_raises_still_opens_post_mortem(env, tmp_path, broker, shell):
    script = tmp_path / "broken.py"
    script.write_text(BROKEN_STR)
    sh = shell()
    program = Program(dict(env, MONARCH_PDB_POST_MORTEM="always"), script, cwd=tmp_path)
    try:
        sh.expect(r"\bbroken \d+ entered post-mortem at broken\.py:12: Broken: <exception str\(\) failed>$")
        assert sh.command("cast broken ranks(:) p value").endswith("\n3\n")
        sh.command("continue")
        code, output = program.finish()
        assert code == 1 and output.endswith("Broken: <exception str() failed>\n"), output
        assert "Error in sys.excepthook" not in output
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_post_mortem_with_nothing_raised_and_pm_with_nothing_uncaught_say_so(env, tmp_path):
    script = tmp_path / "nothing.py"
    script.write_text(
        "import monarch_pdb\n\nfor entry in (monarch_pdb.post_mortem, monarch_pdb.pm):\n    try:\n        entry()\n"
        "    except ValueError as error:\n        print('REFUSED', error)\n"
    )
    code, output = Program(env, script, cwd=tmp_path).finish()
    assert (code, output) == (
        0,
        "REFUSED A valid traceback must be passed if no exception is being handled\n"
        "REFUSED no uncaught exception to debug: pm() debugs the last one Python kept (sys.last_exc), and there is none\n",
    )


@pytest.mark.timeout(60)
def test_post_mortem_of_an_exception_without_a_traceback_is_pdbs_own_error(env, tmp_path):
    script = tmp_path / "unraised.py"
    script.write_text(
        "from monarch_pdb.rank import debugger\n\ntry:\n    debugger.post_mortem(ValueError('never raised'))\n"
        "except ValueError as error:\n    print('REFUSED', error)\n"
    )
    code, output = Program(env, script, cwd=tmp_path).finish()
    assert (code, output) == (0, "REFUSED A valid traceback must be passed if no exception is being handled\n")


CAUGHT = textwrap.dedent("""
    import code
    import pdb

    import monarch_pdb


    def load(table):
        return table["missing"]


    def step(how):
        table = {}
        try:
            if how == "post_mortem":
                return table["missing"]
            load(table)
        except KeyError as error:
            if how == "post_mortem":
                monarch_pdb.post_mortem()
            elif how == "pdb":
                pdb.post_mortem(error.__traceback__)
            else:
                return error.__traceback__
        print("AFTER", how, flush=True)


    step("post_mortem")
    code.InteractiveInterpreter(globals()).runsource("load({'other': 1})")
    monarch_pdb.pm()
    print("AFTER pm", flush=True)
    monarch_pdb.install()
    step("pdb")
    monarch_pdb.post_mortem(step("traceback"))
    print("AFTER traceback", flush=True)
""")


@pytest.mark.timeout(120)
def test_post_mortem_and_pm_called_by_the_program_open_a_post_mortem_session_where_it_raised(
    env, tmp_path, broker, shell
):
    """pdb's entry points, ours: `monarch_pdb.post_mortem()` in an `except` block, `pm()` after an
    interactive interpreter reported an exception, once installed `pdb.post_mortem(tb)`, and a
    traceback kept past its `except` each stop the rank in post-mortem at the line that raised,
    as an uncaught exception would, and the program goes on when continued."""
    script = tmp_path / "caught.py"
    script.write_text(CAUGHT)
    sh = shell()
    program = Program(env, script, cwd=tmp_path)
    try:
        missing = "KeyError: 'missing'"
        for function, line, said, table, after in (
            ("step", 16, missing, "{}", "AFTER post_mortem"),
            ("load", 9, missing, "{'other': 1}", "AFTER pm"),
            ("load", 9, missing, "{}", "AFTER pdb"),
            ("load", 9, "a traceback, its exception not given", "{}", "AFTER traceback"),
        ):
            sh.expect(rf"\bcaught \d+ entered post-mortem at caught\.py:{line}: {re.escape(said)}$")
            [row] = wait_for_sessions(env, 1, state="post-mortem")
            assert (row.function, row.lineno) == (f"caught.{function}", line)
            assert sh.command("cast caught ranks(:) p table").endswith(f"\n{table}\n")
            assert "Continued 1 rank" in sh.command("continue")
            wait_for_lines(program, after, 1)
        code, output = program.finish()
        assert code == 0, output
    finally:
        program.stop()


EXCEPT_STAR = textwrap.dedent("""
    import sys

    import monarch_pdb


    def work():
        try:
            raise ExceptionGroup("eg", [ValueError("v")])
        except* ValueError:
            value = 7
            breakpoint()


    if sys.argv[1:] != ["stock"]:
        monarch_pdb.install()
    work()
    print("DONE")
""")
"""On 3.12 the breakpoint's frame goes on to its return with no line number (None)."""


@pytest.mark.timeout(90)
@pytest.mark.skipif(sys.version_info < (3, 11), reason="except* is new in Python 3.11")
def test_a_breakpoint_in_an_except_star_block_stops_where_stock_pdb_does(env, tmp_path):
    script = tmp_path / "grouped.py"
    script.write_text(EXCEPT_STAR)
    stock = subprocess.run(
        [sys.executable, str(script), "stock"],
        input="c\n",
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(env, PYTHONBREAKPOINT="pdb.set_trace"),
        cwd=tmp_path,
    ).stdout
    stop = re.search(r"^> .*\n-> .*\n", stock, re.M).group(0)
    program = Program(env, script, cwd=tmp_path)
    try:
        [row] = wait_for_sessions(env, 1)
        done = run_debug(
            env,
            "-c",
            "stacks grouped",
            "-c",
            "cast grouped ranks(:) where",
            "-c",
            "cast grouped ranks(:) p value",
            "-c",
            "continue",
        )
        assert done.returncode == 0, done.stderr
        stacks, where, value = done.stdout.split(f"grouped ranks[{row.rank}] (1)\n")
        assert where.endswith(stop) and value.startswith("7\n"), (stock, done.stdout)
        assert f"grouped.py:{row.lineno} work  ranks[{row.rank}] (1)" in stacks, stacks
        code, output = program.finish()
        assert code == 0 and output.endswith("DONE\n"), output
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_continue_that_finds_ranks_asked_whether_to_clear_lets_them_go_on(env, calc):
    done = run_debug(env, "-c", "cast calc ranks(:) b 9", "-c", "cast calc ranks(:) clear", "-c", "continue")
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("Continued 2 ranks: calc ranks[0,1]\n"), done.stdout
    code, output = calc.finish()
    assert code == 0 and "RESULT [100, 101]" in output


TWO_CALLS = textwrap.dedent("""
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
""")


@pytest.mark.timeout(120)
def test_pdb_set_trace_in_an_installed_process_is_a_session_even_after_another_ended(env, tmp_path):
    script = tmp_path / "two_calls.py"
    script.write_text(TWO_CALLS)
    program = Program(env, script, cwd=tmp_path)
    try:
        for function, value in (("first", "1"), ("second", "2")):
            wait_for_all_rows(
                env,
                lambda rows: any(r.function == f"two_calls.{function}" and r.state == "breakpoint" for r in rows),
                timeout=60,
            )
            done = run_debug(env, "-c", "cast stepper ranks(0) p value", "-c", "continue")
            assert done.returncode == 0 and done.stdout.startswith(f"stepper ranks[0] (1)\n{value}\n"), (
                done.stdout + done.stderr
            )
        code, output = program.finish()
        assert code == 0 and "RESULT [1] [2]" in output, output
    finally:
        program.stop()


AFTER_A_SESSION = textwrap.dedent("""
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
""")


@contextmanager
def after_a_session(env, tmp_path, then: str, typed: str = "") -> Iterator[tuple[Program, str]]:
    """AFTER_A_SESSION under PYTHONBREAKPOINT alone, once its `breakpoint()` session has ended,
    and what it printed so far; `then` is what it does next: `stock` pdb.set_trace(), or wait
    for a debugger `attached` by pid. `typed` is its standard input."""
    script = tmp_path / "after.py"
    script.write_text(AFTER_A_SESSION)
    (tmp_path / "typed").write_text(typed)
    with open(tmp_path / "typed") as stdin:
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
    with after_a_session(env, tmp_path, "stock", typed="p value * 6\nc\n") as (program, printed):
        code, rest = program.finish()
        output = printed + rest
        assert code == 0 and "(Pdb) 42\n" in output and "LEFT 7" in output, output


@pytest.mark.skipif(sys.version_info < (3, 14), reason="python -m pdb -p is new in Python 3.14")
@pytest.mark.timeout(90)
def test_python_m_pdb_attaches_to_a_process_whose_session_ended(env, tmp_path):
    with after_a_session(env, tmp_path, "attached") as (program, _):
        attached = subprocess.run(
            [
                sys.executable,
                "-m",
                "pdb",
                "-p",
                str(program.proc.pid),
                "-c",
                "p value * 6",
                "-c",
                "!done = True",
                "-c",
                "c",
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert attached.returncode == 0 and "42\n" in attached.stdout, attached.stdout + attached.stderr
        assert "Another PDB instance" not in attached.stdout
        code, output = program.finish()
        assert code == 0 and "LEFT 7" in output, output


AWAITS = textwrap.dedent("""
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
""")


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
        assert "-> await pdb.set_trace_async(" in attached
        if "\n8\n" not in attached:  # attached between the stop line and its commands' answer, on a busy machine
            sh.expect(r"(?m)^8$")
        assert sh.command("p $_asynctask").startswith("<Task pending name=")
        sh.command("!tenfolded = await tenfold(value)")
        assert sh.command("p tenfolded").strip() == "40"
        assert "Detached from debug session for fetcher 0" in sh.command("c")
        code, output = program.finish()
        assert code == 0 and "RESULT [4]" in output, output
    finally:
        program.stop()


@pytest.mark.each_python
@pytest.mark.timeout(120)
def test_post_mortem_after_a_breakpoint_was_set_stops_where_it_was_raised_with_its_stack(example, shell):
    """A breakpoint left set keeps pdb tracing the rank as it raises: post-mortem still stops
    at the raising frame, never inside the debugger's own code."""
    sh = shell()
    sh.command("attach debugee 2")
    sh.command("b 12")
    out = sh.command("c")
    assert re.search(r"^> \S*debugging\.py\(5\)_bad_rank\(\)\n-> raise ValueError\(\"bad rank\"\)\n", out), out
    trace = sh.command("bt")
    assert "bdb.py" not in trace and "to_debug()" in trace, trace
    assert trace.rstrip().endswith('-> raise ValueError("bad rank")'), trace
