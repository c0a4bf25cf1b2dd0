"""A command's words: the checks of each kind of argument, a command line split into words as
the shell splits it, an actor and its `ranks(...)` read from them, and the parser of a
command's words, with the one line that says what is wrong with them.

Plain argparse: every front end reads words with it; only the shell adds cmd2's help and
completion on top (its parser derives from this one and cmd2's both).
"""

from __future__ import annotations

import argparse
import math
import shlex
from collections.abc import Sequence
from typing import Any, NoReturn

from monarch_pdb import wire
from monarch_pdb.client.commands.answer import CommandError, UsageError
from monarch_pdb.ranks import Selection, SelectorError, parse_selector, render_selector, split_selector

ACTOR_HELP = "the actor's name, or job:actor where several jobs have one"
SELECTOR_HELP = "which ranks: ranks(3), ranks(0,4), ranks(2:8:2), ranks(host=0, gpu=1:3)"
Argument = tuple[tuple[str, ...], dict[str, Any]]


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


def from_actor(typed: str, words: int, after_actor: list[str]) -> str:
    """What was typed (`words` words) from the actor's name on, as typed, for a command whose last
    argument takes the `after_actor` words after the name: the options and `--` before it left out."""
    return skip_words(typed, words - 1 - len(after_actor))


def actor_word(name: str) -> str:
    """An actor's name (`job:actor`) as a command line reads it after the command's options:
    in quotes where it has a space, and after `--` where it starts with `-`, which would read
    as an option."""
    word = f'"{name}"' if " " in name else name
    return f"-- {word}" if name.startswith("-") else word


class Parser(argparse.ArgumentParser):
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


def skip_words(text: str, count: int) -> str:
    """`text` after its first `count` words, the rest as typed."""
    for _ in range(count):
        text = first_word(text)[1]
    return text


def split_words(text: str) -> list[str]:
    """A command line's words as the shell's cmd2 splits them: at spaces, a quoted word whole
    and its quotes taken off."""
    try:
        words = shlex.split(text, comments=False, posix=False)
    except ValueError as error:  # an unclosed quote
        raise CommandError(f"{error} in {text!r}") from None
    return [w[1:-1] if len(w) > 1 and w[0] == w[-1] and w[0] in "'\"" else w for w in words]


def ranks_of(text: str) -> Selection:
    """A `ranks(...)` selector read, or the one line that says what is wrong with it."""
    try:
        return parse_selector(text)
    except SelectorError as error:
        raise CommandError(str(error)) from None


def actor_and_ranks(actor: str, selector: list[str], usage: str, extra_error: str = "") -> tuple[str, str]:
    """An actor's name and the words of its selector as a line gives them: the name, and the
    selector as text ("" where none is given). Anything after the selector is an error
    (`extra_error`, else one naming it)."""
    _, _, selection, extra = words_target(actor, selector, usage)
    if extra:
        command = usage.removeprefix("usage: ").split()[0]
        raise CommandError(extra_error or f"{command} takes an actor and a selector, not {extra!r}")
    return actor, "" if selection is None else render_selector(selection)
