"""The shell's cmd2 side of a command: the `do_*` that cmd2 calls with the words it read, a
parser that adds cmd2's help and Tab completion to the command layer's own, and every
failure said as one line.

A command of the layer (`commands.COMMANDS`) becomes a `do_*` through `shell_command`; the
commands that only a terminal has (attach, follow, detach, quit) are written with `command`.
"""

from __future__ import annotations

import argparse
import functools
import inspect
from collections.abc import Callable
from typing import Any

import cmd2

from monarch_pdb.client.commands import FAILURES, Spec
from monarch_pdb.client.commands.arguments import Argument, Parser

CATEGORY = "Debugger"
"""The heading of our commands in `help`, above cmd2's own."""
Command = Callable[..., "bool | None"]


class ShellParser(Parser, cmd2.Cmd2ArgumentParser):
    """A command's parser with cmd2's help and Tab completion of its options."""


def typed_arguments(args: argparse.Namespace) -> str:
    """What follows the command word, as typed: cmd2's words have lost quotes and runs of spaces."""
    return args.cmd2_statement.get().raw.strip().partition(" ")[2]


def one_line_errors(do: Command) -> Command:
    """Every failure of a command as one line: a refusal, the broker's silence, Ctrl-C, and, as
    this goes above `cmd2.with_argparser`, a mistake in the arguments. The shell says it with
    `fail`."""

    @functools.wraps(do)
    def run(owner: Any, *args: Any, **kwargs: Any) -> bool | None:
        try:
            return do(owner, *args, **kwargs)
        except FAILURES as error:
            owner.fail(str(error))
        except KeyboardInterrupt:
            owner.fail("stopped waiting (Ctrl-C)")
        return None

    return run


def command(*arguments: Argument, refusal: str = "") -> Callable[[Command], Command]:
    """A `do_*` of the shell's own: its words parsed by these arguments under the usage that is
    its docstring's first line, and every failure one line."""

    def decorate(do: Command) -> Command:
        usage_line, _, about = (do.__doc__ or "").partition("\n")

        def parser() -> ShellParser:
            built = ShellParser(usage_line.strip(), inspect.cleandoc(about), refusal)
            for names, options in arguments:
                built.add_argument(*names, **options)
            return built

        return cmd2.with_category(CATEGORY)(one_line_errors(cmd2.with_argparser(parser)(do)))

    return decorate


def shell_command(spec: Spec) -> Command:
    """The `do_*` of a command of the layer: cmd2 reads its words, the layer makes its record,
    and the shell runs it and shows the answer (`DebugShell.answer`)."""

    def do(shell: Any, parsed: argparse.Namespace) -> None:
        statement = parsed.cmd2_statement.get()
        shell.answer(spec, spec.read(parsed, typed_arguments(parsed), len(statement.arg_list)))

    do.__doc__ = spec.record.__doc__
    do.__name__ = do.__qualname__ = f"do_{spec.name}"
    parser = functools.partial(spec.parser, ShellParser)
    return cmd2.with_category(CATEGORY)(one_line_errors(cmd2.with_argparser(parser)(do)))
