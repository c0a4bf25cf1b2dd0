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

import functools
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import TypeVar

import threading

import cmd2
from cmd2.rl_utils import RlType, readline, rl_type

from monarch_pdb import wire
from monarch_pdb.client import answers, mesh, stacks
from monarch_pdb.client.connection import RequestFailed, ShellConnection, Timeout, readable
from monarch_pdb.client.events import describe_events
from monarch_pdb.client.reporter import Reporter, Transcript
from monarch_pdb.client.table import jobs_table, sessions_table
from monarch_pdb.ranks import Selection, SelectorError, format_ranks, parse_selector, render_selector, split_selector

TOP_PROMPT = "monarch_dbg> "
BANNER = (
    "\n\n" + "*" * 24 + " MONARCH DEBUGGER " + "*" * 24 + "\n"
    "Enter 'help' for a list of commands.\n"
    "Enter 'list' to show all active breakpoints.\n"
)
ALIASES = {"h": "help", "l": "list", "a": "attach", "c": "continue", "q": "quit"}
HIDDEN = ["alias", "edit", "macro", "run_pyscript", "shell", "shortcuts"]
CATEGORY = "Debugger"
RUNNING_HINT_AFTER = 1.0
CAST_OUTPUTS = ("grouped", "raw")
WAIT_TIMEOUT = 60.0
INTERRUPT_TIMEOUT = 5.0
STACK_THREADS = ("main", "all")
EOF = "eof"
"""What cmd2 hands over for Ctrl-D at either prompt."""
ERROR_COLOUR, PLAIN = "\x1b[91m", "\x1b[0m"
MAX_COMMAND_LINE = 65536
"""cmd2 splits a command into words in time that grows with the square of its length: a
longer line is refused at once rather than parsed for seconds."""
PDB_HISTORY_SUFFIX = ".pdb"
PDB_HISTORY_LENGTH = 1000
Answer = TypeVar("Answer", bound=wire.Message)


class CommandError(Exception):
    """A command that cannot be carried out; its text is printed after Monarch's prefix."""


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


def json_row(row: dict) -> dict:
    """A `list` row as the README's JSON schema names its fields."""
    return {"job": row["job"], "actor": row["actor"], "rank": row["rank"], "coords": row["coords"],
            "host": row["host"], "pid": row["pid"], "function": row["function"], "file": row["filename"],
            "line": row["lineno"], "state": row["state"], "instance": row["instance"]}


def whole_number(text: str, what: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise CommandError(f"{what} must be a non-negative whole number, not {text!r}")
    return int(text)


def split_job(name: str) -> tuple[str, str]:
    """`job:actor` names an actor of one job; a bare actor name means whichever job has it."""
    job, _, actor = name.rpartition(":")
    return job, actor


def parse_target(args: str, usage: str) -> tuple[str, str, Selection | None, str]:
    """`[job:]actor [ranks(...)] [rest]` into job, actor, the selection (if given) and the rest
    of the line, kept verbatim for pdb."""
    name, _, rest = args.strip().partition(" ")
    if not name:
        raise CommandError(usage)
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


@functools.cache
def pdb_commands() -> list[str]:
    import pdb

    return sorted({name[3:] for name in dir(pdb.Pdb) if name.startswith("do_")} | {"detach"})


def pdb_completions(text: str) -> list[str]:
    """pdb's commands that start with `text`; the only one is completed with its space."""
    names = [name for name in pdb_commands() if name.startswith(text)]
    return [names[0] + " "] if len(names) == 1 else names


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


class DebugShell(cmd2.Cmd):
    def __init__(self, conn: ShellConnection, history_file: str = "", as_json: bool = False,
                 transcript: Transcript | None = None, **kwargs) -> None:
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
        self.pdb_history = PdbHistory.load(history_file)
        self._attached: Attachment | None = None
        self.last_line: str | None = None
        self.actors: set[str] = set()
        self.aliases.update(ALIASES)
        self.hidden_commands.extend(HIDDEN)
        self.terminal_input = self.stdin.isatty()
        self.interactive = False
        self.colour_errors = sys.stderr.isatty()
        self.report = Reporter(self.write_out, self.write_err, as_json, transcript)
        self.alerts: list[str] = []
        self.alerts_lock = threading.Lock()
        self.collected: list[str] = []
        self.cast_output = "grouped"
        self.cast_timeout = 10.0
        self.add_settable(cmd2.Settable("cast_output", str, "how cast shows answers: grouped or raw", self,
                                        choices=CAST_OUTPUTS))
        self.add_settable(cmd2.Settable("cast_timeout", seconds, "seconds a cast waits for every rank to answer", self))
        conn.on_events = self.show_events

    def preloop(self) -> None:
        """Learn the actor names for completion before the first prompt. A paste arrives as one
        line, each of its lines then run in turn, so none is taken for keys typed while a rank
        runs (CPython turns readline's bracketed paste off)."""
        self.interactive = True
        if self.readline_terminal:
            readline.parse_and_bind("set enable-bracketed-paste on")
        try:
            reply = self.conn.request(wire.ListSessions(), wire.SessionList)
        except Timeout:
            return
        self.actors.update(r["actor"] for r in getattr(reply, "rows", []))

    def postloop(self) -> None:
        self.pdb_history.save()

    @property
    def attached(self) -> Attachment | None:
        return self._attached

    @attached.setter
    def attached(self, att: Attachment | None) -> None:
        """Attaching and detaching swap readline's history, so each prompt recalls its own lines."""
        if (att is None) != (self._attached is None) and self.readline_terminal:
            self.pdb_history.swap()
        self._attached = att

    # --- printing ----------------------------------------------------------------------

    def write_out(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

    def write_err(self, text: str) -> None:
        sys.stderr.write(f"{ERROR_COLOUR}{text.rstrip(chr(10))}{PLAIN}\n" if self.colour_errors else text)
        sys.stderr.flush()

    def note(self, text: str) -> None:
        """A line for the person at the terminal, not part of any result."""
        sys.stderr.write(text + "\n")
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
        self.actors.update(e.actor for e in events if e.kind in ("breakpoint", "post-mortem"))
        att = self.attached
        if att is not None:
            events = [e for e in events if e.kind not in ("breakpoint", "post-mortem")
                      or (e.job, e.actor, e.rank) != (att.job, att.actor, att.rank)]
        lines = describe_events(events)
        if lines:
            self.report.background("event", lines)
            self.alert(lines)

    def show_output(self, actor: str, rank: int, text: str) -> None:
        """Runs on the connection's thread: a followed rank's output, each line marked."""
        lines = [f"[{actor} {rank}] {line}" for line in text.rstrip("\n").split("\n")]
        self.report.background("output", lines)
        self.alert(lines)

    def alert(self, lines: list[str]) -> None:
        """Runs on the connection's thread. At a prompt the lines go above it at once; while a
        command runs (cmd2's terminal lock is held) they wait for the command's end."""
        if not self.interactive:
            return
        with self.alerts_lock:
            self.alerts += lines
        if self.terminal_input and self.terminal_lock.acquire(blocking=False):
            try:
                text = self.take_alerts()
                if text:
                    self.async_alert(text)
            finally:
                self.terminal_lock.release()
        else:
            self.conn.wake()

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
        """At the pdb prompt, Tab completes pdb's commands; at ours, cmd2 completes ours."""
        if self.attached is None:
            return super().complete(text, state, custom_settings)
        if state == 0:
            line = readline.get_line_buffer()
            self.pdb_matches = pdb_completions(text) if not line[:readline.get_begidx()].strip() else []
        return self.pdb_matches[state] if state < len(self.pdb_matches) else None

    # --- the command loop --------------------------------------------------------------

    def onecmd_plus_hooks(self, line: str, **kwargs) -> bool:
        """One line typed, pasted or read from a script; a paste of several lines runs each."""
        first, newline, rest = line.partition("\n")
        stop = self.one_line(first, **kwargs)
        self.show_alerts()
        if newline and rest.strip() and not stop:
            return self.onecmd_plus_hooks(rest)
        return stop

    def one_line(self, line: str, **kwargs) -> bool:
        self.report.start("" if line == EOF else line)
        was_attached = self.attached is not None
        self.settle_aside()
        if was_attached and self.attached is None:
            if line.strip() and line != EOF:
                self.fail(f"not sent: {line.strip()!r} was typed for a session that is gone")
            return False
        if self.attached is not None:
            self.attached_line(line)
        elif len(line) > MAX_COMMAND_LINE:
            self.fail(f"a command of {len(line):,} characters is over the limit of {MAX_COMMAND_LINE:,}; "
                      "nothing was run (lines typed while attached have no such limit)")
        else:
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
        self.conn.post(wire.Send(session=att.session, line=line))
        att.paused = False
        self.follow_session()
        self.last_line = None
        self.report.result("", {"session": att.describe(), "output": "".join(self.collected)})

    def follow_session(self) -> None:
        """Print what the held rank prints until it asks for input, ends, or the user detaches."""
        started = time.monotonic()
        hinted = False
        try:
            while self.attached is not None and not self.attached.paused:
                got = self.next_input_or_message(timeout=RUNNING_HINT_AFTER)
                self.show_alerts()
                if isinstance(got, str):
                    if got.strip() == "detach":
                        self.detach()
                    elif got.strip():
                        self.note(f"{self.attached.label} is running; type 'detach' to leave it running")
                elif got is not None:
                    self.session_message(got)
                if (not hinted and self.attached is not None and not self.attached.paused and self.terminal_input
                        and time.monotonic() - started >= RUNNING_HINT_AFTER):
                    hinted = True
                    self.note(f"({self.attached.label} is running; type 'detach' to leave it running)")
        except KeyboardInterrupt:
            self.detach()

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
        if isinstance(msg, wire.SessionOutput):
            self.collected.append(msg.text)
            self.report.stream(msg.text)
            if msg.paused:
                att.paused, att.prompt = True, msg.prompt
                self.prompt = msg.prompt or "(Pdb) "
        elif isinstance(msg, wire.SessionEnded):
            if msg.reason == "unknown" and self.reattach(att):
                return
            self.collected.append(msg.text)
            self.report.stream(msg.text)
            if msg.reason == "lost":
                self.fail(f"{att.actor} {att.rank} was lost: its process stopped answering")
            elif msg.reason == "taken":
                self.fail(f"another shell took over {att.actor} {att.rank} (attach --force)")
            self.leave(notify_broker=False)

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
            self.conn.post(wire.Send(session=att.session, line=self.last_line))
        return True

    def detach(self) -> None:
        self.leave(notify_broker=True)

    def leave(self, notify_broker: bool) -> None:
        att = self.attached
        if att is None:
            return
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

    def run(self, action) -> None:
        """Carry out one command, turning every failure into one line."""
        try:
            action()
        except (CommandError, Timeout) as error:
            self.fail(str(error))
        except KeyboardInterrupt:
            self.fail("stopped waiting (Ctrl-C)")

    def ask(self, msg: wire.Message, answer: type[Answer]) -> Answer:
        """The broker's answer to `msg`; its refusal becomes the command's one-line error."""
        reply = self.conn.request(msg, answer)
        if isinstance(reply, wire.Error):
            raise CommandError(reply.text)
        assert isinstance(reply, answer)
        return reply

    @cmd2.with_category(CATEGORY)
    def do_list(self, statement: cmd2.Statement) -> None:
        """Show every rank stopped at a breakpoint: list; every rank known, running too: list --all"""
        self.run(lambda: self.list_sessions(statement.arg_list))

    def list_sessions(self, args: list[str]) -> None:
        every = args == ["--all"]
        if args and not every:
            raise CommandError("usage: list [--all]")
        rows = self.ask(wire.ListAll() if every else wire.ListSessions(), wire.SessionList).rows
        self.actors.update(r["actor"] for r in rows)
        empty = "No rank is known to the broker." if every else "No active breakpoints."
        self.report.result(sessions_table(rows, with_state=every) if rows else empty, [json_row(r) for r in rows])

    @cmd2.with_category(CATEGORY)
    def do_jobs(self, statement: cmd2.Statement) -> None:
        """Show the jobs whose ranks the broker knows: jobs"""
        self.run(lambda: self.list_jobs(statement.arg_list))

    def list_jobs(self, args: list[str]) -> None:
        if args:
            raise CommandError("jobs takes no arguments")
        rows = self.ask(wire.ListJobs(), wire.JobList).rows
        self.report.result(jobs_table(rows) if rows else "No job is connected.", rows)

    @cmd2.with_category(CATEGORY)
    def do_attach(self, statement: cmd2.Statement) -> None:
        """Debug one rank interactively: attach <actor> <rank> [--force]"""
        self.run(lambda: self.attach(statement.arg_list))

    def complete_actor(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self.basic_complete(text, line, begidx, endidx, sorted(self.actors))

    def complete_attach(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        """The actor, then one of its paused ranks, as the broker knows them now."""
        words = line[:begidx].split()
        if len(words) != 2:
            return self.complete_actor(text, line, begidx, endidx)
        job, actor = split_job(words[1])
        try:
            rows = self.ask(wire.ListSessions(), wire.SessionList).rows
        except (CommandError, Timeout):
            return []
        ranks = sorted({r["rank"] for r in rows if r["actor"] == actor and (not job or r["job"] == job)})
        return self.basic_complete(text, line, begidx, endidx, [str(rank) for rank in ranks])

    def attach(self, args: list[str]) -> None:
        force = "--force" in args
        words = [a for a in args if a != "--force"]
        if len(words) != 2:
            raise CommandError("usage: attach <actor> <rank> [--force]")
        job, actor = split_job(words[0])
        rank = whole_number(words[1], "rank")
        reply = self.ask(wire.Attach(actor=actor, rank=rank, job=job, force=force), wire.Attached)
        att = Attachment(reply.session, reply.job, reply.actor, reply.rank, reply.host, reply.paused, reply.prompt)
        self.attached = att
        header = f"<last pdb output for {att.actor} {att.rank} follows>\n" if reply.resumed and reply.replay else ""
        self.report.result(f"Attached to debug session for {att.label}\n{header}{reply.replay}",
                           {"attached": att.describe(), "output": reply.replay})
        if att.paused:
            self.prompt = att.prompt or "(Pdb) "
        else:
            self.follow_session()

    @cmd2.with_category(CATEGORY)
    def do_wait(self, statement: cmd2.Statement) -> None:
        """Block until ranks are stopped: wait <actor> <count> [--timeout S] | wait --any <count> [--timeout S]"""
        self.run(lambda: self.wait(statement.raw.strip().partition(" ")[2]))

    def wait(self, text: str) -> None:
        usage = "usage: wait <actor> <count> [--timeout S] | wait --any <count> [--timeout S]"
        text, timeout = timeout_option(text, WAIT_TIMEOUT, usage)
        args = text.split()
        if len(args) != 2:
            raise CommandError(usage)
        name, count = args[0], whole_number(args[1], "count")
        job, actor = ("", "") if name == "--any" else split_job(name)

        def stopped(rows: list[dict]) -> int:
            return sum(1 for r in rows if r["state"] != "running" and (not actor or r["actor"] == actor)
                       and (not job or r["job"] == job))

        seen = stopped(self.conn.wait_for_rows(lambda rows: stopped(rows) >= count, timeout))
        what = f"ranks of {name}" if actor else "ranks"
        if seen < count:
            raise CommandError(f"waited {timeout:g} s: {seen} of {count} {what} stopped")
        self.report.result(f"{seen} {what} stopped", {"wait": name, "wanted": count, "stopped": seen})

    @cmd2.with_category(CATEGORY)
    def do_follow(self, statement: cmd2.Statement) -> None:
        """Show ranks' output as they print it, whoever drives them: follow <actor> [ranks(<sel>)] | follow off"""
        self.run(lambda: self.follow(statement.raw.strip().partition(" ")[2].strip()))

    def follow(self, args: str) -> None:
        if args == "off":
            self.conn.unfollow()
            self.report.result("Not following any rank.", {"following": None})
            return
        job, actor, selection, extra = parse_target(args, "usage: follow <actor> [ranks(<ranks>)] | follow off")
        if extra.strip():
            raise CommandError(f"follow takes an actor and a selector, not {extra.strip()!r}")
        selection = selection or parse_selector("ranks(:)")
        try:
            following = self.conn.follow(actor, render_selector(selection), job, self.show_output)
        except RequestFailed as failure:
            raise CommandError(str(failure)) from None
        rank_list = sorted(rank for _, rank, _ in following.sessions)
        self.report.result(f"Following {actor} ranks[{format_ranks(rank_list)}] ({len(rank_list)}); 'follow off' stops.",
                           {"following": {"job": following.job, "actor": actor, "ranks": rank_list}})

    complete_follow = complete_actor

    @cmd2.with_category(CATEGORY)
    def do_cast(self, statement: cmd2.Statement) -> None:
        """Send one pdb command to many ranks and show their answers: cast <actor> ranks(<sel>) <pdb command>"""
        self.run(lambda: self.cast(statement.raw.strip().partition(" ")[2]))

    complete_cast = complete_actor

    def cast(self, args: str) -> None:
        job, actor, selection, line = parse_target(args, "usage: cast <actor> ranks(<ranks>) <pdb command>")
        if selection is None:
            raise CommandError("usage: cast <actor> ranks(<ranks>) <pdb command>")
        if not line.strip():
            raise CommandError("cast needs a pdb command after the selector")
        if self.cast_output not in CAST_OUTPUTS:
            raise CommandError(f"cast_output must be one of {', '.join(CAST_OUTPUTS)}")
        shown = False

        def progress(msg: wire.CastProgress) -> None:
            nonlocal shown
            if self.terminal_input:
                sys.stderr.write(f"\ranswered {msg.answered}/{msg.total}")
                sys.stderr.flush()
                shown = True

        try:
            result = self.conn.cast(actor, render_selector(selection), line, self.cast_timeout, job, progress)
        except RequestFailed as failure:
            raise CommandError(str(failure)) from None
        except KeyboardInterrupt:
            raise CommandError(f"stopped waiting (Ctrl-C); the ranks carry on with {line.strip()!r}") from None
        finally:
            if shown:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
        self.report.result((answers.raw if self.cast_output == "raw" else answers.grouped)(result), answers.document(result))
        if result.missing:
            self.report.failed(f"{len(result.missing)} of the selected ranks did not answer")

    @cmd2.with_category(CATEGORY)
    def do_continue(self, statement: cmd2.Statement) -> None:
        """Clear the breakpoints set with b/tbreak and continue every stopped rank: continue"""
        self.run(lambda: self.continue_all(statement.arg_list))

    def continue_all(self, args: list[str]) -> None:
        if args:
            raise CommandError("continue takes no arguments (to continue some ranks: cast <actor> ranks(...) c)")
        released = self.ask(wire.Continue(), wire.Continued).released
        total = sum(len(r) for _, r in released)
        parts = ", ".join(f"{actor} ranks[{format_ranks(r)}]" for actor, r in released)
        text = f"Continued {total} rank{'s' if total != 1 else ''}: {parts}" if released else "No rank is stopped."
        self.report.result(text, {"continued": [{"actor": a, "ranks": r} for a, r in released], "count": total})

    @cmd2.with_category(CATEGORY)
    def do_detach(self, statement: cmd2.Statement) -> None:
        """Leave the attached rank where it is: detach"""
        self.fail("not attached to any rank (attach <actor> <rank> first)")

    @cmd2.with_category(CATEGORY)
    def do_quit(self, statement: cmd2.Statement) -> bool:
        """Leave the debugger; every rank stays stopped where it is: quit"""
        self.report.result("Quitting debug session...", {"quit": True})
        return True

    def do_eof(self, statement: cmd2.Statement) -> bool:
        self.write_out("\n")
        return self.do_quit(statement)

    # --- the whole job at once: stacks, interrupt, mesh --------------------------------

    @cmd2.with_category(CATEGORY)
    def do_stacks(self, statement: cmd2.Statement) -> None:
        """Merged Python stacks of running ranks, without stopping them: stacks [actor] [ranks(<sel>)] [--thread main|all] [--json]"""
        self.run(lambda: self.stacks(statement.raw.strip().partition(" ")[2]))

    complete_stacks = complete_actor

    def stacks(self, args: str) -> None:
        usage = "usage: stacks [actor] [ranks(<ranks>)] [--thread main|all] [--json]"
        args, as_json = option(args, "--json", False, usage)
        args, threads = option(args, "--thread", True, usage)
        threads = threads or "main"
        if threads not in STACK_THREADS:
            raise CommandError(f"--thread is main or all, not {threads!r}")
        if args.strip():
            job, actor, selection, extra = parse_target(args, usage)
            if extra.strip():
                raise CommandError(f"stacks takes an actor and a selector, not {extra.strip()!r}")
            targets = [(job, actor)]
        else:
            selection = None
            rows = self.ask(wire.ListAll(), wire.SessionList).rows
            targets = sorted({(r["job"], r["actor"]) for r in rows if r["state"] not in ("lost", "finished")})
            if not targets:
                raise CommandError("no running rank is known to the broker")
        selector = render_selector(selection or parse_selector("ranks(:)"))
        texts, docs = [], []
        for job, actor in targets:
            try:
                result = self.conn.stacks(actor, selector, threads, self.cast_timeout, job)
            except RequestFailed as failure:
                raise CommandError(str(failure)) from None
            texts.append(stacks.text(result, threads == "all"))
            docs.append(stacks.document(result))
            if result.missing:
                self.report.failed(f"{len(result.missing)} ranks of {actor} sent no stack")
        doc = docs[0] if len(docs) == 1 else docs
        self.report.result(json.dumps(doc, sort_keys=True) if as_json else "".join(texts), doc)

    @cmd2.with_category(CATEGORY)
    def do_interrupt(self, statement: cmd2.Statement) -> None:
        """Stop running ranks where they are, as sessions: interrupt <actor> ranks(<sel>) [--timeout S]"""
        self.run(lambda: self.interrupt(statement.raw.strip().partition(" ")[2]))

    complete_interrupt = complete_actor

    def interrupt(self, args: str) -> None:
        usage = "usage: interrupt <actor> ranks(<ranks>) [--timeout S]"
        args, timeout = timeout_option(args, INTERRUPT_TIMEOUT, usage)
        job, actor, selection, extra = parse_target(args, usage)
        if selection is None or extra.strip():
            raise CommandError(usage)
        reply = self.ask(wire.Interrupt(actor=actor, selector=render_selector(selection), job=job), wire.Interrupting)
        asked = set(reply.ranks)

        def stopped(rows: list[dict]) -> set[int]:
            return {r["rank"] for r in rows if r["job"] == reply.job and r["actor"] == actor} & asked

        done = stopped(self.conn.wait_for_rows(lambda rows: stopped(rows) == asked, timeout)) if asked else set()
        stuck = sorted(asked - done)
        lines = [f"Interrupted {len(done)} rank{'s' if len(done) != 1 else ''}"
                 + (f": {answers.rank_set(actor, sorted(done))}" if done else "")]
        if not asked:
            lines = [f"Every selected rank of {actor} is already stopped."]
        doc: dict = {"interrupted": {"job": reply.job, "actor": actor, "ranks": sorted(done)}, "not_stopped": stuck}
        if stuck:
            lines.append(f"{answers.rank_set(actor, stuck)} did not stop within {timeout:g} s (a thread other than "
                         "its process's main one, C code holding the GIL, or the signal blocked); where they are:")
            try:
                where = self.conn.stacks(actor, f"ranks({','.join(map(str, stuck))})", "main", self.cast_timeout, reply.job)
                lines.append(stacks.text(where, False).rstrip("\n"))
                doc["stacks"] = stacks.document(where)
            except RequestFailed as failure:
                lines.append(f"(no stacks: {failure})")
            self.report.failed(f"{len(stuck)} ranks did not stop")
        self.actors.add(actor)
        self.report.result("\n".join(lines), doc)

    @cmd2.with_category(CATEGORY)
    def do_mesh(self, statement: cmd2.Statement) -> None:
        """A picture of the mesh, each rank's state in its cell: mesh [actor]"""
        self.run(lambda: self.mesh(statement.arg_list))

    complete_mesh = complete_actor

    def mesh(self, args: list[str]) -> None:
        if len(args) > 1:
            raise CommandError("usage: mesh [actor]")
        job, actor = split_job(args[0]) if args else ("", "")
        rows = self.ask(wire.ListAll(), wire.SessionList).rows
        by_actor: dict[tuple[str, str], list[dict]] = {}
        for row in rows:
            if (not actor or row["actor"] == actor) and (not job or row["job"] == job):
                by_actor.setdefault((row["job"], row["actor"]), []).append(row)
        if not by_actor:
            raise CommandError(f"No rank of actor {actor} is known to the broker" if actor else "No rank is known to the broker")
        several_jobs = len({j for j, _ in by_actor}) > 1
        colour = self.stdout.isatty() and not self.report.as_json
        names = {key: f"{key[0]}:{key[1]}" if several_jobs else key[1] for key in by_actor}
        pictures = [mesh.picture(names[key], by_actor[key], colour) for key in sorted(by_actor)]
        docs = [mesh.document(names[key], by_actor[key]) for key in sorted(by_actor)]
        self.report.result("\n".join(pictures), docs[0] if len(docs) == 1 else docs)


def option(args: str, name: str, valued: bool, usage: str) -> tuple[str, str | bool | None]:
    """Take `name` (and its value, when `valued`) out of a command's arguments."""
    pattern = re.compile(rf"(?:^|\s){re.escape(name)}(?:\s+(\S+))?(?=\s|$)" if valued else rf"(?:^|\s){re.escape(name)}(?=\s|$)")
    match = pattern.search(args)
    if match is None:
        return args, None if valued else False
    if valued and match.group(1) is None:
        raise CommandError(usage)
    return args[:match.start()] + " " + args[match.end():], match.group(1) if valued else True


def timeout_option(args: str, default: float, usage: str) -> tuple[str, float]:
    """Take `--timeout S` out of a command's arguments: the rest, and S or `default`."""
    args, limit = option(args, "--timeout", True, usage)
    if limit is None:
        return args, default
    try:
        return args, seconds(str(limit))
    except ValueError as error:
        raise CommandError(f"--timeout {error}") from None
