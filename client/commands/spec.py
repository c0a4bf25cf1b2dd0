"""A command as data: its record of typed arguments, whose docstring is its usage and help (as a
pdb command's docstring is), the words that fill the record from a typed line, and the one
function that runs it on a connection to the broker and gives back an `Answer`.

Every front end calls the same function with a record: the shell and a script fill it from a
typed line (`Spec.parse`), the agent server, the editor and the notebook from their own typed
arguments. None of them writes a command line for another to read.
"""

from __future__ import annotations

import argparse
import inspect
import shlex
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from monarch_pdb.client.commands.answer import Answer
from monarch_pdb.client.commands.arguments import Argument, Parser, actor_word, split_words
from monarch_pdb.client.connection import BrokerConnection

Record = TypeVar("Record")
Run = Callable[[BrokerConnection, Any], Answer]


@dataclass(frozen=True)
class Spec:
    """One command. `refusal`: the error of a command that takes no arguments; `names_options`:
    a mistake in an option names the option (see `Parser`); `news_first`: the events heard
    while it ran are told before its answer (`wait` counts stops, which are told first)."""

    record: type
    run: Run
    arguments: tuple[Argument, ...]
    refusal: str = ""
    names_options: bool = False
    news_first: bool = False

    @property
    def name(self) -> str:
        return self.usage_line.split()[0]

    @property
    def usage_line(self) -> str:
        """The first line of the record's docstring: `cast <actor> ranks(<ranks>) <pdb command>`."""
        return (self.record.__doc__ or "").partition("\n")[0].strip()

    @property
    def usage(self) -> str:
        return usage(self.record)

    @property
    def about(self) -> str:
        return inspect.cleandoc((self.record.__doc__ or "").partition("\n")[2])

    def parser(self, kind: type[Parser] = Parser) -> Parser:
        """The parser of the command's words; the shell's adds cmd2's help and completion."""
        built = kind(self.usage_line, self.about, self.refusal, self.names_options)
        for names, options in self.arguments:
            built.add_argument(*names, **options)
        return built

    def read(self, parsed: argparse.Namespace, typed: str, words: int) -> Any:
        """The record of parsed words; `typed` is what followed the command word, as typed, in
        `words` words (a command whose last argument is a pdb line or an expression takes it as
        typed, through the record's `from_words`)."""
        from_words = getattr(self.record, "from_words", None)
        if from_words is not None:
            return from_words(parsed, typed, words)
        names = {f.name for f in fields(self.record)}
        return self.record(**{name: value for name, value in vars(parsed).items() if name in names})

    def line(self, args: Any, always: tuple[str, ...] = ()) -> str:
        """The line a person would type in the shell for `args`: what the agent server tells an
        agent it ran. Options that keep their default are left out, but those named in `always`
        (by their record's field), which the asker set itself."""
        options, positionals = [], []
        for names, settings in self.arguments:
            if not names[0].startswith("-"):
                positionals += typed_words(args, names[0])
                continue
            field = settings.get("dest", names[0].lstrip("-").replace("-", "_"))
            value = getattr(args, field)
            if settings.get("action") == "store_true":
                options += [names[0]] if value else []
            elif field in always or (value != settings.get("default") and value not in (None, "")):
                options.append(f"{names[0]} {word_of(value)}")
        return " ".join([self.name, *options, *positionals])

    def parse(self, typed: str, actor: str = "") -> Any:
        """The record of what followed the command word on a line; UsageError or CommandError
        with the one line that says what is wrong. `actor`: the one a line that starts with its
        selector means (the editor's console: the actor of the rank it is at)."""
        if actor and typed.lstrip().startswith("ranks("):
            typed = f"{shlex.quote(actor)} {typed.lstrip()}"
        words = split_words(typed)
        return self.read(self.parser().parse_args(words), typed, len(words))


def word_of(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return shlex.quote(str(getattr(value, "value", value)))


def typed_words(args: Any, name: str) -> list[str]:
    """The words of positional argument `name` of a line: the actor's name as the shell reads
    it after options, the selector, and the pdb line or expression as typed."""
    if name == "actor":
        return [] if args.actor is None else [actor_word(args.actor)]
    if name == "selector":
        return [args.ranks] if args.ranks else []
    if name in ("command", "expression"):
        return [args.ranks, args.line if name == "command" else args.expression]
    return [word_of(getattr(args, name))]


def usage(command: object) -> str:
    """The error that shows a command's usage: the first line of its docstring (its record's, or
    a `do_*` of the shell's own)."""
    return "usage: " + (command.__doc__ or "").partition("\n")[0].strip()


ALIASES = {"h": "help", "l": "list", "a": "attach", "c": "continue", "q": "quit"}
"""The one-letter names Monarch's shell gives its commands, which every front end that reads
typed lines takes too."""
COMMANDS: dict[str, Spec] = {}
"""Every command, by name."""
SPECS: dict[type, Spec] = {}
"""Every command, by the type of its record."""


def command(
    record: type, *arguments: Argument, refusal: str = "", names_options: bool = False, news_first: bool = False
) -> Callable[[Run], Run]:
    """Make `run` the command whose arguments are a `record`, read from a line by `arguments`."""

    def register(run: Run) -> Run:
        spec = Spec(record, run, arguments, refusal, names_options, news_first)
        COMMANDS[spec.name] = SPECS[record] = spec
        return run

    return register


def run(conn: BrokerConnection, args: Any) -> Answer:
    """Run the command whose record `args` is; it raises one of `answer.FAILURES` when it
    cannot answer."""
    return SPECS[type(args)].run(conn, args)


def with_settings(args: Record, **settings: Any) -> Record:
    """`args` with a front end's settings (the shell's `cast_timeout`, the terminal's width)
    in the fields of its record that take them."""
    names = {f.name for f in fields(args)}  # type: ignore[arg-type]
    return replace(args, **{name: value for name, value in settings.items() if name in names})  # type: ignore[type-var]
