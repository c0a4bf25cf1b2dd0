"""What `monarch-pdb mcp`'s tools do, without the protocol: each runs a command of the command
layer, the one the shell runs, and keeps both what a person reads and the `--json` document,
so that agent, shell and script cannot disagree; what the shell has no command for (a rank's
source, stepping a rank it holds as the editor holds its threads) is here, over the same
connection.

An answer is folded as the shell folds it (grouped ranks, merged stacks, numbers summarized),
then cut to fit an agent's context: its text to `TEXT_CAP` characters and its document to
`DOCUMENT_CAP` characters of JSON, each cut said in a line of `cut`.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from monarch_pdb import wire
from monarch_pdb.client.commands import FAILURES, CastArgs, ask, json_row, run, with_settings
from monarch_pdb.client.commands.arguments import split_job
from monarch_pdb.client.commands.event_lines import describe_events
from monarch_pdb.client.commands.spec import SPECS
from monarch_pdb.client.connection import RESTARTED, BrokerConnection, NoBroker, Timeout
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
class ToolResult:
    """A tool's result: the shell line that gives the same answer, the text the shell shows for
    it (folded), its `--json` document, why it did not fully work (ranks that did not answer),
    the events announced since the last result, and what was cut to fit."""

    command: str
    text: str
    document: Any
    failure: str = ""
    events: list[str] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)


def one_line(name: str, value: str) -> str:
    """An argument that a rank reads as one line (a pdb command), or that the agent meant as one."""
    if "\n" in value or "\r" in value:
        raise Refusal(f"{name} must be one line")
    return value


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


def shaped(answer: ToolResult) -> ToolResult:
    """`answer` cut to fit an agent's context."""
    text, text_cut = cut_text(answer.text)
    doc, doc_cut = fit(answer.document)
    return ToolResult(answer.command, text, doc, answer.failure, answer.events, [*text_cut, *doc_cut])


class Debugger:
    """One connection to the broker, as an agent's (`list` says `agent` of what it holds), on
    which the tools run their commands, one tool at a time; the events it hears, folded as the
    shell folds them, wait for the next result."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.conn = BrokerConnection(settings, client=wire.Client.AGENT)
        self.events: list[str] = []
        self.events_lock = threading.Lock()
        self.conn.on_events = lambda events: self.heard(describe_events(events, None, None))
        self.conn.on_restart = lambda: self.heard([RESTARTED])
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
        """WaitArgs, up to the connect time-out, for the broker; take in what it said meanwhile of
        the sessions held (ended, taken over by `attach --force`)."""
        try:
            self.conn.wait_for_broker(self.settings.connect_timeout)
        except NoBroker as error:
            raise Refusal(str(error)) from None
        self.conn.hand_over_events()
        while (msg := self.conn.next_reply(0)) is not None:
            if isinstance(msg, wire.SessionEnded):
                self.held.discard(msg.session)

    def heard(self, lines: list[str]) -> None:
        """On the connection's thread: events, kept for the next result."""
        with self.events_lock:
            self.events += lines

    def take_events(self) -> list[str]:
        with self.events_lock:
            lines, self.events = self.events, []
        if len(lines) > EVENT_LINES:
            return [f"({len(lines) - EVENT_LINES} earlier events left out)", *lines[-EVENT_LINES:]]
        return lines

    def run(self, args: Any, always: tuple[str, ...] = ()) -> ToolResult:
        """The command whose record `args` is, as the shell runs it; its line names the options
        in `always` (the tool's own arguments) even at their default."""
        with self.lock:
            self.ready()
            return self.command(args, always)

    def command(self, args: Any, always: tuple[str, ...] = ()) -> ToolResult:
        args = with_settings(args, list_rows=self.settings.list_rows)
        try:
            answer = run(self.conn, args)
        except FAILURES as error:
            raise Refusal(str(error)) from None
        return ToolResult(
            SPECS[type(args)].line(args, always), answer.shown, answer.doc, answer.failure, self.take_events()
        )

    def step(self, actor: str, rank: int, how: str) -> ToolResult:
        """pdb's `how` (next, step, return) in one paused rank, which the agent holds from then
        on as an editor holds its threads; where it stopped, as `list` has it."""
        if how not in STEPS:
            raise Refusal(f"how is one of {', '.join(STEPS)}, not {how!r}")
        job, name = split_job(actor)
        with self.lock:
            self.ready()
            try:
                attached = ask(self.conn, wire.Attach(actor=name, rank=rank, job=job), wire.Attached)
            except FAILURES as error:
                raise Refusal(str(error)) from None
            self.held.add(attached.session)
            answer = self.command(CastArgs(actor, f"ranks({rank})", how))
            at = self.stop_of(attached.job, attached.actor, rank)
        document = {**answer.document, "at": None if at is None else json_row(at)}
        return ToolResult(answer.command, answer.text, document, answer.failure, answer.events)

    def stop_of(self, job: str, actor: str, rank: int) -> wire.SessionRow | None:
        """The paused rank's row of `list`, None when it is not paused."""
        rows = ask(self.conn, wire.ListSessions(), wire.SessionList).rows
        return next((r for r in rows if (r.job, r.actor, r.rank) == (job, actor, rank)), None)

    def paused(self) -> list[wire.SessionRow]:
        with self.lock:
            self.ready()
            return ask(self.conn, wire.ListSessions(), wire.SessionList).rows

    def source(self, actor: str, rank: int, around: int = SOURCE_AROUND) -> ToolResult:
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
            events = self.take_events()
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
        return ToolResult(f"source {actor} {rank}", text, document, events=events)
