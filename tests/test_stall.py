"""A broker that stops for longer than every liveness limit (SIGSTOP, a swapped-out host) and
then goes on: the shell attached through it ends up where the ranks really are."""

from __future__ import annotations

import os
import re
import signal
import textwrap

import pytest
from conftest import MARKER, processes_with_marker
from programs import Program, wait_for_sessions

from monarch_pdb.client.connection import ANSWER_GRACE

FOUR = textwrap.dedent("""
    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host


    class Debugee(Actor):
        @endpoint
        def to_debug(self):
            rank = current_rank().rank
            breakpoint()
            return rank * 10


    if __name__ == "__main__":
        print("RESULT", this_host().spawn_procs(per_host={"gpu": 4}).spawn("debugee", Debugee).to_debug.call().get().values())
""")

FAST_LIVENESS = {"MONARCH_PDB_HEARTBEAT": "0.5", "MONARCH_PDB_CONNECT_TIMEOUT": "1.5"}
"""The broker declares a peer lost after 1.5 s of silence, and ranks and shells give up on a
silent broker after 1.5 s."""
STALL = 4.0
"""Longer than both limits, with heartbeats and hellos queued up behind the stopped broker."""


def four_ranks(env: dict[str, str], tmp_path) -> Program:
    """Four ranks paused at their breakpoints, under a broker whose liveness limits are short."""
    env.update(FAST_LIVENESS)
    script = tmp_path / "four.py"
    script.write_text(FOUR)
    program = Program(env, script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 4)
    except BaseException:
        program.stop()
        raise
    return program


@pytest.mark.timeout(90)
def test_an_attached_shell_recovers_from_a_broker_that_stalls_past_every_liveness_limit(env, tmp_path, shell):
    program = four_ranks(env, tmp_path)
    try:
        sh = shell()
        assert "Attached to debug session for debugee 0" in sh.command("attach debugee 0")
        [broker] = [pid for pid, cmd in processes_with_marker(env[MARKER]) if "monarch_pdb.broker" in cmd]
        os.kill(broker, signal.SIGSTOP)
        try:
            sh.child.sendline("p rank")
            sh.expect(r"\(the broker does not answer; waiting for it; type 'detach' to leave\)", timeout=STALL)
            sh.expect_absent(r"^0$|w(?:as|ere) lost|finished", seconds=STALL)  # nothing answers a stopped broker
        finally:
            os.kill(broker, signal.SIGCONT)
        assert sh.wait_prompt() == "(Pdb)", "the line typed during the stall is answered"
        during = sh.text[sh.seen :]
        assert re.search(r"^0$", during, re.M), during
        assert not re.search(r"w(?:as|ere) lost|finished|stopped at", during), "no rank left, so none came back"
        assert "Detached from debug session for debugee 0" in sh.command("detach")
        assert re.findall(r"^\| debugee +\| (\d) ", sh.command("list"), re.M) == ["0", "1", "2", "3"]
        attached = sh.command("attach debugee 3")
        assert "Attached to debug session for debugee 3" in attached
        assert len(re.findall(r"^-> ", attached, re.M)) == 1, "what a rank printed is shown once"
        assert sh.command("p rank * 2").strip() == "6"
        sh.command("detach")
        assert sh.command("cast debugee ranks(:) p rank").startswith(
            "debugee ranks[0] (1)\n0\ndebugee ranks[1] (1)\n1\ndebugee ranks[2] (1)\n2\ndebugee ranks[3] (1)\n3\n"
        )
        assert not re.search(r"w(?:as|ere) lost|finished", sh.text), "nothing was announced gone that was not"
        assert "Continued 4 ranks: debugee ranks[0-3]" in sh.command("continue")
        code, output = program.finish()
        assert code == 0 and "RESULT [0, 10, 20, 30]" in output, output
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_cast_through_a_broker_that_stalls_past_its_time_shows_what_arrived_and_names_the_rest(env, tmp_path, shell):
    program = four_ranks(env, tmp_path)
    try:
        sh = shell()
        sh.command("set cast_timeout 1")
        [broker] = [pid for pid, cmd in processes_with_marker(env[MARKER]) if "monarch_pdb.broker" in cmd]
        sh.child.sendline("cast debugee ranks(:) p rank if rank != 3 else __import__('time').sleep(30)")
        sh.expect(r"answered 3/4")
        os.kill(broker, signal.SIGSTOP)
        try:
            sh.expect(r"\(the broker does not answer; waiting for it; Ctrl-C stops waiting\)", timeout=STALL)
            # Past the shell's own time for the cast, which does not run out while the broker is stopped.
            sh.expect_absent(r"did not finish|no answer from", seconds=1 + ANSWER_GRACE)
        finally:
            os.kill(broker, signal.SIGCONT)
        answer = sh.expect(r"(?s)debugee ranks\[0\] \(1\)\n0\n.*?\nno answer from [^\n]*\n|did not finish[^\n]*")
        answered = r"^debugee ranks\[1\] \(1\)\n1\ndebugee ranks\[2\] \(1\)\n2\n"
        assert re.search(answered, answer.group(), re.M), answer.group()
        assert answer.group().endswith("\nno answer from debugee ranks[3] (1): still running\n"), answer.group()
        assert sh.wait_prompt() == "monarch_dbg>"
    finally:
        program.stop()
