"""The `monarch_dbg>` shell: Monarch's debugger commands as a cmd2 application.

At the top level each line is a command. While attached, every line goes verbatim to the
rank's pdb (only `detach` stays here), and the prompt is the one pdb asked with. Events from
the broker (a rank stopped, finished, was lost) are printed above the prompt as they come.

Lines are read by GNU readline, as pdb reads them: cmd2 3.5. The two prompts keep their own
readline history and completion, swapped when the shell attaches or detaches, so a line costs
the same at both. Results are written straight to the terminal, not through cmd2's rich
console, which costs a millisecond a call.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import functools
import json
import math
import os
import re
import select
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import NoReturn, TypeVar

import cmd2
from cmd2 import rl_utils
from cmd2.rl_utils import (RlType, readline, rl_force_redisplay, rl_get_display_prompt, rl_get_point, rl_set_prompt,
                           rl_type)
from cmd2.terminal_utils import async_alert_str

from monarch_pdb import wire
from monarch_pdb.client import answers, mesh
from monarch_pdb.client import stack_tree
from monarch_pdb.client.connection import RequestFailed, ShellConnection, Timeout, readable
from monarch_pdb.client.escapes import visible
from monarch_pdb.client.events import STOPS, describe_events
from monarch_pdb.client.pager import Pager, checked
from monarch_pdb.client.reporter import Reporter, Transcript
from monarch_pdb.client.table import groups_table, jobs_table, sessions_table
from monarch_pdb.ranks import Selection, SelectorError, format_ranks, parse_selector, render_selector, split_selector

TOP_PROMPT = "monarch_dbg> "
BANNER = (
    "\n\n" + "*" * 24 + " MONARCH DEBUGGER " + "*" * 24 + "\n"
    "Enter 'help' for a list of commands.\n"
    "Enter 'list' to show all active breakpoints.\n"
)
ALIASES = {"h": "help", "l": "list", "a": "attach", "c": "continue", "q": "quit"}
QUIT_COMMANDS = {"quit"} | {alias for alias, command in ALIASES.items() if command == "quit"}
HIDDEN = ["alias", "edit", "macro", "run_pyscript", "shell", "shortcuts"]
CATEGORY = "Debugger"
RUNNING_HINT_AFTER = 1.0
CAST_OUTPUTS = ("grouped", "raw")
WAIT_TIMEOUT = 60.0
INTERRUPT_TIMEOUT = 5.0
PEEK_TIMEOUT = 5.0
PEEK_USAGE = "peek [--frame FUNC | --up N] [--timeout S] [--json] <actor> ranks(<ranks>) <expression>"
PEEK_OPTIONS = ("--frame", "--up", "--timeout")
EOF = "eof"
"""What cmd2 hands over for Ctrl-D at either prompt."""
ERROR_COLOUR, PLAIN = "\x1b[91m", "\x1b[0m"
MAX_COMMAND_LINE = 65536
"""cmd2 splits a command into words in time that grows with the square of its length: a
longer line is refused at once rather than parsed for seconds."""
PDB_HISTORY_SUFFIX = ".pdb"
PDB_HISTORY_LENGTH = 1000
PDB_DELIMS = " \t\n`@#%^&*()=+[{]}\\|;:'\",<>?"
"""What ends a word for Tab at the pdb prompt: the characters pdb gives readline (3.13's and
later), so `self.opt` and `dir/file.py` are one word and `b file.py:` starts a new one."""
COMPLETION_TIMEOUT = 2.0
"""Seconds Tab at the pdb prompt waits for the rank's words before offering pdb's commands."""
COLOURS = ("on", "off")
Answer = TypeVar("Answer", bound=wire.Message)


class CommandError(Exception):
    """A command that cannot be carried out; its text is printed after Monarch's prefix."""


class OutputClosed(BaseException):
    """Whoever read the results stopped reading (`monarch-pdb debug -c list | head`): the run
    ends, quietly. Not an Exception, so that no command's error handling (cmd2 prints every
    Exception with its traceback hint) takes it for a failed command."""


@dataclass
class Left:
    """A session the shell left while lines typed for it may still wait to run."""

    session: str
    """The session and why it was left: `debugee 3 (host), whose session ended`."""
    prompt: str
    """Its pdb prompt, which the lines typed for it are shown after."""


@dataclass
class Attachment:
    session: int
    job: str
    actor: str
    rank: int
    host: str
    paused: bool
    prompt: str

    @property
    def label(self) -> str:
        return f"{self.actor} {self.rank} ({self.host})"

    def describe(self) -> dict:
        return {"job": self.job, "actor": self.actor, "rank": self.rank, "host": self.host}


def json_row(row: wire.SessionRow) -> dict:
    """A `list` row as docs/scripts.md's JSON schema names its fields."""
    return {"job": row.job, "actor": row.actor, "rank": row.rank, "coords": row.coords,
            "host": row.host, "pid": row.pid, "function": row.function, "file": row.filename,
            "line": row.lineno, "state": row.state, "instance": row.instance, "attached": row.attached}


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
        return text[1:end], text[end + 1:]
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


def rank_number(text: str) -> int:
    return whole_number(text, "rank")


def count_number(text: str) -> int:
    return whole_number(text, "count")


def threads(text: str) -> wire.Threads:
    if text not in set(wire.Threads):
        raise CommandError(f"--thread is main or all, not {text!r}")
    return wire.Threads(text)


@dataclass
class PeekArgs:
    function: str = ""
    up: int = 0
    limit: float = PEEK_TIMEOUT
    as_json: bool = False


def peek_arguments(text: str) -> tuple[PeekArgs, str]:
    """`peek`'s options, which come first, and the rest of the line as typed: the expression
    keeps its spaces and quotes, as a cast's pdb command does."""
    args = PeekArgs()
    rest = text.strip()
    while rest.startswith("--"):
        option, rest = (rest.split(None, 1) + [""])[:2]
        if option == "--json":
            args.as_json = True
            continue
        if option not in PEEK_OPTIONS:
            raise CommandError(f"peek has no option {option}; usage: {PEEK_USAGE}")
        value, rest = (rest.split(None, 1) + [""])[:2]
        if not value:
            raise CommandError(f"{option} needs a value; usage: {PEEK_USAGE}")
        if option == "--frame":
            args.function = value
        elif option == "--up":
            args.up = whole_number(value, "--up")
        else:
            args.limit = timeout(value)
    return args, rest


def expression_only(text: str) -> str:
    """The expression, or the one line that says why it is not one: `peek` changes nothing in
    a rank, so a statement is refused before it is sent."""
    try:
        compile(text, "<peek>", "eval")
        return text
    except SyntaxError as error:
        try:
            compile(text, "<peek>", "exec")
        except SyntaxError:
            raise CommandError(f"peek needs a Python expression: {error.msg} in {text!r}") from None
    raise CommandError(f"peek evaluates an expression, not a statement ({text!r}): it changes nothing in the ranks")


def words_target(actor: str, selector: list[str], usage: str) -> tuple[str, str, Selection | None, str]:
    """The target of an actor's name as cmd2 gives it (one word, its quotes taken off) and the
    words of its selector, which cmd2 splits at spaces."""
    if not actor:
        raise CommandError(usage)
    return target(actor, " ".join(selector))


def typed_arguments(statement: cmd2.Statement) -> str:
    """What follows the command word, as typed: cmd2's words have lost quotes and runs of spaces."""
    return statement.raw.strip().partition(" ")[2]


class Parser(cmd2.Cmd2ArgumentParser):
    """One command's arguments. A mistake in them is the command's one-line error: its short usage,
    or `refusal` for a command that takes none. An argument's `type` raises CommandError to say
    what is wrong with it, which argparse lets through. `help` shows the command's docstring as
    the description."""

    def __init__(self, usage: str, refusal: str = "") -> None:
        super().__init__(usage=usage, add_help=False, allow_abbrev=False)
        self.refusal = refusal

    def error(self, message: str) -> NoReturn:
        raise CommandError(self.refusal or f"usage: {self.usage}")

    def parse_args(self, args: Sequence[str] | None = None,
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """Options may come anywhere among the words (`stacks trainer --json ranks(0)`); a
        remainder, cast's pdb command, takes its words as they come."""
        if any(action.nargs == argparse.REMAINDER for action in self._actions):
            return super().parse_args(args, namespace)
        return self.parse_intermixed_args(args, namespace)


ACTOR_HELP = "the actor's name, or job:actor where several jobs have one"
SELECTOR_HELP = "which ranks: ranks(3), ranks(0,4), ranks(2:8:2), ranks(host=0, gpu=1:3)"

list_parser = Parser("list [--all] [--rows]")
list_parser.add_argument("--all", action="store_true", help="every rank known, running ones too")
list_parser.add_argument("--rows", action="store_true",
                         help="a row per rank however many (past list_rows ranks, a row per group of ranks by default)")

jobs_parser = Parser("jobs", refusal="jobs takes no arguments")

attach_parser = Parser("attach <actor> <rank> [--force] [--full]")
attach_parser.add_argument("actor", help=ACTOR_HELP)
attach_parser.add_argument("rank", type=rank_number, help="one of its ranks stopped at a breakpoint")
attach_parser.add_argument("--force", action="store_true", help="take the rank over from another shell")
attach_parser.add_argument("--full", action="store_true",
                           help="all it printed since its last input (at a terminal, a screenful by default)")

WAIT_USAGE = "wait <actor> <count> [--timeout S] | wait --any <count> [--timeout S]"
wait_parser = Parser(WAIT_USAGE)
wait_parser.add_argument("actor", nargs="?", help=ACTOR_HELP)
wait_parser.add_argument("--any", action="store_true", help="ranks of any actor, instead of one actor's")
wait_parser.add_argument("count", type=count_number, help="how many of its ranks must be stopped")
wait_parser.add_argument("--timeout", type=timeout, default=WAIT_TIMEOUT, metavar="S",
                         help=f"seconds to wait (default {WAIT_TIMEOUT:g})")

FOLLOW_USAGE = "follow <actor> [ranks(<ranks>)] | follow off"
follow_parser = Parser(FOLLOW_USAGE)
follow_parser.add_argument("actor", help=ACTOR_HELP + "; off stops following")
follow_parser.add_argument("selector", nargs="*", metavar="ranks(<ranks>)", help=SELECTOR_HELP + " (default: all)")

CAST_USAGE = "cast <actor> ranks(<ranks>) <pdb command>"
cast_parser = Parser(CAST_USAGE)
cast_parser.add_argument("actor", help=ACTOR_HELP)
cast_parser.add_argument("command", nargs=argparse.REMAINDER, metavar="ranks(<ranks>) <pdb command>",
                         help=SELECTOR_HELP + ", then the pdb command, sent as typed")

continue_parser = Parser("continue", refusal="continue takes no arguments (to continue some ranks: cast <actor> ranks(...) c)")

STACKS_USAGE = "stacks [actor] [ranks(<ranks>)] [--thread main|all] [--full] [--locals] [--json]"
stacks_parser = Parser(STACKS_USAGE)
stacks_parser.add_argument("actor", nargs="?", help=ACTOR_HELP + " (default: every running actor)")
stacks_parser.add_argument("selector", nargs="*", metavar="ranks(<ranks>)", help=SELECTOR_HELP + " (default: all)")
stacks_parser.add_argument("--thread", type=threads, default=wire.Threads.MAIN, metavar="main|all",
                           help="the main thread of each rank (default), or all its threads")
stacks_parser.add_argument("--full", action="store_true",
                           help="every frame, the trunk all ranks share too (folded into one line by default)")
stacks_parser.add_argument("--locals", action="store_true",
                           help="the locals of each group's program frame (the one peek reads), values folded over ranks")
stacks_parser.add_argument("--json", action="store_true", help="the merged stacks as JSON")

INTERRUPT_USAGE = "interrupt <actor> ranks(<ranks>) [--timeout S]"
interrupt_parser = Parser(INTERRUPT_USAGE)
interrupt_parser.add_argument("actor", help=ACTOR_HELP)
interrupt_parser.add_argument("selector", nargs="+", metavar="ranks(<ranks>)", help=SELECTOR_HELP)
interrupt_parser.add_argument("--timeout", type=timeout, default=INTERRUPT_TIMEOUT, metavar="S",
                              help=f"seconds to wait for them to stop (default {INTERRUPT_TIMEOUT:g})")

mesh_parser = Parser("mesh [actor]")
mesh_parser.add_argument("actor", nargs="?", help=ACTOR_HELP + " (default: every actor)")


def in_call_line(actor: str, in_call: list[int], place: str) -> str:
    """What to do about ranks that an interrupt cannot stop before their call returns."""
    one = len(in_call) == 1
    return (f"{actor} ranks[{format_ranks(in_call)}] {'is' if one else 'are'} in a C call ({place}); "
            f"{'it stops' if one else 'they stop'} when it returns; `peek` reads {'it' if one else 'them'} now")


def one_line_errors(command: Callable[..., bool | None]) -> Callable[..., bool | None]:
    """Every failure of a command as one line: a refusal, the broker's silence, Ctrl-C, and, as
    this goes above `cmd2.with_argparser`, a mistake in the arguments."""

    @functools.wraps(command)
    def run(shell: DebugShell, *args, **kwargs) -> bool | None:
        try:
            return command(shell, *args, **kwargs)
        except (CommandError, RequestFailed, Timeout) as error:
            shell.fail(str(error))
        except KeyboardInterrupt:
            shell.fail("stopped waiting (Ctrl-C)")
        return None

    return run


@functools.cache
def pdb_commands() -> list[str]:
    import pdb

    return sorted({name[3:] for name in dir(pdb.Pdb) if name.startswith("do_")} | {"detach"})


def pdb_completions(text: str) -> list[str]:
    """pdb's commands that start with `text`."""
    return [name for name in pdb_commands() if name.startswith(text)]


@dataclass
class PdbHistory:
    """The lines typed at the pdb prompt, kept apart from the commands (whose history cmd2
    keeps) and saved beside them. readline holds one history at a time; `swap` trades them."""

    path: str
    lines: list[str]
    in_readline: bool = False

    @classmethod
    def load(cls, commands_file: str) -> PdbHistory:
        path = commands_file + PDB_HISTORY_SUFFIX if commands_file else ""
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, ValueError):
            lines = []
        return cls(path, lines[-PDB_HISTORY_LENGTH:])

    def swap(self) -> None:
        held = readline_history()
        readline.clear_history()
        for line in self.lines:
            readline.add_history(line)
        self.lines, self.in_readline = held, not self.in_readline

    def save(self) -> None:
        if not self.path:
            return
        lines = readline_history() if self.in_readline else self.lines
        try:
            with open(self.path, "w", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in lines[-PDB_HISTORY_LENGTH:] if "\n" not in line)
        except OSError:
            pass


def readline_history() -> list[str]:
    return [readline.get_history_item(i) for i in range(1, readline.get_current_history_length() + 1)]


RL_STATE_CALLBACK, RL_STATE_ENDED, RL_STATE_ACTING = 0x0080000, 0x2000000 | 0x8000000, 0x0000020 | 0x0004000 | 0x1000000
"""GNU readline's state bits (readline.h): a line begun through the callback interface, as
CPython's input() begins one; that line accepted or ended; a key being acted on (dispatching,
completing) or the screen being drawn."""
ALERT_SIGNAL = signal.SIGUSR1
"""How the connection's thread asks the shell's own to print lines above the prompt: readline's
wait for a key ends on a signal, and its handler runs on readline's thread, between two keys."""
RETRY_ALERT_AFTER = 0.05
"""Seconds until lines still waiting at a free prompt are signalled again: a signal that lands
while readline acts on a key, or just before it waits, is handled only once Python runs again
on its thread."""


def readline_state() -> int:
    return ctypes.c_ulong.in_dll(rl_utils.readline_lib, "rl_readline_state").value


def hung_up(fd: int) -> bool:
    """Whether the terminal on `fd` has gone (its window closed), rather than sent Ctrl-D."""
    poller = select.poll()
    poller.register(fd, 0)
    return any(events & select.POLLHUP for _, events in poller.poll(0))


def typed_lines(text: str) -> list[str]:
    """The lines of what the terminal handed over: Enter ends one as CR, or as NL where the
    terminal turns one into the other (CR NL, a pasted Windows line, ends one line)."""
    return re.split(r"\r\n|\r|\n", text.removesuffix("\n").removesuffix("\r"))


@dataclass
class TypedAhead:
    """Lines typed at the terminal while the shell waits for a broker: they run once it answers,
    but quit and Ctrl-D leave at once."""

    lines: list[str] = field(default_factory=list)
    partial: bytes = b""
    leaving: str | None = None
    """The line that leaves: `quit` as typed, or EOF for Ctrl-D."""

    def take(self, chunk: bytes) -> bool:
        """What the terminal gave (b"": end of input); False once it says to leave."""
        if not chunk:
            self.leaving = EOF
            return False
        *done, self.partial = (self.partial + chunk).split(b"\n")
        for line in (raw.decode(errors="replace") for raw in done):
            if line.strip() in QUIT_COMMANDS:
                self.leaving = line
                return False
            if line.strip():
                self.lines.append(line)
        return True


class DebugShell(cmd2.Cmd):
    def __init__(self, conn: ShellConnection, history_file: str = "", as_json: bool = False,
                 transcript: Transcript | None = None, **kwargs) -> None:
        self.colour_errors = sys.stderr.isatty()
        self.captured: list[str] | None = None
        """While not None, what the shell prints is kept here, to go above the prompt."""
        self.report = Reporter(self.write_out, self.write_err, as_json, transcript)
        """Before cmd2's own start, which reports a history file it cannot read through `perror`."""
        super().__init__(
            allow_cli_args=False,
            allow_redirection=False,
            terminators=[],
            persistent_history_file=history_file,
            shortcuts={"?": "help", "@": "run_script", "@@": "_relative_run_script"},
            **kwargs,
        )
        self.conn = conn
        self.prompt = TOP_PROMPT
        self.intro = BANNER
        self.readline_terminal = rl_type == RlType.GNU and sys.stdin.isatty()
        self.alerts_above_prompt = self.readline_terminal and self.stdout.isatty()
        """Whether lines that come at the prompt can go above it; else they follow the next command."""
        self.pdb_history = PdbHistory.load(history_file)
        atexit.register(self.pdb_history.save)
        self._attached: Attachment | None = None
        self.last_line: str | None = None
        self.actors: set[str] = set()
        self.aliases.update(ALIASES)
        self.hidden_commands.extend(HIDDEN)
        self.terminal_input = self.stdin.isatty()
        self.interactive = False
        self.alerts: list[str] = []
        self.alerts_lock = threading.Lock()
        self.alerts_retry: threading.Timer | None = None
        self.collected: list[str] = []
        self.typed_ahead: list[str] = []
        """Lines typed before the prompt could read them (while waiting for a broker, or while an
        attached rank runs), read in turn as if typed at it."""
        self.typed_for: Left | None = None
        """The session the shell left other than by a `detach` line, while lines typed for it
        may wait: they are not sent, up to a `detach`."""
        self.said: tuple[wire.EventKind, str, str, int] | None = None
        """The end of the rank we held that we said already (taken over, lost): its event is left out."""
        self.session_news = False
        """The held session ended while the prompt waited: the prompt's thread acts on it."""
        self.cast_output = "grouped"
        self.cast_timeout = 10.0
        self.add_settable(cmd2.Settable("cast_output", str, "how cast shows answers: grouped or raw", self,
                                        choices=CAST_OUTPUTS))
        self.add_settable(cmd2.Settable("cast_timeout", seconds, "seconds a cast waits for every rank to answer", self))
        self.list_rows = conn.settings.list_rows
        self.pager = Pager(conn.settings.pager, self.stdout)
        self.add_settable(cmd2.Settable("pager", checked, "command that shows results taller than the terminal "
                                        "('' or cat: none)", self.pager, settable_attrib_name="command"))
        self.add_settable(cmd2.Settable("list_rows", natural, "list shows a row per rank up to this many ranks, "
                                        "past it a row per group of ranks", self))
        self.color = "on" if conn.settings.colour else "off"
        self.add_settable(cmd2.Settable("color", str, "on: an attached rank's pdb colours what it shows, at a "
                                        "terminal (Python 3.14+ ranks)", self, choices=COLOURS))
        self.word_delims = PDB_DELIMS
        """readline's word delimiters of the other prompt: pdb's at ours, ours at pdb's."""
        conn.on_events = self.show_events
        conn.on_reply = self.reply_came

    def preloop(self) -> None:
        """Learn the actor names for completion before the first prompt. A paste arrives as one
        line, each of its lines then run in turn, so none is taken for keys typed while a rank
        runs (CPython turns readline's bracketed paste off)."""
        if self.terminal_input and self.stdout.isatty() and not self.report.as_json:
            self.report.page = self.pager.page
        if self.readline_terminal:
            readline.parse_and_bind("set enable-bracketed-paste on")
            signal.signal(signal.SIGTSTP, self.suspend)
        if self.alerts_above_prompt:
            readline.set_pre_input_hook(self.print_alerts)
            signal.signal(ALERT_SIGNAL, lambda signum, frame: self.print_alerts())
        self.interactive = True
        try:
            reply = self.conn.request(wire.ListSessions(), wire.SessionList)
        except Timeout:
            return
        self.actors.update(r.actor for r in getattr(reply, "rows", []))

    @property
    def attached(self) -> Attachment | None:
        return self._attached

    @attached.setter
    def attached(self, att: Attachment | None) -> None:
        """Attaching and detaching swap readline's history, so each prompt recalls its own lines,
        and the word delimiters of Tab, so each completes its own words."""
        if (att is None) != (self._attached is None) and self.readline_terminal:
            self.pdb_history.swap()
            held = readline.get_completer_delims()
            readline.set_completer_delims(self.word_delims)
            self.word_delims = held
        self._attached = att

    @property
    def pdb_colours(self) -> bool:
        """Whether an attached rank's pdb colours what it shows: `set color`, at a terminal."""
        return self.color == "on" and self.stdout.isatty() and not self.report.as_json

    # --- printing ----------------------------------------------------------------------

    def terminal_size(self) -> os.terminal_size:
        """The size of the terminal the results go to; without one, what COLUMNS and LINES
        say, else 80 by 24."""
        try:
            return os.get_terminal_size(self.stdout.fileno())
        except (OSError, ValueError):
            return shutil.get_terminal_size()

    def write_out(self, text: str) -> None:
        if self.captured is not None:
            self.captured.append(text)
            return
        try:
            self.stdout.write(text)
            self.stdout.flush()
        except BrokenPipeError:
            raise OutputClosed from None

    def write_err(self, text: str) -> None:
        self.write_stderr(f"{ERROR_COLOUR}{text.rstrip(chr(10))}{PLAIN}\n" if self.colour_errors else text)

    def note(self, text: str) -> None:
        """A line for the person at the terminal, not part of any result."""
        self.write_stderr(text + "\n")

    def write_stderr(self, text: str) -> None:
        if self.captured is not None:
            self.captured.append(text)
            return
        sys.stderr.write(text)
        sys.stderr.flush()

    def fail(self, text: str) -> None:
        self.report.error(text)

    def perror(self, *objects, sep: str = " ", end: str = "\n", **kwargs) -> None:
        """cmd2's own errors (a bad `set`, `help nosuch`) are reported as ours are, and fail a script."""
        self.report.error(sep.join(map(str, objects)), prefix="")

    def default(self, statement: cmd2.Statement) -> None:
        self.fail(f"unknown command {statement.command!r}; enter 'help' for the list")

    def show_events(self, events: list[wire.Event]) -> None:
        """Runs on the connection's thread: fold the events into lines above the prompt."""
        self.actors.update(e.actor for e in events if e.kind in STOPS)
        att = self.attached
        lines = describe_events(events, None if att is None else (att.job, att.actor, att.rank), self.said)
        if self.said is not None and any(e.kind == self.said[0] for e in events):
            self.said = None  # the event of the end we said came, and was left out
        if lines:
            self.report.background("event", lines)
            self.alert(lines)

    def show_output(self, actor: str, rank: int, text: str) -> None:
        """Runs on the connection's thread: a followed rank's output, each line marked."""
        lines = [f"[{actor} {rank}] {line}" for line in visible(text).rstrip("\n").split("\n")]
        self.report.background("output", lines)
        self.alert(lines)

    def alert(self, lines: list[str]) -> None:
        """Runs on the connection's thread. At a prompt the lines go above it at once, printed
        by the shell's thread; while a command runs (cmd2's terminal lock is held) they wait
        for the command's end. (cmd2's async_alert prints from this thread, which can meet
        readline as it accepts a line and draw a prompt that is not there.)"""
        if not self.interactive:
            return
        with self.alerts_lock:
            self.alerts += lines
        if self.alerts_above_prompt and self.terminal_lock.acquire(blocking=False):
            self.terminal_lock.release()
            signal.pthread_kill(threading.main_thread().ident, ALERT_SIGNAL)
            with self.alerts_lock:
                if self.alerts_retry is None:
                    self.alerts_retry = threading.Timer(RETRY_ALERT_AFTER, self.retry_alerts)
                    self.alerts_retry.daemon = True
                    self.alerts_retry.start()
        else:
            self.conn.wake()

    def retry_alerts(self) -> None:
        with self.alerts_lock:
            self.alerts_retry = None
        if self.alerts or self.session_news:
            self.alert([])

    def print_alerts(self) -> None:
        """On the shell's thread (readline's pre-input hook, or the alert signal's handler):
        the lines that wait go above the prompt while readline waits for a key. Before it has
        drawn the prompt they wait for its hook, once it has accepted the line for the command's
        end, and while it acts on a key, the next try. The signal waits meanwhile, so that its
        handler cannot print inside the hook's printing."""
        if not (self.alerts or self.session_news):
            return
        signal.pthread_sigmask(signal.SIG_BLOCK, {ALERT_SIGNAL})
        try:
            if not self.reading_line():
                self.conn.wake()
            elif not readline_state() & RL_STATE_ACTING:
                shown = rl_get_display_prompt()
                text = self.settle_at_prompt() + self.take_alerts()
                new_prompt = self.need_prompt_refresh()
                if new_prompt:
                    rl_set_prompt(self.prompt)
                if text:
                    self.write_out(async_alert_str(terminal_columns=self.terminal_size().columns, prompt=shown,
                                                   line=readline.get_line_buffer(), cursor_offset=rl_get_point(),
                                                   alert_msg=text.rstrip("\n") + "\n"))
                elif new_prompt:
                    self.write_out("\r\x1b[K")  # readline redraws from the line's start, not after the old prompt
                else:
                    return  # a session end already settled printed nothing: the screen is as it was
                rl_force_redisplay()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {ALERT_SIGNAL})

    def suspend(self, signum: int, frame: object) -> None:
        """Ctrl-Z: stop, as any program does. At a prompt, the terminal is first set back as it
        was before readline took it (the shell that resumes us does not set it again), and on
        `fg` set for readline again, the prompt and the line being typed drawn anew. (readline's
        own handler is in place only while it acts on a key, not while it waits for one.)"""
        at_prompt = self.reading_line() and not readline_state() & RL_STATE_ACTING
        if at_prompt:
            rl_utils.readline_lib.rl_deprep_terminal()
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        try:
            os.kill(os.getpid(), signal.SIGTSTP)
        finally:
            signal.signal(signal.SIGTSTP, self.suspend)
        if at_prompt:
            rl_utils.readline_lib.rl_prep_terminal(1)
            self.write_out("\r\x1b[K")  # where a process group no one can resume was never stopped
            rl_force_redisplay()

    def reading_line(self) -> bool:
        """Whether readline waits for the keys of a line it has begun (its prompt is on screen)."""
        if not self.readline_terminal:
            return False
        state = readline_state()
        return bool(state & RL_STATE_CALLBACK) and not state & RL_STATE_ENDED

    def reply_came(self, msg: wire.Message) -> None:
        """Runs on the connection's thread: the held session's end reaches an idle `(Pdb)`
        prompt at once (the shell says why above it and returns to `monarch_dbg>`), not when
        the next line is typed. A broker that forgot the session (it restarted) waits for that
        line, which is then sent again."""
        att = self.attached
        if (att is not None and isinstance(msg, wire.SessionEnded) and msg.session == att.session
                and msg.reason != wire.Ending.UNKNOWN):
            self.session_news = True
            self.alert([])

    def settle_at_prompt(self) -> str:
        """On the prompt's thread, while it waits: act on the held session's end, if it came,
        and give back what that printed."""
        if not self.session_news:
            return ""
        self.session_news = False
        self.captured = []
        try:
            self.settle_aside()
            return "".join(self.captured)
        finally:
            self.captured = None

    def take_alerts(self) -> str:
        with self.alerts_lock:
            lines, self.alerts = self.alerts, []
        return "\n".join(lines)

    def show_alerts(self) -> None:
        """On the shell's thread, between two lines: what arrived while a command ran."""
        text = self.take_alerts()
        if text:
            self.write_out(text + "\n")

    def complete(self, text: str, state: int, custom_settings=None) -> str | None:
        """At the pdb prompt, Tab offers what the rank's pdb offers there (commands, the names and
        attributes of its frame, files and functions after `b`); at ours, cmd2 completes ours."""
        if self.attached is None:
            return super().complete(text, state, custom_settings)
        if state == 0:
            self.pdb_matches = self.rank_completions(self.attached, readline.get_line_buffer(),
                                                     readline.get_begidx(), readline.get_endidx())
        return self.pdb_matches[state] if state < len(self.pdb_matches) else None

    def rank_completions(self, att: Attachment, line: str, begidx: int, endidx: int) -> list[str]:
        """The attached rank's words for `line[begidx:endidx]`; where it cannot say (it runs, or
        the broker does not answer), pdb's commands for the first word."""
        if self.conn.link.ready.is_set():
            answer = self.conn.complete(att.session, line, begidx, endidx, COMPLETION_TIMEOUT)
            if answer is not None and not answer.error:
                return answer.matches
        return pdb_completions(line[begidx:endidx]) if not line[:begidx].strip() else []

    # --- the command loop --------------------------------------------------------------

    def read_input(self, prompt: str, **kwargs) -> str:
        """A line typed ahead, shown after its prompt, or one read now. Ctrl-C at a prompt drops
        the line being typed and draws a fresh prompt below it, as pdb does. (cmd2 would write
        `^C` over the prompt, readline having gone back to its start, and hand on an empty line,
        which pdb takes for its last command again.) A terminal that closes ends the shell
        as its SIGHUP does, whichever of the two the kernel delivers first: the end of input is
        not Ctrl-D, and there is no terminal left to say goodbye on."""
        if self.typed_ahead:
            line = self.typed_ahead.pop(0)
            prompt = self.typed_for.prompt if self.typed_for is not None else prompt
            self.write_out(f"{prompt}{'' if line == EOF else line}\n")
            if self.readline_terminal and line.strip() and line != EOF:
                readline.add_history(line)
            return line
        self.typed_for = None
        while True:
            try:
                return super().read_input(prompt, **kwargs)
            except KeyboardInterrupt:
                self.typed_for = None
                with self.terminal_lock:
                    self.write_out("\n")
            except EOFError:
                if self.terminal_input and hung_up(self.stdin.fileno()):
                    sys.exit(128 + signal.SIGHUP)
                raise

    def onecmd_plus_hooks(self, line: str, **kwargs) -> bool:
        """One line typed, pasted or read from a script; a paste of several lines runs each, up to
        its last line that is not blank."""
        lines = line.split("\n")
        while len(lines) > 1 and not lines[-1].strip():
            lines.pop()
        stop = False
        for number, text in enumerate(lines):
            stop = self.one_line(text, **(kwargs if number == 0 else {}))
            self.show_alerts()
            if stop:
                break
        return stop

    def one_line(self, line: str, **kwargs) -> bool:
        self.report.start("" if line == EOF else line)
        was_attached = self.attached is not None
        self.settle_aside()
        if not (self.interactive or was_attached):
            self.typed_for = None  # a script's lines after its session's end are commands again
        if self.typed_for is not None:
            if line.strip() == "detach" or line == EOF:
                self.typed_for = None
            elif line.strip():
                self.fail(f"not sent: {line.strip()!r} was typed for {self.typed_for.session}")
            return False
        if self.attached is not None:
            self.attached_line(line)
        elif len(line) > MAX_COMMAND_LINE:
            self.fail(f"a command of {len(line):,} characters is over the limit of {MAX_COMMAND_LINE:,}; "
                      "nothing was run (lines typed while attached have no such limit)")
        else:
            if self.alerts_above_prompt:  # what happened before the command was typed goes before its answer
                self.conn.hand_over_events()
                self.show_alerts()
            return super().onecmd_plus_hooks(line, **kwargs)
        return False

    def settle_aside(self) -> None:
        """Act on what the broker said while no command was asking (a held rank ended, say)."""
        while (msg := self.conn.next_reply(0)) is not None:
            self.session_message(msg)

    def attached_line(self, line: str) -> None:
        assert self.attached is not None
        if line.strip() == "detach" or line == EOF:
            self.detach()
            return
        if line.lstrip().startswith("#"):
            return
        att = self.attached
        self.last_line, self.collected = line, []
        self.conn.post(wire.Send(session=att.session, line=line, colour=self.pdb_colours))
        att.paused = False
        self.follow_session()
        self.last_line = None
        self.report.result("", {"session": att.describe(), "output": "".join(self.collected)})

    def follow_session(self) -> None:
        """Print what the held rank prints until it asks for input, ends, or the user detaches.
        Past a second, say why nothing comes (the rank runs, or the broker does not answer),
        and again whenever that changes."""
        started = time.monotonic()
        said = ""
        try:
            while self.attached is not None and not self.attached.paused:
                got = self.next_input_or_message(timeout=RUNNING_HINT_AFTER)
                self.show_alerts()
                if isinstance(got, str):
                    self.typed_while_running(got)
                elif got is not None:
                    self.session_message(got)
                if self.attached is None or self.attached.paused:
                    break
                waited = time.monotonic() - started
                if not self.terminal_input and waited >= self.cast_timeout:
                    self.fail(f"{self.attached.label} did not come back to its prompt within {self.cast_timeout:g} s "
                              "(cast_timeout); the script leaves it as it is")
                    self.detach()
                elif self.terminal_input and waited >= RUNNING_HINT_AFTER and said != self.waiting_for():
                    said = self.waiting_for()
                    self.note(f"({said})")
        except KeyboardInterrupt:
            self.leave(notify_broker=True, gone="which you left running (Ctrl-C)")

    def typed_while_running(self, text: str) -> None:
        """Keys typed while the held rank runs, whole lines as the terminal hands them over:
        each waits its turn at the prompt, in order, but a `detach` (or Ctrl-D) that no line
        waits before leaves at once."""
        if not text:
            if hung_up(self.stdin.fileno()):
                sys.exit(128 + signal.SIGHUP)
            lines = [EOF]
        else:
            lines = typed_lines(text)
        for line in lines:
            if self.attached is not None and not self.typed_ahead and (line.strip() == "detach" or line == EOF):
                self.detach()
            else:
                self.typed_ahead.append(line)

    def keep_typed_lines(self) -> None:
        """Take the whole lines typed that no one has read yet (the terminal holds them until
        read) into the lines that wait, so that they count as typed before now."""
        if not self.terminal_input:
            return
        fd = self.stdin.fileno()
        while readable([fd], 0) and (chunk := os.read(fd, 4096)):
            self.typed_ahead += typed_lines(chunk.decode(errors="replace"))

    def waiting_for(self) -> str:
        assert self.attached is not None
        if not self.conn.link.ready.is_set():
            return "the broker does not answer; waiting for it; type 'detach' to leave"
        if self.typed_ahead:
            count = len(self.typed_ahead)
            return (f"{self.attached.label} is running; {count} line{'s' if count != 1 else ''} typed "
                    f"wait{'' if count != 1 else 's'} for its prompt; Ctrl-C leaves it running")
        return f"{self.attached.label} is running; type 'detach' to leave it running"

    def next_input_or_message(self, timeout: float) -> wire.Message | str | None:
        """A message from the broker, or a line typed at the terminal meanwhile, or None."""
        msg = self.conn.next_reply(0)
        if msg is not None or not self.terminal_input:
            return msg if msg is not None else self.conn.next_reply(timeout)
        ready = readable([self.conn.signal_fd, self.stdin.fileno()], timeout)
        if self.stdin.fileno() in ready:
            return os.read(self.stdin.fileno(), 4096).decode(errors="replace")
        return self.conn.next_reply(0)

    def session_message(self, msg: wire.Message) -> None:
        att = self.attached
        if att is None or getattr(msg, "session", None) != att.session:
            return
        if isinstance(msg, wire.Resumed):
            att.paused = False
            self.note(f"({att.label} runs: another shell or an editor sent it a line; it stops where its pdb says next)")
        elif isinstance(msg, wire.SessionOutput):
            self.collected.append(msg.text)
            self.report.stream(visible(msg.text, self.pdb_colours))
            if msg.paused:
                att.paused, att.prompt = True, msg.prompt
                self.prompt = msg.prompt or "(Pdb) "
        elif isinstance(msg, wire.SessionEnded):
            if msg.reason == wire.Ending.UNKNOWN and self.reattach(att):
                return
            self.collected.append(msg.text)
            self.report.stream(visible(msg.text, self.pdb_colours))
            gone = "whose session ended"
            if msg.reason == wire.Ending.LOST:
                self.fail(f"{att.actor} {att.rank} was lost: its process or its connection is gone")
                gone = "which was lost"
                self.said = (wire.EventKind.LOST, att.job, att.actor, att.rank)
            elif msg.reason == wire.Ending.TAKEN:
                self.fail(f"{msg.by or 'another shell'} took over {att.actor} {att.rank} (attach --force)")
                gone = "which another shell took over"
                self.said = (wire.EventKind.TAKEN, att.job, att.actor, att.rank)
            self.leave(notify_broker=False, gone=gone)

    def reattach(self, att: Attachment) -> bool:
        """The broker no longer knows our session (it restarted): find the rank again and
        resend the line it never received. False if the rank is gone."""
        try:
            reply = self.conn.request(wire.Attach(actor=att.actor, rank=att.rank, job=att.job), wire.Attached)
        except Timeout:
            return False
        if not isinstance(reply, wire.Attached):
            return False
        att.session = reply.session
        self.note(f"(the broker restarted; attached again to {att.label})")
        if self.last_line is not None:
            self.conn.post(wire.Send(session=att.session, line=self.last_line, colour=self.pdb_colours))
        return True

    def detach(self) -> None:
        self.leave(notify_broker=True)

    def leave(self, notify_broker: bool, gone: str = "") -> None:
        """Detach; `gone` says why, when no `detach` line asked it: then the lines typed before
        now and not yet run were meant for the session, and are not sent (see `typed_for`)."""
        att = self.attached
        if att is None:
            return
        if gone:
            at_prompt = self.reading_line()
            if not at_prompt:
                self.keep_typed_lines()
            if not at_prompt or readline.get_line_buffer().strip():  # at the prompt, the line begun if any
                self.typed_for = Left(f"{att.label}, {gone}", att.prompt or "(Pdb) ")
        self.report.stream(f"Detaching from debug session for {att.label}\n")
        if notify_broker:
            try:
                self.conn.request(wire.Detach(session=att.session), wire.Detached, wire.SessionEnded)
            except Timeout:
                pass
        self.attached = None
        self.prompt = TOP_PROMPT
        self.report.stream(f"Detached from debug session for {att.label}\n")
        self.report.result("", {"detached": att.describe()})

    # --- commands ----------------------------------------------------------------------

    def ask(self, msg: wire.Message, *answers: type[Answer]) -> Answer:
        """The broker's answer to `msg`, one of `answers`; its refusal becomes the command's
        one-line error."""
        reply = self.conn.request(msg, *answers)
        if isinstance(reply, wire.Error):
            raise CommandError(reply.text)
        assert isinstance(reply, answers)
        return reply

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    @cmd2.with_argparser(list_parser)
    def do_list(self, args: argparse.Namespace) -> None:
        """Show every rank stopped at a breakpoint, or with --all every rank known, running too.
        Past list_rows ranks, a row per group of ranks stopped at the same place, as the broker
        groups them (JSON has every row)."""
        above = None if args.rows or self.report.as_json else self.list_rows
        ask = wire.ListAll(groups_above=above) if args.all else wire.ListSessions(groups_above=above)
        reply = self.ask(ask, wire.SessionList, wire.SessionGroups)
        if isinstance(reply, wire.SessionGroups):
            self.actors.update(g.actor for g in reply.groups)
            # No JSON for groups: --json asks for every row.
            self.report.result(functools.partial(groups_table, reply.groups, with_state=args.all), None)
            return
        rows = reply.rows
        self.actors.update(r.actor for r in rows)
        if not rows:
            text = "No rank is known to the broker." if args.all else "No active breakpoints."
        else:
            text = functools.partial(sessions_table, rows, with_state=args.all)
        self.report.result(text, lambda: [json_row(r) for r in rows])

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    @cmd2.with_argparser(jobs_parser)
    def do_jobs(self, args: argparse.Namespace) -> None:
        """Show the jobs whose ranks the broker knows."""
        rows = self.ask(wire.ListJobs(), wire.JobList).rows
        self.report.result(jobs_table(rows) if rows else "No job is connected.", [asdict(r) for r in rows])

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    @cmd2.with_argparser(attach_parser)
    def do_attach(self, args: argparse.Namespace) -> None:
        """Debug one rank interactively: each line goes to its pdb until you detach."""
        job, actor = split_job(args.actor)
        self.attach(job, actor, args.rank, args.force, args.full)

    def complete_actor(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self.basic_complete(text, line, begidx, endidx, sorted(self.actors))

    def complete_attach(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        """The actor (in quotes if its name has a space), then one of its paused ranks, as the
        broker knows them now."""
        words, _ = self.tokens_for_completion(line, begidx, endidx)
        if len(words) != 3:
            return self.complete_actor(text, line, begidx, endidx)
        job, actor = split_job(words[1])
        try:
            rows = self.ask(wire.ListSessions(), wire.SessionList).rows
        except (CommandError, Timeout):
            return []
        ranks = sorted({r.rank for r in rows if r.actor == actor and (not job or r.job == job)})
        return self.basic_complete(text, line, begidx, endidx, [str(rank) for rank in ranks])

    def attach(self, job: str, actor: str, rank: int, force: bool, full: bool) -> None:
        reply = self.ask(wire.Attach(actor=actor, rank=rank, job=job, force=force), wire.Attached)
        att = Attachment(reply.session, reply.job, reply.actor, reply.rank, reply.host, reply.paused, reply.prompt)
        self.attached = att
        self.said = None
        taken = f", taken over from {reply.taken_from}" if reply.taken_from else ""
        header = f"<last pdb output for {att.actor} {att.rank} follows>\n" if reply.resumed and reply.replay else ""
        on_screen = self.interactive and self.terminal_input and self.stdout.isatty() and not self.report.as_json
        replay = reply.replay if full or not on_screen else self.screenful(reply.replay, job, att)
        self.report.result(f"Attached to debug session for {att.label}{taken}\n{header}{visible(replay, self.pdb_colours)}",
                           {"attached": att.describe(), "output": reply.replay})
        if att.paused:
            self.prompt = att.prompt or "(Pdb) "
        else:
            self.follow_session()

    def screenful(self, replay: str, job: str, att: Attachment) -> str:
        """The end of what a rank printed since its last input (up to a megabyte, kept by the
        broker), as much as fits on the screen beside the prompt; a line says what was left out."""
        lines = replay.splitlines(keepends=True)
        room = max(1, self.terminal_size().lines - 4)
        if len(lines) <= room:
            return replay
        left = lines[:-room]
        name = f"{job}:{att.actor}" if job else att.actor
        name = f'"{name}"' if " " in name else name
        return (f"({len(left):,} earlier lines, {sum(map(len, left)):,} characters, not shown; "
                f"'detach', then 'attach {name} {att.rank} --full' shows them)\n" + "".join(lines[-room:]))

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    @cmd2.with_argparser(wait_parser)
    def do_wait(self, args: argparse.Namespace) -> None:
        """Block until enough ranks of an actor, or of any actor, are stopped."""
        if args.any == (args.actor is not None):
            raise CommandError(f"usage: {WAIT_USAGE}")
        name = "--any" if args.any else args.actor
        job, actor = ("", "") if args.any else split_job(args.actor)

        def stopped(rows: list[wire.SessionRow]) -> int:
            return sum(1 for r in rows if r.state != wire.RankState.RUNNING and (not actor or r.actor == actor)
                       and (not job or r.job == job))

        seen = stopped(self.conn.wait_for_rows(lambda rows: stopped(rows) >= args.count, args.timeout))
        what = f"ranks of {name}" if actor else "ranks"
        if seen < args.count:
            raise CommandError(f"waited {args.timeout:g} s: {seen} of {args.count} {what} stopped")
        self.report.result(f"{seen} {what} stopped", {"wait": name, "wanted": args.count, "stopped": seen})

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    @cmd2.with_argparser(follow_parser)
    def do_follow(self, args: argparse.Namespace) -> None:
        """Show ranks' output as they print it, whoever drives them."""
        if args.actor == "off" and not args.selector:
            self.conn.unfollow()
            self.report.result("Not following any rank.", {"following": None})
            return
        job, actor, selection, extra = words_target(args.actor, args.selector, f"usage: {FOLLOW_USAGE}")
        if extra:
            raise CommandError(f"follow takes an actor and a selector, not {extra!r}")
        following = self.conn.follow(actor, render_selector(selection or parse_selector("ranks(:)")), job, self.show_output)
        rank_list = sorted(f.rank for f in following.sessions)
        self.report.result(f"Following {actor} ranks[{format_ranks(rank_list)}] ({len(rank_list)}); 'follow off' stops.",
                           {"following": {"job": following.job, "actor": actor, "ranks": rank_list}})

    complete_follow = complete_actor

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    @cmd2.with_argparser(cast_parser)
    def do_cast(self, args: argparse.Namespace) -> None:
        """Send one pdb command to many ranks and show their answers, grouped."""
        job, actor, selection, line = parse_target(typed_arguments(args.cmd2_statement.get()), f"usage: {CAST_USAGE}")
        if selection is None:
            raise CommandError(f"usage: {CAST_USAGE}")
        if not line.strip():
            raise CommandError("cast needs a pdb command after the selector")
        if self.cast_output not in CAST_OUTPUTS:
            raise CommandError(f"cast_output must be one of {', '.join(CAST_OUTPUTS)}")
        shown = False

        def progress(msg: wire.CastProgress) -> None:
            nonlocal shown
            sys.stderr.write(f"\ranswered {msg.answered}/{msg.total}")
            sys.stderr.flush()
            shown = True

        def waiting(why: str) -> None:
            if self.terminal_input:
                self.note(f"\r({why})")

        try:
            result = self.conn.cast(actor, render_selector(selection), line, self.cast_timeout, job,
                                    progress if self.terminal_input else None, waiting)
        except KeyboardInterrupt:
            raise CommandError(f"stopped waiting (Ctrl-C); the ranks carry on with {line.strip()!r}") from None
        finally:
            if shown:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
        render = answers.raw if self.cast_output == "raw" else answers.grouped
        self.report.result(functools.partial(render, result), functools.partial(answers.document, result))
        if result.missing:
            self.report.failed(f"{len(result.missing)} of the selected ranks did not answer")

    complete_cast = complete_actor

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    @cmd2.with_argparser(continue_parser)
    def do_continue(self, args: argparse.Namespace) -> None:
        """Clear the breakpoints set with b/tbreak and continue every stopped rank."""
        released = self.ask(wire.Continue(), wire.Continued).released
        total = sum(len(r.ranks) for r in released)
        parts = ", ".join(f"{r.actor} ranks[{format_ranks(r.ranks)}]" for r in released)
        text = f"Continued {total} rank{'s' if total != 1 else ''}: {parts}" if released else "No rank is stopped."
        self.report.result(text, {"continued": [{"actor": r.actor, "ranks": r.ranks} for r in released], "count": total})

    @cmd2.with_category(CATEGORY)
    def do_detach(self, statement: cmd2.Statement) -> None:
        """Leave the attached rank where it is."""
        self.fail("not attached to any rank (attach <actor> <rank> first)")

    @cmd2.with_category(CATEGORY)
    def do_quit(self, statement: cmd2.Statement) -> bool:
        """Leave the debugger; every rank stays stopped where it is."""
        self.report.result("Quitting debug session...", {"quit": True})
        return True

    def do_eof(self, statement: cmd2.Statement) -> bool:
        self.write_out("\n")
        return self.do_quit(statement)

    # --- the whole job at once: stacks, interrupt, mesh --------------------------------

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    @cmd2.with_argparser(stacks_parser)
    def do_stacks(self, args: argparse.Namespace) -> None:
        """Merged Python stacks of running ranks, without stopping them."""
        if args.actor is not None:
            job, actor, selection, extra = words_target(args.actor, args.selector, f"usage: {STACKS_USAGE}")
            if extra:
                raise CommandError(f"stacks takes an actor and a selector, not {extra!r}")
            targets = [(job, actor)]
        else:
            selection = None
            rows = self.ask(wire.ListAll(), wire.SessionList).rows
            targets = sorted({(r.job, r.actor) for r in rows if r.state not in (wire.RankState.LOST, wire.RankState.FINISHED)})
            if not targets:
                raise CommandError("no running rank is known to the broker")
        selector = render_selector(selection or parse_selector("ranks(:)"))
        texts, docs = [], []
        for job, actor in targets:
            result = self.conn.stacks(actor, selector, args.thread, self.cast_timeout, job, args.locals)
            texts.append(stack_tree.text(result, args.thread == wire.Threads.ALL, args.full))
            docs.append(stack_tree.document(result, args.thread == wire.Threads.ALL, args.full))
            if result.missing:
                self.report.failed(f"{len(result.missing)} ranks of {actor} sent no stack")
        doc = docs[0] if len(docs) == 1 else docs
        self.report.result(json.dumps(doc, sort_keys=True) if args.json else "".join(texts), doc)

    complete_stacks = complete_actor

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    def do_peek(self, statement: cmd2.Statement) -> None:
        """peek [--frame FUNC | --up N] [--timeout S] [--json] <actor> ranks(<ranks>) <expression>

        Evaluate a Python expression in running ranks without stopping them, and show the
        answers grouped as a cast's. It is read in the frame of the program's own code where
        `stacks` shows each rank (a paused rank: where it stopped); --frame FUNC the innermost
        frame of FUNC, --up N that many frames further out. An expression only: nothing of the
        rank changes. One still running after --timeout seconds (default 5) is answered as
        such and finishes on its own; a rank whose C code holds the GIL is named."""
        args, rest = peek_arguments(typed_arguments(statement))
        job, actor, selection, expression = parse_target(rest, f"usage: {PEEK_USAGE}")
        if selection is None or not expression.strip():
            raise CommandError(f"usage: {PEEK_USAGE}")
        expression = expression_only(expression.strip())
        result = self.conn.peek(actor, render_selector(selection), expression, args.limit, args.function, args.up, job)
        self.actors.add(actor)

        def document() -> dict:
            doc = answers.document(result)
            for group in doc["groups"]:
                del group["outcome"]  # the ranks of a peek run on: no session's outcome to tell
            return doc

        render = answers.raw if self.cast_output == "raw" else answers.grouped
        text = (lambda: json.dumps(document(), sort_keys=True)) if args.as_json else functools.partial(render, result)
        self.report.result(text, document)
        if result.missing:
            self.report.failed(f"{len(result.missing)} of the selected ranks did not answer")

    complete_peek = complete_actor

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    @cmd2.with_argparser(interrupt_parser)
    def do_interrupt(self, args: argparse.Namespace) -> None:
        """Stop running ranks where they are, as sessions."""
        job, actor, selection, extra = words_target(args.actor, args.selector, f"usage: {INTERRUPT_USAGE}")
        if extra:
            raise CommandError(f"usage: {INTERRUPT_USAGE}")
        reply = self.ask(wire.Interrupt(actor=actor, selector=render_selector(selection), job=job), wire.Interrupting)
        asked = set(reply.ranks)

        def stopped(rows: list[wire.SessionRow]) -> set[int]:
            return {r.rank for r in rows if r.job == reply.job and r.actor == actor} & asked

        done = stopped(self.conn.wait_for_rows(lambda rows: stopped(rows) == asked, args.timeout)) if asked else set()
        stuck = sorted(asked - done)
        lines = [f"Interrupted {len(done)} rank{'s' if len(done) != 1 else ''}"
                 + (f": {answers.rank_set(actor, sorted(done))}" if done else "")]
        if not asked:
            lines = [f"Every selected rank of {actor} is already stopped."]
        doc: dict = {"interrupted": {"job": reply.job, "actor": actor, "ranks": sorted(done)}, "not_stopped": stuck}
        if stuck:
            lines.append(f"{answers.rank_set(actor, stuck)} did not stop within {args.timeout:g} s (blocked in a call that "
                         "did not return to its code, C code holding the GIL, or the signal blocked); where they are:")
            try:
                where = self.conn.stacks(actor, f"ranks({','.join(map(str, stuck))})", wire.Threads.MAIN, self.cast_timeout, reply.job)
                lines.append(stack_tree.text(where, False).rstrip("\n"))
                doc["stacks"] = stack_tree.document(where)
                lines += [in_call_line(actor, in_call, place) for in_call, place in stack_tree.in_calls(where)]
            except RequestFailed as failure:
                lines.append(f"(no stacks: {failure})")
            self.report.failed(f"{len(stuck)} ranks did not stop")
        self.actors.add(actor)
        self.report.result("\n".join(lines), doc)

    complete_interrupt = complete_actor

    @cmd2.with_category(CATEGORY)
    @one_line_errors
    @cmd2.with_argparser(mesh_parser)
    def do_mesh(self, args: argparse.Namespace) -> None:
        """A picture of the mesh, each rank's state in its cell."""
        job, actor = split_job(args.actor) if args.actor is not None else ("", "")
        rows = self.ask(wire.ListAll(), wire.SessionList).rows
        by_actor: dict[tuple[str, str], list[wire.SessionRow]] = {}
        for row in rows:
            if (not actor or row.actor == actor) and (not job or row.job == job):
                by_actor.setdefault((row.job, row.actor), []).append(row)
        if not by_actor:
            raise CommandError(f"No rank of actor {actor} is known to the broker" if actor else "No rank is known to the broker")
        several_jobs = len({j for j, _ in by_actor}) > 1
        colour = self.stdout.isatty() and not self.report.as_json
        names = {key: f"{key[0]}:{key[1]}" if several_jobs else key[1] for key in by_actor}
        columns = self.terminal_size().columns
        pictures = [mesh.picture(names[key], by_actor[key], colour, columns) for key in sorted(by_actor)]
        docs = [mesh.document(names[key], by_actor[key]) for key in sorted(by_actor)]
        self.report.result("\n".join(pictures), docs[0] if len(docs) == 1 else docs)
