"""At the attached `(Pdb)` prompt of the real shell in a pseudo-terminal: Tab completes what the
rank's own pdb completes there, and pdb's colours show at a colour terminal unless turned off."""

from __future__ import annotations

import re
import textwrap

import pytest
from programs import Program, wait_for_sessions
from shell_driver import ShellDriver
from test_tree import tree  # noqa: F401 (the fixture of a root and its host brokers)

from monarch_pdb.rank.debugger import PDB_COLOURS

pytestmark = pytest.mark.each_python

PROGRAM = textwrap.dedent("""
    from monarch_pdb.actor import Actor, endpoint, this_host


    def helper():
        return 1


    class Options:
        def __init__(self):
            self.optimizer = "adam"
            self.optim_steps = 3


    class Trainer(Actor):
        @endpoint
        def train(self):
            self.options = Options()
            training_step = 7
            breakpoint()
            return training_step


    if __name__ == "__main__":
        this_host().spawn_procs(per_host={"gpu": 1}).spawn("trainer", Trainer).train.call().get()
""")
SCRIPT = "launch_job.py"
BREAK_LINE = next(n for n, line in enumerate(PROGRAM.splitlines(), 1) if line.strip() == "return training_step")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
RED = r'!print("\x1b[31mred\x1b[0m")'
"""A line that prints in colour itself, typed as the user types it."""


@pytest.fixture
def trainer(env, tmp_path):
    """PROGRAM's one rank, paused at its breakpoint, in a directory that holds its script."""
    script = tmp_path / SCRIPT
    script.write_text(PROGRAM)
    program = Program(env, script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 1)
        yield program
    finally:
        program.stop()


def attached_shell(env: dict[str, str], *args: str) -> ShellDriver:
    sh = ShellDriver(env, *args)
    sh.wait_prompt()
    sh.command("attach trainer 0")
    return sh


@pytest.mark.timeout(90)
def test_tab_completes_the_frames_names_attributes_and_files_as_the_ranks_pdb_does(trainer, env):
    sh = attached_shell(env)
    try:
        sh.child.send("p trai\t")
        sh.expect(r"p training_step")
        assert sh.command("", shown="p training_step").strip() == "7"

        sh.child.send("p self.options.optim\t\t")
        sh.expect(r"self\.options\.optim_steps +self\.options\.optimizer")
        sh.child.send("i\t")
        sh.expect(r"p self\.options\.optimizer")
        assert sh.command("", shown="p self.options.optimizer").strip() == "'adam'"

        sh.child.send("b laun\t")
        sh.expect(rf"b {SCRIPT}:")
        sh.child.send("\t")  # a line number comes next: pdb offers nothing, and nothing is sent
        out = sh.command(str(BREAK_LINE), shown=f"b {SCRIPT}:{BREAK_LINE}")
        assert re.fullmatch(rf"Breakpoint 1 at .*{SCRIPT}:{BREAK_LINE}\n", out), out

        sh.child.send("whe\t")
        sh.expect("where")
        assert re.search(r"-> (breakpoint\(\)|return training_step)\n$", sh.command("", shown="where"))
        assert sh.command("p training_step").strip() == "7", "no Tab moved the rank"
    finally:
        sh.kill()


@pytest.mark.timeout(120)
def test_tab_reaches_a_rank_below_a_host_broker(tree, shell):  # noqa: F811 (the fixture)
    tree.two_hosts()
    sh = shell()
    sh.command("attach rank 3")
    sh.child.send("p valu\t")
    sh.expect("p value")
    assert sh.command("", shown="p value").strip() == "9"


@pytest.mark.timeout(90)
def test_colours_show_at_a_colour_terminal_until_set_color_off(trainer, env, tmp_path):
    transcript = tmp_path / "transcript"
    sh = attached_shell(env, "--record", str(transcript))
    try:
        start = len(sh.raw)
        assert sh.command(RED).strip() == "red"
        assert "\x1b[31mred\x1b[0m" in sh.raw[start:], "the rank's colour reaches the terminal"
        assert "# out: red\n" in transcript.read_text(), "a transcript is plain text"
        sh.command("detach")
        sh.command("set color off")
        sh.command("attach trainer 0")
        assert sh.command(RED).strip() == "^[[31mred^[[0m", "shown as cat -v shows it"
    finally:
        sh.kill()


@pytest.mark.timeout(90)
def test_no_color_turns_colours_off(trainer, env):
    sh = attached_shell(dict(env, NO_COLOR="1"))
    try:
        assert sh.command(RED).strip() == "^[[31mred^[[0m"
    finally:
        sh.kill()


@pytest.mark.skipif(not PDB_COLOURS, reason="attached sessions show pdb's colours on Python 3.14")
@pytest.mark.timeout(90)
@pytest.mark.parametrize("turned_off", ["set color off", "NO_COLOR"])
def test_pdb_colours_its_source_at_a_colour_terminal(trainer, env, turned_off):
    sh = attached_shell(env)
    try:
        start = len(sh.raw)
        assert "training_step = 7" in sh.command("ll")
        assert COLOUR.search(sh.raw[start:]), "ll shows no colour"
    finally:
        sh.kill()
    sh = attached_shell(dict(env, NO_COLOR="1") if turned_off == "NO_COLOR" else env)
    try:
        if turned_off != "NO_COLOR":
            sh.command("detach")
            sh.command(turned_off)
            sh.command("attach trainer 0")
        start = len(sh.raw)
        listing = sh.command("ll")
        assert "training_step = 7" in listing and "^[" not in listing
        shown = sh.raw[start:]
        assert not COLOUR.search(shown[shown.index("training_step") : shown.rindex("training_step")]), (
            "the listing is plain"
        )
    finally:
        sh.kill()


@pytest.mark.skipif(not PDB_COLOURS, reason="attached sessions show pdb's colours on Python 3.14")
@pytest.mark.timeout(90)
def test_pdbs_debug_command_colours_as_its_debugger_does(trainer, env):
    sh = attached_shell(env)
    try:
        assert "ENTERING RECURSIVE DEBUGGER" in sh.command("debug helper()")
        start = len(sh.raw)
        assert "-> def helper():" in sh.command("s")
        assert COLOUR.search(sh.raw[start:]), "the recursive debugger shows no colour"
    finally:
        sh.kill()
