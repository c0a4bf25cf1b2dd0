"""The `monarch_dbg>` shell: Monarch's debugger commands as a cmd2 application.

At the top level each line is a command. While attached, every line goes verbatim to the
rank's pdb (only `detach` stays here), and the prompt is the one pdb asked with. Events from
the broker (a rank stopped, finished, was lost) are printed above the prompt as they come
(`terminal.py` prints them). The commands themselves are the command layer's (`client/commands/`).

Lines are read by GNU readline, as pdb reads them: cmd2 3.5. The two prompts keep their own
readline history and completion, swapped when the shell attaches or detaches, so a line costs
the same at both. Results are written straight to the terminal, not through cmd2's rich
console, which costs a millisecond a call.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from typing import Any

import cmd2

from monarch_pdb import wire
from monarch_pdb.client.commands import ALIASES, COMMANDS, CommandError, Spec, ask, run, usage, with_settings
from monarch_pdb.client.commands.arguments import (
    ACTOR_HELP,
    SELECTOR_HELP,
    argument,
    natural,
    rank_number,
    seconds,
    split_job,
    words_target,
)
from monarch_pdb.client.commands.cast import CAST_OUTPUTS, CAST_TIMEOUT
from monarch_pdb.client.commands.event_lines import STOPS, describe_events
from monarch_pdb.client.connection import RESTARTED, BrokerConnection, Timeout, readable
from monarch_pdb.client.escapes import visible
from monarch_pdb.client.shell.attachment import Attachment, Left
from monarch_pdb.client.shell.cmd2_commands import command, shell_command
from monarch_pdb.client.shell.pager import Pager, checked
from monarch_pdb.client.shell.reporter import Reporter, Transcript
from monarch_pdb.client.shell.terminal import EOF, Terminal
from monarch_pdb.ranks import counted, format_ranks, parse_selector, render_selector

TOP_PROMPT = "monarch_dbg> "
BANNER = (
    "\n\n" + "*" * 24 + " MONARCH DEBUGGER " + "*" * 24 + "\n"
    "Enter 'help' for a list of commands.\n"
    "Enter 'list' to show all active breakpoints.\n"
)
QUIT_COMMANDS = frozenset({"quit"} | {alias for alias, command in ALIASES.items() if command == "quit"})
HIDDEN = ["alias", "edit", "macro", "run_pyscript", "shell", "shortcuts"]
RUNNING_HINT_AFTER = 1.0
ERROR_COLOUR, PLAIN = "\x1b[91m", "\x1b[0m"
MAX_COMMAND_LINE = 65536
"""cmd2 splits a command into words in time that grows with the square of its length: a
longer line is refused at once rather than parsed for seconds."""
PDB_DELIMS = " \t\n`@#%^&*()=+[{]}\\|;:'\",<>?"
"""What ends a word for Tab at the pdb prompt: the characters pdb gives readline (3.13's and
later), so `self.opt` and `dir/file.py` are one word and `b file.py:` starts a new one."""
COMPLETION_TIMEOUT = 2.0
"""Seconds Tab at the pdb prompt waits for the rank's words before offering pdb's commands."""
COLOURS = ("on", "off")


class OutputClosed(BaseException):
    """Whoever read the results stopped reading (`monarch-pdb debug -c list | head`): the run
    ends, quietly. Not an Exception, so that no command's error handling (cmd2 prints every
    Exception with its traceback hint) takes it for a failed command."""


@functools.cache
def pdb_commands() -> list[str]:
    import pdb

    return sorted({name[3:] for name in dir(pdb.Pdb) if name.startswith("do_")} | {"detach"})


def pdb_completions(text: str) -> list[str]:
    """pdb's commands that start with `text`."""
    return [name for name in pdb_commands() if name.startswith(text)]


class DebugShell(cmd2.Cmd):
    def __init__(
        self,
        conn: BrokerConnection,
        history_file: str = "",
        as_json: bool = False,
        transcript: Transcript | None = None,
        **kwargs,
    ) -> None:
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
        self.terminal = Terminal(
            self.stdin,
            self.stdout,
            self.write_out,
            self.terminal_lock,
            conn.wake,
            self.settle_at_prompt,
            self.prompt_to_draw,
            PDB_DELIMS,
            history_file,
        )
        self._attached: Attachment | None = None
        self.last_line: str | None = None
        self.actors: set[str] = set()
        self.aliases.update(ALIASES)
        self.hidden_commands.extend(HIDDEN)
        self.collected: list[str] = []
        self.typed_for: Left | None = None
        """The session the shell left other than by a `detach` line, while lines typed for it
        may wait: they are not sent, up to a `detach`."""
        self.said: tuple[wire.EventKind, str, str, int] | None = None
        """The end of the rank we held that we said already (taken over, lost): its event is left out."""
        self.cast_output = "grouped"
        self.cast_timeout = CAST_TIMEOUT
        self.add_settable(
            cmd2.Settable("cast_output", str, "how cast shows answers: grouped or raw", self, choices=CAST_OUTPUTS)
        )
        self.add_settable(cmd2.Settable("cast_timeout", seconds, "seconds a cast waits for every rank to answer", self))
        self.list_rows = conn.settings.list_rows
        self.results_pager = Pager(conn.settings.pager, self.stdout)
        """Ours, beside cmd2's own `pager` (a command line it runs for `ppaged`)."""
        self.add_settable(
            cmd2.Settable(
                "pager",
                checked,
                "command that shows results taller than the terminal ('' or cat: none)",
                self.results_pager,
                settable_attrib_name="command",
            )
        )
        self.add_settable(
            cmd2.Settable(
                "list_rows",
                natural,
                "list shows a row per rank up to this many ranks, past it a row per group of ranks",
                self,
            )
        )
        self.color = "on" if conn.settings.colour else "off"
        self.add_settable(
            cmd2.Settable(
                "color",
                str,
                "on: an attached rank's pdb colours what it shows, at a terminal (Python 3.14+ ranks)",
                self,
                choices=COLOURS,
            )
        )
        conn.on_events = self.show_events
        conn.on_reply = self.reply_came
        conn.on_restart = self.show_restart

    def preloop(self) -> None:
        """Learn the actor names for completion before the first prompt."""
        if self.terminal.keyboard and self.stdout.isatty() and not self.report.as_json:
            self.report.page = self.results_pager.page
        self.terminal.start()
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
        """Attaching and detaching switch the terminal between our prompt and pdb's."""
        if (att is None) != (self._attached is None):
            self.terminal.switch_prompts()
        self._attached = att

    @property
    def pdb_colours(self) -> bool:
        """Whether an attached rank's pdb colours what it shows: `set color`, at a terminal."""
        return self.color == "on" and self.stdout.isatty() and not self.report.as_json

    def prompt_to_draw(self) -> str | None:
        """The prompt, when the one on screen is no longer ours (the held session ended)."""
        return self.prompt if self.need_prompt_refresh() else None

    # --- printing ----------------------------------------------------------------------

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
        """A line for the person at the terminal, not part of any result; what a rank sent in
        it (its actor's name) is escaped, as in results."""
        self.write_stderr(visible(text) + "\n")

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
            self.terminal.alert(self.report.background("event", lines))

    def show_restart(self) -> None:
        """Runs on the connection's thread: a new broker took the old one's place, said once
        above the prompt as an event is."""
        self.terminal.alert(self.report.background("event", [RESTARTED]))

    def show_output(self, actor: str, rank: int, text: str) -> None:
        """Runs on the connection's thread: a followed rank's output, each line marked."""
        lines = [f"[{actor} {rank}] {line}" for line in text.rstrip("\n").split("\n")]
        self.terminal.alert(self.report.background("output", lines))

    def reply_came(self, msg: wire.Message) -> None:
        """Runs on the connection's thread: the held session's end reaches an idle `(Pdb)`
        prompt at once (the shell says why above it and returns to `monarch_dbg>`), not when
        the next line is typed. A broker that forgot the session (it restarted) waits for that
        line, which is then sent again."""
        att = self.attached
        if (
            att is not None
            and isinstance(msg, wire.SessionEnded)
            and msg.session == att.session
            and msg.reason != wire.Ending.UNKNOWN
        ):
            self.terminal.act_at_prompt()

    def settle_at_prompt(self) -> str:
        """On the prompt's thread, while it waits: act on the held session's end, and give back
        what that printed."""
        self.captured = []
        try:
            self.settle_aside()
            return "".join(self.captured)
        finally:
            self.captured = None

    def complete(self, text: str, state: int, custom_settings=None) -> str | None:
        """At the pdb prompt, Tab offers what the rank's pdb offers there (commands, the names and
        attributes of its frame, files and functions after `b`); at ours, cmd2 completes ours."""
        if self.attached is None:
            return super().complete(text, state, custom_settings)
        if state == 0:
            self.pdb_matches = self.rank_completions(self.attached, *self.terminal.word_to_complete())
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
        """A line typed ahead, shown after its prompt (the prompt of the session it was typed
        for, if the shell left it), or one read now."""
        if self.terminal.typed_ahead:
            return self.terminal.next_typed(self.typed_for.prompt if self.typed_for is not None else prompt)
        self.typed_for = None
        return self.terminal.read_line(functools.partial(super().read_input, prompt, **kwargs), self.forget_typed_for)

    def forget_typed_for(self) -> None:
        """Ctrl-C dropped the line typed for a session the shell left."""
        self.typed_for = None

    def onecmd_plus_hooks(self, line: str, **kwargs) -> bool:
        """One line typed, pasted or read from a script; a paste of several lines runs each, up to
        its last line that is not blank."""
        lines = line.split("\n")
        while len(lines) > 1 and not lines[-1].strip():
            lines.pop()
        stop = False
        for number, text in enumerate(lines):
            stop = self.one_line(text, **(kwargs if number == 0 else {}))
            self.terminal.show_alerts()
            if stop:
                break
        return stop

    def one_line(self, line: str, **kwargs) -> bool:
        self.report.start("" if line == EOF else line)
        was_attached = self.attached is not None
        self.settle_aside()
        if not (self.terminal.interactive or was_attached):
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
            self.fail(
                f"a command of {len(line):,} characters is over the limit of {MAX_COMMAND_LINE:,}; "
                "nothing was run (lines typed while attached have no such limit)"
            )
        else:
            self.show_news()  # what happened before the command was typed goes before its answer
            return super().onecmd_plus_hooks(line, **kwargs)
        return False

    def show_news(self) -> None:
        """Between lines, or before an answer: the events heard before now, at once rather
        than when their fold is due, and every line that waits to be shown."""
        if self.terminal.alerts_above_prompt:
            self.conn.hand_over_events()
            self.terminal.show_alerts()

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
                self.terminal.show_alerts()
                if isinstance(got, str):
                    self.typed_while_running(got)
                elif got is not None:
                    self.session_message(got)
                if self.attached is None or self.attached.paused:
                    break
                waited = time.monotonic() - started
                if not self.terminal.keyboard and waited >= self.cast_timeout:
                    self.fail(
                        f"{self.attached.label} did not come back to its prompt within {self.cast_timeout:g} s "
                        "(cast_timeout); the script leaves it as it is"
                    )
                    self.detach()
                elif self.terminal.keyboard and waited >= RUNNING_HINT_AFTER and said != self.waiting_for():
                    said = self.waiting_for()
                    self.note(f"({said})")
        except KeyboardInterrupt:
            self.leave(notify_broker=True, gone="which you left running (Ctrl-C)")

    def typed_while_running(self, text: str) -> None:
        """Keys typed while the held rank runs, whole lines as the terminal hands them over:
        each waits its turn at the prompt, in order, but a `detach` (or Ctrl-D) that no line
        waits before leaves at once."""
        for line in self.terminal.typed(text):
            if (
                self.attached is not None
                and not self.terminal.typed_ahead
                and (line.strip() == "detach" or line == EOF)
            ):
                self.detach()
            else:
                self.terminal.typed_ahead.append(line)

    def waiting_for(self) -> str:
        assert self.attached is not None
        if not self.conn.link.ready.is_set():
            return "the broker does not answer; waiting for it; type 'detach' to leave"
        if self.terminal.typed_ahead:
            count = len(self.terminal.typed_ahead)
            return (
                f"{self.attached.label} is running; {counted(count, 'line')} typed "
                f"wait{'' if count != 1 else 's'} for its prompt; Ctrl-C leaves it running"
            )
        return f"{self.attached.label} is running; type 'detach' to leave it running"

    def next_input_or_message(self, timeout: float) -> wire.Message | str | None:
        """A message from the broker, or a line typed at the terminal meanwhile, or None."""
        msg = self.conn.next_reply(0)
        if msg is not None or not self.terminal.keyboard:
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
            self.note(
                f"({att.label} runs: another shell or an editor sent it a line; it stops where its pdb says next)"
            )
        elif isinstance(msg, wire.SessionOutput):
            self.collected.append(msg.text)
            self.report.stream(msg.text, self.pdb_colours)
            if msg.paused:
                att.paused, att.prompt = True, msg.prompt
                self.prompt = msg.prompt or "(Pdb) "
        elif isinstance(msg, wire.SessionEnded):
            if msg.reason == wire.Ending.UNKNOWN and self.reattach(att):
                return
            self.collected.append(msg.text)
            self.report.stream(msg.text, self.pdb_colours)
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
            at_prompt = self.terminal.reading_line()
            if not at_prompt:
                self.terminal.keep_typed_lines()
            if not at_prompt or self.terminal.line_begun().strip():  # at the prompt, the line begun if any
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

    def answer(self, spec: Spec, args: Any) -> None:
        """Run a command of the layer with the shell's settings, and show its answer."""
        args = with_settings(
            args,
            cast_timeout=self.cast_timeout,
            output=self.cast_output,
            list_rows=None if self.report.as_json else self.list_rows,
            colour=self.stdout.isatty() and not self.report.as_json,
            columns=self.terminal.size().columns,
        )
        shown = False

        def progress(msg: wire.CastProgress) -> None:
            nonlocal shown
            sys.stderr.write(f"\ranswered {msg.answered}/{msg.total}")
            sys.stderr.flush()
            shown = True

        def waiting(why: str) -> None:
            sys.stderr.write("\r")  # over the progress line
            self.note(f"({why})")

        if self.terminal.keyboard:
            args = with_settings(args, progress=progress, waiting=waiting)
        try:
            answer = run(self.conn, args)
        finally:
            if shown:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
            if spec.news_first:
                self.show_news()
        self.actors.update(answer.actors)
        self.report.result(answer.text, answer.document, answer.colours)
        if answer.failure:
            self.report.failed(answer.failure)

    do_list = shell_command(COMMANDS["list"])
    do_jobs = shell_command(COMMANDS["jobs"])
    do_mesh = shell_command(COMMANDS["mesh"])
    do_wait = shell_command(COMMANDS["wait"])
    do_cast = shell_command(COMMANDS["cast"])
    do_continue = shell_command(COMMANDS["continue"])
    do_stacks = shell_command(COMMANDS["stacks"])
    do_peek = shell_command(COMMANDS["peek"])
    do_collectives = shell_command(COMMANDS["collectives"])
    do_hang = shell_command(COMMANDS["hang"])
    do_interrupt = shell_command(COMMANDS["interrupt"])

    @command(
        argument("actor", help=ACTOR_HELP),
        argument("rank", type=rank_number, help="one of its ranks stopped at a breakpoint"),
        argument("--force", action="store_true", help="take the rank over from another shell"),
        argument(
            "--full",
            action="store_true",
            help="all it printed since its last input (at a terminal, a screenful by default)",
        ),
    )
    def do_attach(self, args: argparse.Namespace) -> None:
        """attach <actor> <rank> [--force] [--full]

        Debug one rank interactively: each line goes to its pdb until you detach."""
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
            rows = ask(self.conn, wire.ListSessions(), wire.SessionList).rows
        except (CommandError, Timeout):
            return []
        ranks = sorted({r.rank for r in rows if r.actor == actor and (not job or r.job == job)})
        return self.basic_complete(text, line, begidx, endidx, [str(rank) for rank in ranks])

    def attach(self, job: str, actor: str, rank: int, force: bool, full: bool) -> None:
        reply = ask(self.conn, wire.Attach(actor=actor, rank=rank, job=job, force=force), wire.Attached)
        att = Attachment(reply.session, reply.job, reply.actor, reply.rank, reply.host, reply.paused, reply.prompt)
        self.attached = att
        self.said = None
        taken = f", taken over from {reply.taken_from}" if reply.taken_from else ""
        header = f"<last pdb output for {att.actor} {att.rank} follows>\n" if reply.resumed and reply.replay else ""
        on_screen = (
            self.terminal.interactive and self.terminal.keyboard and self.stdout.isatty() and not self.report.as_json
        )
        replay = reply.replay if full or not on_screen else self.screenful(reply.replay, job, att)
        self.report.result(
            f"Attached to debug session for {att.label}{taken}\n{header}{replay}",
            {"attached": att.describe(), "output": reply.replay},
            self.pdb_colours,
        )
        if att.paused:
            self.prompt = att.prompt or "(Pdb) "
        else:
            self.follow_session()

    def screenful(self, replay: str, job: str, att: Attachment) -> str:
        """The end of what a rank printed since its last input (up to a megabyte, kept by the
        broker), as much as fits on the screen beside the prompt; a line says what was left out."""
        lines = replay.splitlines(keepends=True)
        room = max(1, self.terminal.size().lines - 4)
        if len(lines) <= room:
            return replay
        left = lines[:-room]
        name = f"{job}:{att.actor}" if job else att.actor
        name = f'"{name}"' if " " in name else name
        return (
            f"({len(left):,} earlier lines, {sum(map(len, left)):,} characters, not shown; "
            f"'detach', then 'attach {name} {att.rank} --full' shows them)\n" + "".join(lines[-room:])
        )

    @command(
        argument("actor", help=ACTOR_HELP + "; off stops following"),
        argument("selector", nargs="*", metavar="ranks(<ranks>)", help=SELECTOR_HELP + " (default: all)"),
    )
    def do_follow(self, args: argparse.Namespace) -> None:
        """follow <actor> [ranks(<ranks>)] | follow off

        Show ranks' output as they print it, whoever drives them."""
        if args.actor == "off" and not args.selector:
            self.conn.unfollow()
            self.report.result("Not following any rank.", {"following": None})
            return
        job, actor, selection, extra = words_target(args.actor, args.selector, usage(self.do_follow))
        if extra:
            raise CommandError(f"follow takes an actor and a selector, not {extra!r}")
        following = self.conn.follow(
            actor, render_selector(selection or parse_selector("ranks(:)")), job, self.show_output
        )
        rank_list = sorted(f.rank for f in following.sessions)
        self.report.result(
            f"Following {actor} ranks[{format_ranks(rank_list)}] ({len(rank_list)}); 'follow off' stops.",
            {"following": {"job": following.job, "actor": actor, "ranks": rank_list}},
        )

    complete_follow = complete_actor
    complete_cast = complete_peek = complete_stacks = complete_collectives = complete_actor
    complete_hang = complete_interrupt = complete_mesh = complete_actor

    @command(refusal="detach takes no arguments")
    def do_detach(self, args: argparse.Namespace) -> None:
        """detach

        Leave the attached rank where it is."""
        self.fail("not attached to any rank (attach <actor> <rank> first)")

    @command(refusal="quit takes no arguments")
    def do_quit(self, args: argparse.Namespace) -> bool:
        """quit

        Leave the debugger; every rank stays stopped where it is."""
        self.report.result("Quitting debug session...", {"quit": True})
        return True

    def do_eof(self, statement: cmd2.Statement | str) -> bool | None:
        self.write_out("\n")
        return self.do_quit(statement)
