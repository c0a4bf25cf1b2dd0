"""The names a rank goes under, as the shell shows them and takes them: a script's file name
with escape sequences in it cannot reach the terminal raw, an actor whose name starts with `-`
(a `python -c` process's once was) is reached by every command after `--`, `python -c` names a
process alike from inside it and from outside, long job names keep the end that tells two jobs
apart, and a count of one is singular."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from programs import (
    DEBUG_SHELL,
    NAMED_RANKS,
    RUNS,
    Program,
    debug,
    wait_for_all_rows,
    wait_for_lines,
    wait_for_sessions,
)

from monarch_pdb import wire
from monarch_pdb.client.commands import hang_report
from monarch_pdb.client.commands.listing import JOB_SHOWN
from monarch_pdb.client.commands.stack_samples import Motion
from monarch_pdb.ranks import RankSet, counted

ESCAPES = "\x1b]0;pwned\x07\x1b[2J"
"""A terminal title (OSC) and a clear-screen: what a file name may hold."""
SHOWN = "^[]0;pwned^G^[[2J"
"""The same as the shell shows it, as `cat -v` does."""


@pytest.mark.timeout(90)
def test_escape_sequences_in_a_scripts_file_name_are_shown_escaped_in_list_stacks_and_mesh(env, tmp_path, shell):
    script = tmp_path / f"evil{ESCAPES}.py"
    script.write_text(RUNS)
    program = Program(env, script, cwd=tmp_path)
    try:
        wait_for_lines(program, "RUNNING", 1)
        wait_for_all_rows(env, lambda rows: [r.actor for r in rows] == [f"evil{ESCAPES}"])
        sh = shell()
        listed = sh.command("list --all")
        assert f"| evil{SHOWN} " in listed, listed
        table = [line for line in listed.splitlines() if line[:1] in "+|"]
        assert len({len(line) for line in table}) == 1, "the columns line up on what is shown:\n" + listed
        stacks = sh.command("stacks")
        assert stacks.startswith(f"evil{SHOWN} ranks[{program.proc.pid}] (1)"), stacks
        assert f"evil{SHOWN}.py:" in stacks, "the frame's file too: " + stacks
        mesh = sh.command("mesh")
        assert mesh.startswith(f"evil{SHOWN}: ranks, 16 a row"), mesh
        for raw in ("\x1b]0;", "\x1b[2J", "pwned\x07"):
            assert raw not in sh.raw, f"{raw!r} reached the terminal"
        outside = subprocess.run(
            [DEBUG_SHELL[0], "stacks", str(program.proc.pid)], env=env, capture_output=True, text=True, timeout=60
        )
        assert f"evil{SHOWN}.py:" in outside.stdout and "\x1b" not in outside.stdout, "read from outside too"
        documents = debug(env, "list --all", flags=("--json",))
        assert [row["actor"] for row in json.loads(documents.stdout)] == [f"evil{ESCAPES}"], (
            "--json has the name as sent"
        )
    finally:
        program.stop()


def hang_suggestions(text: str) -> list[str]:
    """The commands `hang` says to type next, as printed."""
    after = text.partition("== next:\n")[2]
    return [re.split(r"  +", line.strip())[0] for line in after.splitlines() if line.strip()]


@pytest.mark.timeout(120)
def test_every_command_reaches_an_actor_whose_name_starts_with_a_dash_after_double_dash(env, tmp_path, shell):
    script = tmp_path / "named.py"
    script.write_text(NAMED_RANKS)
    program = Program(env, script, "-c,-c,-c", "1", cwd=tmp_path)
    try:
        wait_for_lines(program, "RUNNING", 1)
        wait_for_sessions(env, 2)
        sh = shell()
        refused = sh.command("stacks -c")
        assert refused.strip() == (
            "Error processing command: stacks has no option -c (an actor whose name starts with - goes after --: "
            "stacks -- -c); usage: " + re.search(r"usage: (.*)$", refused).group(1)
        ), refused
        for line in ("peek -c ranks(0) value", "interrupt -c ranks(1)", "collectives -c", "mesh -c"):
            assert "an actor whose name starts with - goes after --" in sh.command(line), line

        assert sh.command("peek -- -c ranks(0,2) value").startswith("-c ranks[0] (1)\n0\n-c ranks[2] (1)\n20\n")
        assert sh.command("peek --timeout 3 -- -c ranks(2) value") == "-c ranks[2] (1)\n20\n"
        assert sh.command("stacks -- -c ranks(1)").startswith("-c ranks[1] (1): 1 distinct stack\n")
        assert sh.command("stacks --json -- -c ranks(1)").startswith('{"actor": "-c"')
        assert "Error" not in sh.command("collectives -- -c")
        assert sh.command("mesh -- -c").startswith("-c: gpu\n")
        assert sh.command("wait -- -c 2").strip() == "2 ranks of -c stopped"
        assert sh.command("cast -- -c ranks(0) p value + 1") == "-c ranks[0] (1)\n1\n"

        story = sh.command("hang -- -c")
        suggested = hang_suggestions(story)
        assert [command.split()[0] for command in suggested] == ["stacks", "peek", "interrupt"], story
        assert all(" -- -c ranks(" in command for command in suggested), story
        locals_of = sh.command(suggested[0])
        assert locals_of.startswith("-c ranks[") and "Error" not in locals_of, locals_of
        stopped = sh.command(suggested[2])
        assert re.search(
            r"^(Interrupted \d ranks?: -c ranks\[|Every selected rank of -c is already stopped)", stopped, re.M
        )
        attach = re.search(r"`(attach -- -c \d+)`", story).group(1)
        assert "\nAttached to debug session for -c " in "\n" + sh.command(attach)
        assert sh.command("p rank").strip() == attach.split()[-1]
        sh.command("detach")
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_python_c_process_is_python_c_to_list_and_to_outside_stacks(env, tmp_path):
    program = Program(env, RUNS, launcher=[sys.executable, "-c"], cwd=tmp_path)
    try:
        wait_for_lines(program, "RUNNING", 1)
        rows = wait_for_all_rows(env, lambda rows: len(rows) == 1)
        assert (rows[0].actor, rows[0].job) == ("python-c", f"python-c-{program.proc.pid}")
        outside = subprocess.run(
            [DEBUG_SHELL[0], "stacks", str(program.proc.pid)], env=env, capture_output=True, text=True, timeout=60
        )
        assert outside.stdout.startswith(f"python-c pids ranks[{program.proc.pid}] (1)"), (
            outside.stdout + outside.stderr
        )
        reached = debug(env, "stacks python-c")
        assert reached.returncode == 0 and reached.stdout.startswith("python-c ranks["), reached.stdout + reached.stderr
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_the_job_column_keeps_the_end_that_tells_two_torchrun_jobs_apart(env, tmp_path, shell):
    script = tmp_path / "finetune_llama.py"
    script.write_text("value = 1\nbreakpoint()\n")
    launched = dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", RANK="0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    programs = [Program(dict(launched, MASTER_PORT=port), script, cwd=tmp_path) for port in ("29500", "29501")]
    try:
        jobs = sorted({r.job for r in wait_for_sessions(env, 2)})
        assert jobs == ["finetune_llama-torchrun-29500", "finetune_llama-torchrun-29501"]
        listed = shell().command("list")
        cells = re.findall(r"^\| (\S+) +\| finetune_llama ", listed, re.M)
        assert len(cells) == 2 and len(set(cells)) == 2, listed
        assert all(len(cell) <= JOB_SHOWN for cell in cells), listed
        assert [cell[-5:] for cell in cells] == ["29500", "29501"], listed
    finally:
        for program in programs:
            program.stop()


@pytest.mark.timeout(90)
def test_a_count_of_one_rank_is_singular(env, tmp_path, shell):
    script = tmp_path / "solo.py"
    script.write_text("value = 1\nbreakpoint()\n")
    program = Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace"), script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 1)
        sh = shell()
        sh.command("set list_rows 0")
        assert sh.command("list").endswith("\n1 rank in 1 group; 'list --rows' shows each rank\n")
        assert sh.command("continue").startswith("Continued 1 rank: solo ")
    finally:
        program.stop()
    assert [counted(n, "rank") for n in (0, 1, 2)] == ["0 ranks", "1 rank", "2 ranks"]
    assert counted(1, "process", "processes") == "1 process" and counted(3, "process", "processes") == "3 processes"


def test_hang_suggests_attaching_a_rank_the_actor_has_when_its_ranks_are_process_ids():
    stacks = wire.StacksResult(
        ref=0,
        actor="-c",
        groups=[
            wire.StackGroup(
                [wire.ThreadStack("MainThread", [wire.Frame("solo.py", 1, "<module>")])], RankSet.of([4242, 5151])
            )
        ],
        missing=[],
    )
    story = hang_report.HangStory("-c", stacks, Motion(3, 0.5, [], []), None, None)
    assert [command for command, _ in hang_report.next_commands(story)] == [
        "stacks --locals -- -c ranks(:)",
        "peek -- -c ranks(:) <expression>",
        "interrupt -- -c ranks(:)",
    ]
    assert "then `attach -- -c 4242`" in hang_report.text(story)
