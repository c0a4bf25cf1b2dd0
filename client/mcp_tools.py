"""What `monarch-pdb mcp`'s tools do, without the protocol: each runs the shell's own command
(the line `monarch-pdb debug -c` would run) in a shell that keeps both what a person reads
and the `--json` document, so that agent, shell and script cannot disagree; what the shell has
no command for (a rank's source, stepping a rank it holds as the editor holds its threads) is
here, over the same connection.

An answer is folded as the shell folds it (grouped ranks, merged stacks, numbers summarized),
then cut to fit an agent's context: its text to `TEXT_CAP` characters and its document to
`DOCUMENT_CAP` characters of JSON, each cut said in a line of `cut`.
"""

from __future__ import annotations

import io
import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from monarch_pdb.client import arguments
from monarch_pdb.client.arguments import CommandError, ask, split_job
from monarch_pdb.client.connection import NoBroker, ShellConnection, Timeout
from monarch_pdb.client.escapes import visible
from monarch_pdb.client.reporter import Reporter, made
from monarch_pdb.client.shell import DebugShell, json_row

from monarch_pdb import wire
from monarch_pdb.settings import Settings

TEXT_CAP = 20_000
"""Characters of an answer's text at most: past it the text keeps its beginning."""
DOCUMENT_CAP = 60_000
"""Characters of an answer's document as JSON at most: past it its longest lists (and strings)
are halved, each from its end, until it fits."""
EVENT_LINES = 50
"""Lines of events since the last tool call an answer carries at most: the latest."""
CUT_LINES = 10
SOURCE_AROUND = 5
"""Lines a source shows on each side of the line a rank stopped at, by default."""
STEPS = ("next", "step", "return")


class Refusal(Exception):
    """What the server will not do (a bad argument, a control tool without --allow-control);
    the text is the one line the agent reads."""


@dataclass(frozen=True)
class Answer:
    """A tool's answer: the shell line it ran, the text the shell shows for it (folded), its
    `--json` document, why it did not fully work (ranks that did not answer), the events
    announced since the last answer, and what was cut to fit."""

    command: str
    text: str
    document: Any
    failure: str = ""
    events: list[str] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)


@dataclass
class Captured(Reporter):
    """The shell's reporter for a tool: keeps the text and the document of a command both (the
    shell prints one of them), its refusal, and the events, none of it printed."""

    text: str = ""
    doc: Any = None
    refusal: str = ""
    events: list[str] = field(default_factory=list)
    events_lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, line: str) -> None:
        super().start(line)
        self.text, self.doc, self.refusal = "", None, ""

    def result(self, text: Any, doc: Any, colours: bool = False) -> None:
        self.text += made(text)
        self.doc = made(doc)

    def stream(self, text: str, colours: bool = False) -> None:
        self.text += visible(text, colours)

    def error(self, text: str, prefix: str = "") -> None:
        self.failure = self.refusal = text

    def background(self, kind: str, lines: list[str]) -> list[str]:
        """On the connection's thread: the shell's folded events, kept for the next answer."""
        with self.events_lock:
            self.events += lines
        return lines

    def take_events(self) -> list[str]:
        with self.events_lock:
            lines, self.events = self.events, []
        if len(lines) > EVENT_LINES:
            return [f"({len(lines) - EVENT_LINES} earlier events left out)", *lines[-EVENT_LINES:]]
        return lines


def one_line(name: str, value: str) -> str:
    """An argument that goes into a shell line: one line, since the shell runs each line of
    what it is given as a command of its own."""
    if "\n" in value or "\r" in value:
        raise Refusal(f"{name} must be one line")
    return value


def actor_word(actor: str) -> str:
    """An actor's name (`job:actor`) as the shell reads it after a command's options, whatever
    the name (`arguments.actor_word`)."""
    one_line("actor", actor)
    if not actor.strip() or '"' in actor:
        raise Refusal(f"actor must be an actor's name (list shows them), not {actor!r}")
    return arguments.actor_word(actor)


def cut_text(text: str, cap: int = TEXT_CAP) -> tuple[str, list[str]]:
    """`text`'s first `cap` characters, ending at a line where that keeps half of them or more: a
    long line (one value's repr) is cut within, not dropped."""
    if len(text) <= cap:
        return text, []
    kept = text[:cap]
    end = kept.rfind("\n") + 1
    if end >= cap // 2:
        kept = kept[:end]
    return kept, [f"text: the first {len(kept):,} of {len(text):,} characters"]


def cuttable(value: Any) -> bool:
    return (isinstance(value, list) and len(value) > 1) or (isinstance(value, str) and len(value) > 100)


def largest(node: Any, keys: tuple = ()) -> tuple[int, tuple]:
    """(JSON size, keys from `node` to it) of the largest list of two items or more, or string
    over a hundred characters, in `node`; size 0 when there is none."""
    best: tuple[int, tuple] = (0, ())
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in children:
        here = (*keys, key)
        if cuttable(child) and (size := len(json.dumps(child))) > best[0]:
            best = (size, here)
        if isinstance(child, (dict, list)) and (inner := largest(child, here))[0] > best[0]:
            best = inner
    return best


def part(node: Any, keys: tuple) -> Any:
    for key in keys:
        node = node[key]
    return node


def named(keys: tuple) -> str:
    """A part's place as a line of `cut` says it: `groups[3].output`."""
    return "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in keys).removeprefix(".") or "document"


def fit(doc: Any, cap: int = DOCUMENT_CAP) -> tuple[Any, list[str]]:
    """`doc` in at most `cap` characters of JSON: its largest list or string halved from its
    end, again and again; a line for each one cut, naming how much of it is kept."""
    if len(json.dumps(doc)) <= cap:
        return doc, []
    root = [json.loads(json.dumps(doc))]
    whole: dict[tuple, int] = {}
    while (size := len(json.dumps(root[0]))) > cap:
        found, keys = largest(root)
        if not found:
            return None, [f"document: left out, {size:,} characters of JSON however cut"]
        value = part(root, keys)
        whole.setdefault(keys, len(value))
        part(root, keys[:-1])[keys[-1]] = value[: len(value) // 2]
    lines = [
        f"{named(keys[1:])}: the first {len(part(root, keys)):,} of {total:,} "
        + ("characters" if isinstance(part(root, keys), str) else "items")
        for keys, total in whole.items()
    ]
    return root[0], lines if len(lines) <= CUT_LINES else [*lines[:CUT_LINES], f"... and {len(lines) - CUT_LINES} more"]


def shaped(answer: Answer) -> Answer:
    """`answer` cut to fit an agent's context."""
    text, text_cut = cut_text(answer.text)
    doc, doc_cut = fit(answer.document)
    return Answer(answer.command, text, doc, answer.failure, answer.events, [*text_cut, *doc_cut])


class Debugger:
    """One connection to the broker, as an agent's (`list` says `agent` of what it holds), and
    the shell whose commands the tools run on it, one tool at a time."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.conn = ShellConnection(settings, client=wire.Client.AGENT)
        self.shell = DebugShell(self.conn, stdin=io.StringIO(), stdout=io.StringIO())
        self.report = Captured(self.shell.write_out, self.shell.write_err)
        self.shell.report = self.report
        self.lock = threading.Lock()
        self.refs = itertools.count(1)
        self.held: set[int] = set()
        """The sessions the agent holds (those it stepped), by the broker's number for each."""

    def close(self) -> None:
        """Let go of the sessions held, so that a shell finds them free, and leave the broker."""
        with self.lock:
            for session in self.held:
                self.conn.post(wire.Detach(session=session))
            if self.held and self.conn.link.ready.is_set():
                try:
                    self.conn.request(wire.ListJobs(), wire.JobList, timeout=2.0)  # answered once the detaches are done
                except Timeout:
                    pass
            self.conn.close()

    def ready(self) -> None:
        """Wait, up to the connect time-out, for the broker; take in what it said meanwhile of
        the sessions held (ended, taken over by `attach --force`)."""
        try:
            self.conn.wait_for_broker(self.settings.connect_timeout)
        except NoBroker as error:
            raise Refusal(str(error)) from None
        self.conn.hand_over_events()
        while (msg := self.conn.next_reply(0)) is not None:
            if isinstance(msg, wire.SessionEnded):
                self.held.discard(msg.session)

    def run(self, line: str) -> Answer:
        """The shell's command `line`, as its `-c` runs it."""
        with self.lock:
            self.ready()
            return self.command(line)

    def command(self, line: str) -> Answer:
        self.shell.onecmd_plus_hooks(line)
        report = self.report
        if report.refusal:
            raise Refusal(report.refusal)
        return Answer(line, report.text, report.doc, report.failure, report.take_events())

    def step(self, actor: str, rank: int, how: str) -> Answer:
        """pdb's `how` (next, step, return) in one paused rank, which the agent holds from then
        on as an editor holds its threads; where it stopped, as `list` has it."""
        if how not in STEPS:
            raise Refusal(f"how is one of {', '.join(STEPS)}, not {how!r}")
        job, name = split_job(actor)
        with self.lock:
            self.ready()
            try:
                attached = ask(self.conn, wire.Attach(actor=name, rank=rank, job=job), wire.Attached)
            except (CommandError, Timeout) as error:
                raise Refusal(str(error)) from None
            self.held.add(attached.session)
            answer = self.command(f"cast {actor_word(actor)} ranks({rank}) {how}")
            at = self.stop_of(attached.job, attached.actor, rank)
        document = {**answer.document, "at": None if at is None else json_row(at)}
        return Answer(answer.command, answer.text, document, answer.failure, answer.events)

    def stop_of(self, job: str, actor: str, rank: int) -> wire.SessionRow | None:
        """The paused rank's row of `list`, None when it is not paused."""
        rows = ask(self.conn, wire.ListSessions(), wire.SessionList).rows
        return next((r for r in rows if (r.job, r.actor, r.rank) == (job, actor, rank)), None)

    def paused(self) -> list[wire.SessionRow]:
        with self.lock:
            self.ready()
            return ask(self.conn, wire.ListSessions(), wire.SessionList).rows

    def source(self, actor: str, rank: int, around: int = SOURCE_AROUND) -> Answer:
        """The lines around where a paused rank stopped, as the rank itself reads its file (pdb's
        `l .`, asked of the paused thread without sending its pdb a line)."""
        job, name = split_job(actor)
        with self.lock:
            self.ready()
            rows = ask(self.conn, wire.ListSessions(), wire.SessionList).rows
            row = next((r for r in rows if r.actor == name and r.rank == rank and job in ("", r.job)), None)
            if row is None:
                raise Refusal(f"{name} {rank} is not paused (list shows the paused ranks)")
            ref = next(self.refs)
            self.conn.post(
                wire.Inspect(
                    ref=ref,
                    job=row.job,
                    actor=row.actor,
                    rank=row.rank,
                    query=wire.Query.SOURCE,
                    expression=row.filename,
                )
            )
            answer = self.conn.collect(
                lambda m: isinstance(m, wire.Inspection) and m.ref == ref, self.settings.connect_timeout
            )
            events = self.report.take_events()
        if not isinstance(answer, wire.Inspection):
            raise Refusal(f"{name} {rank} did not answer within {self.settings.connect_timeout:g} s")
        if answer.error or not answer.items:
            raise Refusal(f"{name} {rank}: {answer.error or 'no source'}")
        lines = answer.items[0].value.splitlines()
        first, last = max(1, row.lineno - around), min(len(lines), row.lineno + around)
        shown = [(n, lines[n - 1]) for n in range(first, last + 1)]
        head = f"{row.actor} {row.rank} stopped in {row.function} at {row.filename}:{row.lineno}\n"
        text = head + "".join(f"{n:4d}{' ->' if n == row.lineno else '   '}\t{code}\n" for n, code in shown)
        document = {**json_row(row), "lines": [{"line": n, "text": code} for n, code in shown]}
        return Answer(f"source {actor} {rank}", text, document, events=events)
