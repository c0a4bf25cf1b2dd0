"""Text that UTF-8 cannot carry (a lone surrogate: what `os.fsdecode` makes of a bad byte, a
path with an undecodable byte) travels escaped, as `\\udcff`, from rank to broker to shell; and
nothing a process sends ends its link to the broker."""

from __future__ import annotations

import os
import textwrap
from fractions import Fraction

import pytest
from programs import Program, run_debug, settings_for, wait_for_sessions

from monarch_pdb import wire
from monarch_pdb.client.connection import BrokerConnection

PROGRAM = textwrap.dedent("""
    import os
    import sys

    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host


    class Big(Actor):
        @endpoint
        def run(self):
            rank = current_rank().rank
            breakpoint()
            return rank


    if __name__ == "__main__":
        procs = this_host().spawn_procs(per_host={"gpu": 2})
        print("RESULT", procs.spawn("big", Big).run.call().get().values())
""")

UNDECODABLE = os.fsdecode(b"caf\xff")
"""A folder name whose last byte no UTF-8 decoder takes, as Python names it: `caf\\udcff`."""


@pytest.fixture
def big(env, tmp_path):
    """Runs PROGRAM from a folder of the name given, until its two ranks are paused."""
    programs: list[Program] = []

    def run(folder_name: str) -> Program:
        folder = tmp_path / folder_name
        folder.mkdir()
        (folder / "big.py").write_text(PROGRAM)
        programs.append(Program(env, folder / "big.py", cwd=folder))
        wait_for_sessions(env, 2)
        return programs[-1]

    yield run
    for program in programs:
        program.stop()


@pytest.mark.timeout(120)
def test_a_lone_surrogate_a_rank_prints_arrives_escaped_and_the_ranks_go_on(big, shell):
    program = big("plain")
    sh = shell()
    assert sh.command('cast big ranks(0:2) !print("\\udcff x")') == "big ranks[0,1] (2)\n\\udcff x\n"
    assert sh.command("cast big ranks(0:2) !raise ValueError(os.fsdecode(b'bad \\xff'))") == (
        "big ranks[0,1] (2)\n*** ValueError: bad \\udcff\n"
    )
    assert sh.command("cast big ranks(0) !sys.stdout.write(b'x')") == (
        "big ranks[0] (1)\n*** TypeError: write() argument must be str, not bytes\n"
    )
    assert sh.command("cast big ranks(1) p rank") == "big ranks[1] (1)\n1\n"
    assert "Continued 2 ranks: big ranks[0,1]" in sh.command("continue")
    code, output = program.finish()
    assert code == 0 and "RESULT [0, 1]" in output, output


@pytest.mark.timeout(120)
def test_a_path_with_an_undecodable_byte_is_listed_and_shown_escaped(big, shell):
    program = big(UNDECODABLE)
    sh = shell()
    listed = sh.command("list --rows")
    assert listed.count("| big.run ") == 2, listed
    sh.command("attach big 0")
    where = sh.command("where")
    assert f"{os.sep}caf\\udcff{os.sep}big.py(" in where, where
    assert sh.command("!print(__file__)").strip().endswith(f"caf\\udcff{os.sep}big.py")
    sh.command("detach")
    assert "Continued 2 ranks" in sh.command("continue")
    code, output = program.finish()
    assert code == 0 and "RESULT [0, 1]" in output, output


@pytest.mark.timeout(60)
def test_a_message_that_cannot_be_encoded_is_one_line_on_stderr_and_the_link_goes_on(env, broker, capfd):
    conn = BrokerConnection.open(settings_for(env))
    try:
        conn.post(wire.Input(sid=1, cmd=1, line=Fraction(1, 3)))
        assert conn.request(wire.ListAll(), wire.SessionList).rows == []
    finally:
        conn.close()
    assert capfd.readouterr().err.splitlines() == [
        "monarch-pdb: a message (input) could not be sent to the debug broker and is left out: "
        "TypeError: cannot send Fraction"
    ]


@pytest.mark.timeout(60)
def test_a_script_line_with_an_undecodable_byte_runs_as_it_would_from_the_command_line(env, broker, tmp_path):
    script, transcript = tmp_path / "bad.monarch", tmp_path / "bad.transcript"
    script.write_bytes(b"cast caf\xff ranks(0) p 1\n")
    done = run_debug(env, "--script", str(script), "--record", str(transcript))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"monarch-pdb: {script}:1: cast caf\\udcff ranks(0) p 1: No debug sessions for actor caf\\udcff"
    )
    assert b"\ncast caf\xff ranks(0) p 1\n" in transcript.read_bytes(), "the line as it was typed"
