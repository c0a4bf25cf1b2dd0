"""What a session's pdb writes reaches the broker whole: idle output goes in whole lines, so a
rank that stalls between writing its prompt and reading its next line (thousands of ranks on
few cores) never sends the prompt as output."""

from __future__ import annotations

import time

import pytest

from monarch_pdb.rank.debugger import SessionIO


def io_with_told() -> tuple[SessionIO, list[int], list[tuple[str, str]]]:
    """A session's pdb stdout and stdin; what the agent is told, and what pdb's readline hands
    over (its output and its prompt)."""
    told: list[int] = []
    asked: list[tuple[str, str]] = []
    io = SessionIO(lambda printed: asked.append(printed) or "next\n")
    io.on_output = lambda: told.append(1)
    return io, told, asked


@pytest.mark.timeout(10)
def test_idle_output_leaves_an_unfinished_line_for_the_prompt():
    io, told, asked = io_with_told()
    io.write("'0:####'")
    io.write("\n")
    io.write("(Pdb) ")
    assert told == [1], "the agent is told once, when output first appears"
    later = time.monotonic() + 10
    assert io.take_idle(later) == ("'0:####'\n", True)
    assert io.take_idle(later) == ("", True), "an unfinished line is held, not sent"
    assert io.readline() == "next\n" and asked == [("", "(Pdb) ")]
    assert io.take_idle(later) == ("", False)
    io.write("next\n")
    assert told == [1, 1], "emptied, the next write tells the agent again"


@pytest.mark.timeout(10)
def test_output_is_held_while_it_is_being_written_and_all_of_it_goes_at_the_end():
    io, _, _ = io_with_told()
    io.write("progress 1/3 ")
    assert io.take_idle(time.monotonic()) == ("", True), "written just now"
    assert io.take_all() == "progress 1/3 "
    assert io.take_idle(time.monotonic() + 10) == ("", False)
