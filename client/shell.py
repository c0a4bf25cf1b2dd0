"""The `monarch_dbg>` shell: Monarch's debugger commands as a cmd2 application.

At the top level each line is a command. While attached, every line goes verbatim to the
rank's pdb (only `detach` stays here), and the prompt is the one pdb asked with. Events from
the broker (a rank stopped, finished, was lost) are printed above the prompt as they come.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass

import cmd2
from prompt_toolkit import PromptSession

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


def pdb_line_session(commands: PromptSession) -> PromptSession:
    """The prompt for lines that go verbatim to a rank's pdb: the command prompt's terminal,
    history and style, without what only commands use (completion, highlighting, the check for
    an unfinished multi-line command), which prompt_toolkit would otherwise run at every key.
    One session serves every attached line."""
    return PromptSession(history=commands.history, input=commands.input, output=commands.output,
                         style=commands.style, color_depth=commands.color_depth, enable_suspend=True)


class DebugShell(cmd2.Cmd):
    def __init__(self, conn: ShellConnection, history_file: str = "", as_json: bool = False,
                 transcript: Transcript | None = None, **kwargs) -> None:
        super().__init__(
            allow_cli_args=False,
            allow_redirection=False,
            terminators=(),
            auto_suggest=False,
            persistent_history_file=history_file,
            shortcuts={"?": "help", "@": "run_script", "@@": "_relative_run_script"},
            **kwargs,
        )
        self.conn = conn
        self.prompt = TOP_PROMPT
        self.intro = BANNER
        self.command_session = self.main_session
        self.pdb_session = pdb_line_session(self.main_session)
        self.attached: Attachment | None = None
        self.last_line: str | None = None
        self.actors: set[str] = set()
        self.aliases.update(ALIASES)
        self.hidden_commands.extend(HIDDEN)
        self.default_error = "Error processing command: unknown command {!r}; enter 'help' for the list"
        self.terminal_input = self.stdin.isatty()
        self.report = Reporter(lambda text: self.poutput(text, end=""), lambda text: self.perror(text, end=""),
                               as_json, transcript)
        self.collected: list[str] = []
        self.cast_output = "grouped"
        self.cast_timeout = 10.0
        self.add_settable(cmd2.Settable("cast_output", str, "how cast shows answers: grouped or raw", self,
                                        choices=CAST_OUTPUTS))
        self.add_settable(cmd2.Settable("cast_timeout", float, "seconds a cast waits for every rank to answer", self))
        conn.on_events = self.show_events

    def preloop(self) -> None:
        """Learn the actor names for completion before the first prompt."""
        try:
            reply = self.conn.request(wire.ListSessions(), wire.SessionList)
        except Timeout:
            return
        self.actors.update(r["actor"] for r in getattr(reply, "rows", []))

    @property
    def attached(self) -> Attachment | None:
        return self._attached

    @attached.setter
    def attached(self, att: Attachment | None) -> None:
        """Lines typed while attached are read by the lean pdb-line session, others by cmd2's."""
        self._attached = att
        self.main_session = self.command_session if att is None else self.pdb_session

    # --- printing ----------------------------------------------------------------------

    def fail(self, text: str) -> None:
        self.report.error(text)

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
            self.add_alert(msg="\n".join(lines))

    def show_output(self, actor: str, rank: int, text: str) -> None:
        """Runs on the connection's thread: a followed rank's output, each line marked."""
        lines = [f"[{actor} {rank}] {line}" for line in text.rstrip("\n").split("\n")]
        self.report.background("output", lines)
        self.add_alert(msg="\n".join(lines))

    # --- the command loop --------------------------------------------------------------

    def onecmd_plus_hooks(self, line: str, **kwargs) -> bool:
        self.report.start(line)
        was_attached = self.attached is not None
        self.settle_aside()
        if was_attached and self.attached is None:
            if line.strip() and line != "_eof":
                self.fail(f"not sent: {line.strip()!r} was typed for a session that is gone")
            return False
        if self.attached is None:
            return super().onecmd_plus_hooks(line, **kwargs)
        self.attached_line(line)
        return False

    def settle_aside(self) -> None:
        """Act on what the broker said while no command was asking (a held rank ended, say)."""
        while (msg := self.conn.next_reply(0)) is not None:
            self.session_message(msg)

    def attached_line(self, line: str) -> None:
        assert self.attached is not None
        if line.strip() == "detach" or line == "_eof":
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
                if isinstance(got, str):
                    if got.strip() == "detach":
                        self.detach()
                    elif got.strip():
                        self.perror(f"{self.attached.label} is running; type 'detach' to leave it running")
                elif got is not None:
                    self.session_message(got)
                elif not hinted and self.terminal_input and time.monotonic() - started >= RUNNING_HINT_AFTER:
                    hinted = True
                    self.pfeedback(f"({self.attached.label} is running; type 'detach' to leave it running)")
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
        self.pfeedback(f"(the broker restarted; attached again to {att.label})")
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
        except CommandError as error:
            self.fail(str(error))
        except Timeout as error:
            self.fail(str(error))

    def ask(self, msg: wire.Message, *answers: type[wire.Message]) -> wire.Message:
        reply = self.conn.request(msg, *answers)
        if isinstance(reply, wire.Error):
            raise CommandError(reply.text)
        return reply

    @cmd2.with_category(CATEGORY)
    def do_list(self, statement: cmd2.Statement) -> None:
        """Show every rank stopped at a breakpoint: list; every rank known, running too: list --all"""
        self.run(lambda: self.list_sessions(statement.arg_list))

    def list_sessions(self, args: list[str]) -> None:
        every = args == ["--all"]
        if args and not every:
            raise CommandError("usage: list [--all]")
        reply = self.ask(wire.ListAll() if every else wire.ListSessions(), wire.SessionList)
        rows = reply.rows  # type: ignore[attr-defined]
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
        rows = self.ask(wire.ListJobs(), wire.JobList).rows  # type: ignore[attr-defined]
        self.report.result(jobs_table(rows) if rows else "No job is connected.", rows)

    @cmd2.with_category(CATEGORY)
    def do_attach(self, statement: cmd2.Statement) -> None:
        """Debug one rank interactively: attach <actor> <rank> [--force]"""
        self.run(lambda: self.attach(statement.arg_list))

    def complete_attach(self, text: str, line: str, begidx: int, endidx: int):
        return self.basic_complete(text, line, begidx, endidx, sorted(self.actors))

    def attach(self, args: list[str]) -> None:
        force = "--force" in args
        words = [a for a in args if a != "--force"]
        if len(words) != 2:
            raise CommandError("usage: attach <actor> <rank> [--force]")
        job, actor = split_job(words[0])
        rank = whole_number(words[1], "rank")
        reply = self.ask(wire.Attach(actor=actor, rank=rank, job=job, force=force), wire.Attached)
        assert isinstance(reply, wire.Attached)
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
        self.run(lambda: self.wait(statement.arg_list))

    def wait(self, args: list[str]) -> None:
        usage = CommandError("usage: wait <actor> <count> [--timeout S] | wait --any <count> [--timeout S]")
        timeout = WAIT_TIMEOUT
        if "--timeout" in args:
            at = args.index("--timeout")
            try:
                timeout = float(args[at + 1])
            except (IndexError, ValueError):
                raise usage from None
            args = args[:at] + args[at + 2:]
        if len(args) != 2:
            raise usage
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

    complete_follow = complete_attach

    @cmd2.with_category(CATEGORY)
    def do_cast(self, statement: cmd2.Statement) -> None:
        """Send one pdb command to many ranks and show their answers: cast <actor> ranks(<sel>) <pdb command>"""
        self.run(lambda: self.cast(statement.raw.strip().partition(" ")[2]))

    complete_cast = complete_attach

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
        reply = self.ask(wire.Continue(), wire.Continued)
        released = reply.released  # type: ignore[attr-defined]
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

    def do__eof(self, statement: cmd2.Statement) -> bool:
        self.poutput("")
        return self.do_quit(statement)

    # --- the whole job at once: stacks, interrupt, mesh --------------------------------

    @cmd2.with_category(CATEGORY)
    def do_stacks(self, statement: cmd2.Statement) -> None:
        """Merged Python stacks of running ranks, without stopping them: stacks [actor] [ranks(<sel>)] [--thread main|all] [--json]"""
        self.run(lambda: self.stacks(statement.raw.strip().partition(" ")[2]))

    complete_stacks = complete_attach

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
            rows = self.ask(wire.ListAll(), wire.SessionList).rows  # type: ignore[attr-defined]
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

    complete_interrupt = complete_attach

    def interrupt(self, args: str) -> None:
        usage = "usage: interrupt <actor> ranks(<ranks>) [--timeout S]"
        args, limit = option(args, "--timeout", True, usage)
        try:
            timeout = INTERRUPT_TIMEOUT if limit is None else float(limit)
        except ValueError:
            raise CommandError(f"--timeout takes seconds, not {limit!r}") from None
        job, actor, selection, extra = parse_target(args, usage)
        if selection is None or extra.strip():
            raise CommandError(usage)
        reply = self.ask(wire.Interrupt(actor=actor, selector=render_selector(selection), job=job), wire.Interrupting)
        assert isinstance(reply, wire.Interrupting)
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
            lines.append(f"{answers.rank_set(actor, stuck)} did not stop within {timeout:g} s (blocked in a call that "
                         "did not return to its code, C code holding the GIL, or the signal blocked); where they are:")
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

    complete_mesh = complete_attach

    def mesh(self, args: list[str]) -> None:
        if len(args) > 1:
            raise CommandError("usage: mesh [actor]")
        job, actor = split_job(args[0]) if args else ("", "")
        rows = self.ask(wire.ListAll(), wire.SessionList).rows  # type: ignore[attr-defined]
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
