"""The shell's whole-job commands in the editor's Debug Console: `!cast`, `!peek` and `!stacks`,
read and run by the command layer, so that editor and shell cannot disagree: a cast's answers
grouped with its numbers line, the merged stacks, and a line the shell would refuse refused
with the shell's reason.

An actor may be left out (`!cast ranks(0:8) p loss`): the one of the rank the console is at,
else the one the editor debugs; `!stacks` with no actor reads the running actors of the job
the editor debugs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from monarch_pdb.client.commands import COMMANDS as LAYER
from monarch_pdb.client.commands import FAILURES, StacksArgs, run
from monarch_pdb.client.connection import BrokerConnection
from monarch_pdb.client.editor.runtime import Refused

PREFIX = "!"
COMMANDS = ("cast", "peek", "stacks")


@dataclass(frozen=True)
class ConsoleAt:
    """Where the console is: the actor (and its job) a line without one means."""

    job: str = ""
    actor: str = ""


def command_of(line: str) -> tuple[str, str] | None:
    """(`cast`, the rest) of `!cast ...`; None for a line that is pdb's (`!x = 1` among them)."""
    if not line.startswith(PREFIX):
        return None
    word, _, rest = line[len(PREFIX) :].partition(" ")
    return (word, rest) if word in COMMANDS else None


def answer(conn: BrokerConnection, word: str, rest: str, here: ConsoleAt) -> str:
    """Command `word`'s answer as the shell shows it; Refused with the shell's one line, its
    usage as the console's `!` command's."""
    try:
        args = LAYER[word].parse(rest, f"{here.job}:{here.actor}" if here.job and here.actor else here.actor)
        if isinstance(args, StacksArgs) and args.actor is None:
            args = replace(args, job=here.job)
        return run(conn, args).shown
    except FAILURES as error:
        said = str(error)
        raise Refused(said.replace("usage: ", "usage: !", 1) if said.startswith("usage: ") else said) from None
