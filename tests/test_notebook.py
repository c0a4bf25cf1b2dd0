"""The guide's actor defined where Monarch cannot debug it: in `python -`, with no script file
to rerun in the workers. Its ranks are debugged from a terminal's shell with their own lines."""

from __future__ import annotations

import re

import pytest
from programs import EXAMPLES, Program, stop_line, wait_for_sessions

GUIDE = (EXAMPLES / "debugging.py").read_text()
RANK_1_STOP = stop_line(15)


@pytest.mark.timeout(120)
def test_the_guides_program_read_from_stdin_is_debugged_with_its_own_lines(env, shell, tmp_path):
    program_text = GUIDE.replace('{"host": 4, "gpu": 4}', '{"gpu": 4}')
    (tmp_path / "typed.txt").write_text(program_text)
    with open(tmp_path / "typed.txt") as typed:
        program = Program(env, "-", stdin=typed)
    try:
        wait_for_sessions(env, 4)
        sh = shell()
        sh.command("attach debugee 1")
        assert f"> <stdin>({RANK_1_STOP})_debugee_actor_internal()" in sh.command("where")
        assert re.search(r"^ 15 +(->)?\t        rank \+= 2$", sh.command("l"), re.M)
        sh.command("detach")
        assert "Continued 4 ranks: debugee ranks[0-3]" in sh.command("continue")
        wait_for_sessions(env, 1, state="post-mortem")
        sh.command("continue")
        code, output = program.finish(timeout=60)
    finally:
        program.stop()
    assert code == 1
    assert "ActorError: 1 of 4 ranks of debugee.to_debug raised: rank 2: ValueError: bad rank" in output
    assert 'File "<stdin>", line 5, in _bad_rank\n    raise ValueError("bad rank")' in output
