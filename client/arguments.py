"""A shell command's words: its parser, built beside its `do_*` from the usage that is the first
line of its docstring (as pdb's commands have theirs), the checks of each kind of argument, and
the one line that says what is wrong with them, or why the broker refused the command.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import cmd2
from monarch_pdb.client.connection import RequestFailed, ShellConnection, Timeout

from monarch_pdb import wire
from monarch_pdb.ranks import Selection, SelectorError, split_selector

CATEGORY = "Debugger"
"""The heading of our commands in `help`, above cmd2's own."""
ACTOR_HELP = "the actor's name, or job:actor where several jobs have one"
SELECTOR_HELP = "which ranks: ranks(3), ranks(0,4), ranks(2:8:2), ranks(host=0, gpu=1:3)"
Command = Callable[..., "bool | None"]
Argument = tuple[tuple[str, ...], dict[str, Any]]
Reply = TypeVar("Reply", bound=wire.Message)


class CommandError(Exception):
    """A command that cannot be carried out; its text is printed after Monarch's prefix."""


class UsageError(CommandError):
    """Words a command's parser cannot read as its arguments."""


def natural(text: str) -> int:
    """A non-negative whole number as typed, for `set list_rows` and, through whole_number,
    every command's counts."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"must be a non-negative whole number, not {text!r}")
    return int(text)


def whole_number(text: str, what: str) -> int:
    try:
        return natural(text)
    except ValueError as error:
        raise CommandError(f"{what} {error}") from None


def seconds(text: str) -> float:
    """A time limit, for `set cast_timeout` and every `--timeout`: positive, finite seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"needs a positive number of seconds, not {text!r}")
    return value


def timeout(text: str) -> float:
    """The value of every command's `--timeout`."""
    try:
        return seconds(text)
    except ValueError as error:
        raise CommandError(f"--timeout {error}") from None


def every(text: str) -> float:
    """The value of `stacks --every`."""
    try:
        return seconds(text)
    except ValueError as error:
        raise CommandError(f"--every {error}") from None


def samples(text: str) -> int:
    """The value of `stacks --samples`: one sample at least."""
    count = whole_number(text, "--samples")
    if count < 1:
        raise CommandError(f"--samples needs one sample at least, not {text!r}")
    return count


def rank_number(text: str) -> int:
    return whole_number(text, "rank")


def count_number(text: str) -> int:
    return whole_number(text, "count")


def frames_up(text: str) -> int:
    return whole_number(text, "--up")


def threads(text: str) -> wire.Threads:
    if text not in set(wire.Threads):
        raise CommandError(f"--thread is main or all, not {text!r}")
    return wire.Threads(text)


def split_job(name: str) -> tuple[str, str]:
    """`job:actor` names an actor of one job; a bare actor name means whichever job has it."""
    job, _, actor = name.rpartition(":")
    return job, actor


def first_word(text: str) -> tuple[str, str]:
    """The first word of a line and the rest; a word in quotes, as cmd2 reads them ('has space',
    "has space"), may hold spaces."""
    text = text.strip()
    if text[:1] in ("'", '"'):
        end = text.find(text[0], 1)
        if end < 0:
            raise CommandError(f"no closing {text[0]} after the actor's name")
        return text[1:end], text[end + 1 :]
    word, _, rest = text.partition(" ")
    return word, rest


def parse_target(args: str, usage: str) -> tuple[str, str, Selection | None, str]:
    """`[job:]actor [ranks(...)] [rest]` into job, actor, the selection (if given) and the rest
    of the line, kept verbatim for pdb."""
    name, rest = first_word(args)
    if not name:
        raise CommandError(usage)
    return target(name, rest)


def target(name: str, rest: str) -> tuple[str, str, Selection | None, str]:
    """An actor's name (`job:actor`), and the selector and what follows it in `rest`."""
    job, actor = split_job(name)
    if not rest.strip():
        return job, actor, None, ""
    try:
        selection, after = split_selector(rest)
    except SelectorError as error:
        raise CommandError(str(error)) from None
    return job, actor, selection, after


def words_target(actor: str, selector: list[str], usage: str) -> tuple[str, str, Selection | None, str]:
    """The target of an actor's name as cmd2 gives it (one word, its quotes taken off) and the
    words of its selector, which cmd2 splits at spaces."""
    if not actor:
        raise CommandError(usage)
    return target(actor, " ".join(selector))


def typed_arguments(args: argparse.Namespace) -> str:
    """What follows the command word, as typed: cmd2's words have lost quotes and runs of spaces."""
    return args.cmd2_statement.get().raw.strip().partition(" ")[2]


def from_actor(typed: str, words: int, after_actor: list[str]) -> str:
    """What was typed (`words` words) from the actor's name on, as typed, for a command whose last
    argument takes the `after_actor` words after the name: the options and `--` before it left out."""
    return skip_words(typed, words - 1 - len(after_actor))


def typed_from_actor(args: argparse.Namespace, after_actor: list[str]) -> str:
    """`from_actor` of a command line the shell read."""
    return from_actor(typed_arguments(args), len(args.cmd2_statement.get().arg_list), after_actor)


def actor_word(name: str) -> str:
    """An actor's name (`job:actor`) as a command line reads it after the command's options:
    in quotes where it has a space, and after `--` where it starts with `-`, which would read
    as an option."""
    word = f'"{name}"' if " " in name else name
    return f"-- {word}" if name.startswith("-") else word


def usage(command: Command) -> str:
    """The error that shows a command's usage: the first line of its docstring."""
    first_line = (command.__doc__ or "").partition("\n")[0]
    return f"usage: {first_line.strip()}"


class Parser(cmd2.Cmd2ArgumentParser):
    """One command's arguments. A mistake in them is the command's one-line error: its short usage,
    `refusal` for a command that takes none, or with `names_options`, the option it has not; a
    word that starts with `-` where a command takes an actor is named, with the `--` that makes
    it an actor's name. An argument's `type` raises CommandError to say what is wrong with it,
    which argparse lets through. `help` shows the usage and the rest of the command's docstring."""

    def __init__(self, usage: str, description: str, refusal: str = "", names_options: bool = False) -> None:
        super().__init__(usage=usage, description=description, add_help=False, allow_abbrev=False)
        self.refusal = refusal
        self.names_options = names_options

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.refusal or f"usage: {self.usage}")

    def parse_args(  # type: ignore[override]  # one form: words in, a Namespace out
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """Options may come anywhere among the words (`stacks trainer --json ranks(0)`); a
        remainder, cast's pdb command, takes its words as they come. `--` ends the options:
        every word after it is an argument (`stacks -- -c`, an actor named `-c`), so options
        come before it."""
        words = list(args or [])
        try:
            if "--" in words or any(action.nargs == argparse.REMAINDER for action in self._actions):
                parsed, extra = self.parse_known_args(words, namespace)
            else:
                parsed, extra = self.parse_known_intermixed_args(words, namespace)
            if extra:
                self.error(f"unrecognized arguments: {' '.join(extra)}")
        except UsageError as error:
            raise self.not_an_option(words) or error from None
        return parsed

    def not_an_option(self, words: list[str]) -> CommandError | None:
        """The error for a word that reads as an option this command has not, among the options
        before its first argument: one that starts with a single `-`, where the command takes an
        actor, may be an actor's name, which goes after `--`."""
        options = self._option_string_actions
        unknown = ""
        following = iter(words)
        for word in following:
            if word == "--" or not word.startswith("-") or word.lstrip("-").isdigit():
                return None
            action = options.get(word.partition("=")[0])
            if action is None:
                unknown = word
                break
            if action.nargs != 0 and "=" not in word:
                next(following, "")  # its value
        if not unknown:
            return None
        command = (self.usage or "").split()[0]
        if not unknown.startswith("--") and any(action.dest == "actor" for action in self._actions):
            return CommandError(
                f"{command} has no option {unknown} (an actor whose name starts with - goes after --: "
                f"{command} -- {unknown}); usage: {self.usage}"
            )
        return CommandError(f"{command} has no option {unknown}; usage: {self.usage}") if self.names_options else None


def argument(*names: str, **options: Any) -> Argument:
    """One of a command's arguments, as argparse's add_argument takes it."""
    return names, options


def command(*arguments: Argument, refusal: str = "", names_options: bool = False) -> Callable[[Command], Command]:
    """A `do_*` of ours: its words parsed by these arguments under the usage that is its
    docstring's first line, and every failure one line (`one_line_errors`)."""

    def decorate(do: Command) -> Command:
        usage, _, about = (do.__doc__ or "").partition("\n")

        def parser() -> Parser:
            built = Parser(usage.strip(), inspect.cleandoc(about), refusal, names_options)
            for names, options in arguments:
                built.add_argument(*names, **options)
            return built

        return cmd2.with_category(CATEGORY)(one_line_errors(cmd2.with_argparser(parser)(do)))

    return decorate


def parser_of(do: Command) -> Parser:
    """A command's own parser, for another front end that reads the same words (the editor's
    Debug Console)."""
    return getattr(do, cmd2.constants.CMD_ATTR_ARGPARSER)()


def skip_words(text: str, count: int) -> str:
    """`text` after its first `count` words, the rest as typed."""
    for _ in range(count):
        text = first_word(text)[1]
    return text


def ask(conn: ShellConnection, msg: wire.Message, *replies: type[Reply]) -> Reply:
    """The broker's answer to `msg`, one of `replies`; its refusal becomes the command's
    one-line error."""
    reply = conn.request(msg, *replies)
    if isinstance(reply, wire.Error):
        raise CommandError(reply.text)
    assert isinstance(reply, replies)
    return reply


def one_line_errors(do: Command) -> Command:
    """Every failure of a command as one line: a refusal, the broker's silence, Ctrl-C, and, as
    this goes above `cmd2.with_argparser`, a mistake in the arguments. The command's owner (the
    shell, or a set of its commands) says it with `fail`."""

    @functools.wraps(do)
    def run(owner: Any, *args: Any, **kwargs: Any) -> bool | None:
        try:
            return do(owner, *args, **kwargs)
        except (CommandError, RequestFailed, Timeout) as error:
            owner.fail(str(error))
        except KeyboardInterrupt:
            owner.fail("stopped waiting (Ctrl-C)")
        return None

    return run
