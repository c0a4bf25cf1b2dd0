"""The shell's own parsing never fails with anything but its one-line CommandError, and an
actor's name in quotes may hold spaces in every command that takes one."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from programs import NAMED_RANKS, Program, debug, wait_for_lines, wait_for_sessions

from monarch_pdb.client.commands.arguments import CommandError, parse_target, whole_number

WORDS = st.sampled_from(
    [
        "debugee",
        "job:debugee",
        ":",
        "ranks(",
        "ranks(1,,2)",
        "ranks(:)",
        "ranks(host=1)",
        "p x",
        "!",
        "?",
        ")",
        "(",
        " ",
        "\t",
        "0",
        "-1",
        "ranks(1)",
        "c",
        "\x00",
        "é",
    ]
)


@pytest.mark.timeout(60)
@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=60), st.lists(WORDS, max_size=8).map(" ".join)))
def test_parse_target_accepts_or_explains_in_one_line(text):
    try:
        job, actor, selection, rest = parse_target(text, "usage")
    except CommandError as error:
        assert "\n" not in str(error) and str(error)
        return
    name = text.strip()
    name = name[1 : name.find(name[0], 1)] if name[0] in "'\"" else name.partition(" ")[0]
    assert actor == name.rpartition(":")[2]
    assert selection is not None or rest == ""


@pytest.mark.timeout(90)
def test_an_actor_whose_name_has_a_space_is_reached_by_quoting_it(env, tmp_path, shell):
    script = tmp_path / "named.py"
    script.write_text(NAMED_RANKS)
    program = Program(env, script, "has space,has space,has space", "2", cwd=tmp_path)
    try:
        wait_for_lines(program, "RUNNING", 1)
        wait_for_sessions(env, 2)
        sh = shell()
        sh.child.send("attach has\t")
        sh.expect('"has space" ')
        sh.child.send("\t\t")
        sh.expect(r"^0\s+1\s*$")
        assert sh.command("1", shown='attach "has space" 1').startswith("Attached to debug session for has space 1 ")
        sh.command("detach")
        done = debug(
            env,
            'wait "has space" 2',
            'attach "has space" 1',
            "p value",
            "detach",
            "cast 'has space' ranks(:) p value",
            'follow "has space" ranks(0)',
            "follow off",
            'stacks "has space"',
            'peek "has space" ranks(2) rank',
            'interrupt "has space" ranks(2)',
            'mesh "has space"',
            "continue",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
        assert out.startswith("2 ranks of has space stopped\nAttached to debug session for has space 1 ")
        assert "\n10\nDetaching from debug session for has space 1 " in out
        assert "has space ranks[0] (1)\n0\nhas space ranks[1] (1)\n10\n" in out
        assert "Following has space ranks[0] (1); 'follow off' stops." in out
        assert "has space ranks[0-2] (3): 2 distinct stacks" in out
        assert "has space ranks[2] (1)\n2\n" in out, "peek"
        assert "Interrupted 1 rank: has space ranks[2] (1)" in out
        assert "has space: gpu\n   0 1 2\n0  S S S\n" in out
    finally:
        program.stop()


@pytest.mark.timeout(60)
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
@example("²")
@example("٣")
def test_ranks_and_counts_are_only_ascii_whole_numbers(text):
    plain = text.isascii() and text.isdigit()
    try:
        assert whole_number(text, "rank") == int(text) and plain
    except CommandError as error:
        assert not plain and "\n" not in str(error)
