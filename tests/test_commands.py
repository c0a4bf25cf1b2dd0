"""The command layer, in-process: every command's words become its typed record or one line that
says what is wrong, in milliseconds; a record is the same whichever front end fills it; and the
layer needs no cmd2, which only the shell's front end imports."""

from __future__ import annotations

import ast
import math
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monarch_pdb import wire
from monarch_pdb.client import commands
from monarch_pdb.client.commands import CommandError, StacksArgs
from monarch_pdb.client.commands.arguments import seconds

ROOT = pathlib.Path(__file__).resolve().parent.parent
TIME_LIMITS = ("-5", "0", "nan", "inf", "soon")


@pytest.mark.parametrize(
    "line, record",
    [
        ("list", commands.ListArgs()),
        ("list --all --rows", commands.ListArgs(all=True, rows=True)),
        ("jobs", commands.JobsArgs()),
        ("continue", commands.ContinueArgs()),
        ("wait --any 3", commands.WaitArgs(3, any=True)),
        ("wait job:train 2 --timeout 1.5", commands.WaitArgs(2, "job:train", timeout=1.5)),
        ("mesh", commands.MeshArgs()),
        ("mesh train", commands.MeshArgs("train")),
        ('cast "has space" ranks(0, 2)  p  x + 1', commands.CastArgs("has space", "ranks(0,2)", "p  x + 1")),
        ("cast -- -c ranks(1) n", commands.CastArgs("-c", "ranks(1)", "n")),
        ("peek --up 2 --json train ranks(:) x[0]", commands.PeekArgs("train", "ranks(:)", "x[0]", up=2, json=True)),
        ("peek --frame step train ranks(1) loss", commands.PeekArgs("train", "ranks(1)", "loss", function="step")),
        ("stacks", StacksArgs()),
        ("stacks train --json ranks(0:4)", StacksArgs("train", "ranks(0:4)", json=True)),
        (
            "stacks --thread all --native --samples 3 --every 0.5 --by step train",
            StacksArgs("train", thread=wire.Threads.ALL, native=True, samples=3, every=0.5, by="step"),
        ),
        ("collectives train", commands.CollectivesArgs("train")),
        ("collectives train ranks(3) --timeout 2", commands.CollectivesArgs("train", "ranks(3)", 2.0)),
        ("hang --json", commands.HangArgs(json=True)),
        ("interrupt train ranks(1,3)", commands.InterruptArgs("train", "ranks(1,3)")),
    ],
)
def test_a_typed_line_becomes_its_record_and_back(line, record):
    assert commands.parse(line) == record
    assert commands.parse(commands.COMMANDS[line.split()[0]].line(record)) == record


@pytest.mark.parametrize(
    "line, error",
    [
        ("list --bogus", "usage: list [--all] [--rows]"),
        ("jobs now", "jobs takes no arguments"),
        ("continue train", "continue takes no arguments (to continue some ranks: cast <actor> ranks(...) c)"),
        ("wait train", "count must be a non-negative whole number, not 'train'"),
        ("wait --any train 2", "usage: wait <actor> <count> [--timeout S] | wait --any <count> [--timeout S]"),
        ("wait train -1", "count must be a non-negative whole number, not '-1'"),
        ("cast train p x", "p x: expected 'ranks(' at position 1"),
        ("cast train ranks(0)", "cast needs a pdb command after the selector"),
        ("cast train", "usage: cast <actor> ranks(<ranks>) <pdb command>"),
        (
            "peek train ranks(0) x = 1",
            "peek evaluates an expression, not a statement ('x = 1'): it assigns nothing in the ranks",
        ),
        ("peek train ranks(0) x +", "peek needs a Python expression: invalid syntax in 'x +'"),
        ("peek --up -1 train ranks(0) x", "--up must be a non-negative whole number, not '-1'"),
        ("stacks train ranks(0) extra", "stacks takes an actor and a selector, not 'extra'"),
        ("stacks --samples 0", "--samples needs one sample at least, not '0'"),
        ("stacks --thread some", "--thread is main or all, not 'some'"),
        (
            "stacks --by 'x = 1'",
            "peek evaluates an expression, not a statement ('x = 1'): it assigns nothing in the ranks",
        ),
        ("interrupt train", "usage: interrupt <actor> ranks(<ranks>) [--timeout S]"),
        ("interrupt train ranks(0) more", "usage: interrupt <actor> ranks(<ranks>) [--timeout S]"),
        ("collectives train ranks(0:", "ranks(0:: missing ')' at position 9"),
        ('stacks "train', "No closing quotation in '\"train'"),
        ("nosuch", "unknown command 'nosuch'"),
    ],
)
def test_words_a_command_cannot_read_are_one_line_that_says_why(line, error):
    with pytest.raises(CommandError) as refused:
        record = commands.parse(line)
        commands.COMMANDS[line.split()[0]].run(None, record)  # checks that need no broker come first
    assert str(refused.value) == error


@pytest.mark.parametrize("value", TIME_LIMITS)
@pytest.mark.parametrize(
    "line",
    [
        "wait --any 1 --timeout {}",
        "peek --timeout {} t ranks(0) x",
        "stacks --every {} --samples 2",
        "interrupt t ranks(0) --timeout {}",
    ],
)
def test_time_limits_are_positive_finite_seconds(line, value):
    option = "--every" if "--every" in line else "--timeout"
    with pytest.raises(CommandError, match=f"^{option} needs a positive number of seconds, not '{value}'$"):
        commands.parse(line.format(value))


@pytest.mark.parametrize("value", TIME_LIMITS)
def test_the_shells_time_settings_are_positive_finite_seconds(value):
    with pytest.raises(ValueError, match=f"^needs a positive number of seconds, not '{value}'$"):
        seconds(value)


def test_a_line_from_the_editors_console_may_leave_out_its_actor():
    assert commands.COMMANDS["cast"].parse("ranks(0:2) p x", actor="job:has space") == commands.CastArgs(
        "job:has space", "ranks(0:2)", "p x"
    )
    assert commands.COMMANDS["stacks"].parse("", actor="train") == commands.StacksArgs()
    assert commands.COMMANDS["peek"].parse("other ranks(1) x", actor="train").actor == "other"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(commands.COMMANDS)),
    st.lists(
        st.one_of(
            st.sampled_from(
                ["train", "-c", "--", "ranks(", "ranks(:)", "ranks(1)", "--json", "--timeout", "nan", '"', "p x", "0"]
            ),
            st.text(max_size=12),
        ),
        max_size=6,
    ),
)
def test_any_words_are_a_record_or_one_line_error(name, words):
    try:
        record = commands.COMMANDS[name].parse(" ".join(words))
    except CommandError as error:
        assert str(error) and "\n" not in str(error)
        return
    assert type(record) is commands.COMMANDS[name].record
    for value in vars(record).values():
        assert not (isinstance(value, float) and not math.isfinite(value))


def test_every_command_has_its_usage_and_help_in_its_record():
    for name, spec in commands.COMMANDS.items():
        assert spec.usage_line.split()[0] == name
        assert spec.about, f"{name} has no help"


def imports_of(path: pathlib.Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_shells_front_end_imports_cmd2():
    importers = sorted(
        str(path.relative_to(ROOT)) for path in (ROOT / "client").rglob("*.py") if "cmd2" in imports_of(path)
    )
    assert importers and all(name.startswith("client/shell/") for name in importers), importers
