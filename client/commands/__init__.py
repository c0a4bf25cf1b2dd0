"""Every command of the debugger as data, under every front end: the shell, a script, the
editor's Debug Console, the agent server and the notebook fill a command's record and call
`run`; the answer is the same text and document for all of them (see `spec.py`).

    from monarch_pdb.client import commands
    answer = commands.run(conn, commands.PeekArgs("trainer", "ranks(:)", "step"))
    answer = commands.run(conn, commands.parse("peek trainer ranks(:) step"))
"""

from __future__ import annotations

from typing import Any

from monarch_pdb.client.commands.answer import FAILURES, Answer, CommandError, UsageError, ask
from monarch_pdb.client.commands.cast import CastArgs, PeekArgs
from monarch_pdb.client.commands.hangs import CollectivesArgs, HangArgs, InterruptArgs, StacksArgs
from monarch_pdb.client.commands.roster import ContinueArgs, JobsArgs, ListArgs, MeshArgs, WaitArgs, json_row
from monarch_pdb.client.commands.spec import ALIASES, COMMANDS, Spec, run, usage, with_settings

__all__ = [
    "ALIASES",
    "COMMANDS",
    "FAILURES",
    "Answer",
    "CastArgs",
    "CollectivesArgs",
    "CommandError",
    "ContinueArgs",
    "HangArgs",
    "InterruptArgs",
    "JobsArgs",
    "ListArgs",
    "MeshArgs",
    "PeekArgs",
    "Spec",
    "StacksArgs",
    "UsageError",
    "WaitArgs",
    "ask",
    "json_row",
    "parse",
    "run",
    "usage",
    "with_settings",
]


def parse(line: str) -> Any:
    """The record of a whole command line (`peek trainer ranks(:) step`); CommandError naming
    what is wrong, an unknown command among it."""
    word, _, rest = line.strip().partition(" ")
    spec = COMMANDS.get(ALIASES.get(word, word))
    if spec is None:
        raise CommandError(f"unknown command {word!r}")
    return spec.parse(rest)
