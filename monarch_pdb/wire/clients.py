"""What a shell or an editor and its broker say to each other: listing, attaching, casts,
continue, events, followed output, stacks, peeks, interrupts, and an editor's questions and
breakpoints."""

from __future__ import annotations

import dataclasses
from dataclasses import field

from monarch_pdb import ranks
from monarch_pdb.wire.records import CastGroup, JobRow, SessionRow, Spot, StackGroup
from monarch_pdb.wire.schema import Message, Record, message, record
from monarch_pdb.wire.words import EventKind, Query, RankState, Reading, Threads

EVENT_TOPIC = b"event"
OUTPUT_TOPIC = b"out"


@record
class SessionGroup(Record):
    """A row of `list` past a screenful: the ranks stopped at one place in one state, with
    their coordinates and hosts, made by the broker so that a shell is sent a few groups and
    not 131,072 rows."""

    job: str
    actor: str
    function: str
    lineno: int
    state: RankState
    ranks: str
    """As `ranks.format_ranks` writes them."""
    count: int
    """How many ranks `ranks` holds."""
    coords: dict[str, str]
    """Each dimension's values as a rank set, dimensions in the order first seen."""
    hosts: list[str]
    """Each host once, in the order first seen."""
    attached: str = ""
    """Who holds these ranks, as a row's `attached` says: ranks a shell or an editor holds
    are a group of their own."""


@record
class Missing(Record):
    """A rank that gave no answer, and why."""

    rank: int
    reason: str


@record
class Released(Record):
    """The ranks of one actor a top-level continue let go."""

    actor: str
    ranks: list[int]


@record
class FollowedSession(Record):
    """A followed rank's session and the number of its last output."""

    session: int
    rank: int
    seq: int


@record
class LogEntry(Record):
    """A piece of a session's kept output, numbered so a shell asks only for what it missed."""

    seq: int
    text: str


@record
class EventRow(Record):
    """An `Event` as the broker keeps it and sends it again to a shell that missed it."""

    seq: int
    kind: EventKind
    job: str
    actor: str
    ranks: str
    count: int
    where: str = ""
    detail: str = ""


@message("list")
class ListSessions(Message):
    """`list`: answered with `SessionList` rows, or with `SessionGroups` when there are more
    rows than `groups_above` (None: never)."""

    groups_above: int | None = None


@message("sessions")
class SessionList(Message):
    """Rows of paused sessions. Many rows come in several parts, each a message that fits,
    the last with `more` false."""

    rows: list[SessionRow]
    more: bool = False


@message("session_groups")
class SessionGroups(Message):
    """Rows grouped where their ranks stopped, in the order each group's first row comes;
    many groups come in parts as `SessionList` rows do."""

    groups: list[SessionGroup]
    more: bool = False


@message("jobs")
class ListJobs(Message):
    """Every job the broker knows (`list jobs`, an editor finding its job)."""


@message("job_list")
class JobList(Message):
    """The answer to `ListJobs`."""

    rows: list[JobRow]


@message("attach")
class Attach(Message):
    """`attach`: this shell takes a rank's session (`force` takes it from another)."""

    actor: str
    rank: int
    job: str = ""
    force: bool = False


@message("attached")
class Attached(Message):
    """The session a shell now holds, and what it printed since the last line sent to it."""

    session: int
    job: str
    actor: str
    rank: int
    host: str
    replay: str
    resumed: bool
    paused: bool
    prompt: str
    taken_from: str = ""
    """Whom `attach --force` took it from (`another shell (ann@gpu7 pid 812)`), if anyone."""


@message("detach")
class Detach(Message):
    """The shell leaves the session; the rank stays paused."""

    session: int


@message("detached")
class Detached(Message):
    """The answer to `Detach`: the shell no longer holds the session."""

    session: int


@message("send")
class Send(Message):
    """A line typed in an attached shell, for the session's pdb verbatim."""

    session: int
    line: str
    colour: bool = False
    """The shell shows colours: pdb may colour what this line prints (Python 3.14+ ranks)."""


@message("complete")
class Complete(Message):
    """Shell to broker, and on to the held session's process (or the broker below that has it):
    the words pdb offers for `line[begidx:endidx]` at its prompt, as Tab at stock pdb's prompt
    does. The paused thread answers with `Completions`; it is no input: the session stays where
    it is. `session` is the receiver's number for the session (the broker's, the rank process's)."""

    ref: int
    session: int
    line: str
    begidx: int
    endidx: int


@message("completions")
class Completions(Message):
    """The answer to a `Complete`: pdb's words for the text, or `error` (one line: the session
    runs, or the shell does not hold it)."""

    ref: int
    matches: list[str]
    error: str = ""


@message("session_output")
class SessionOutput(Message):
    """What the held session printed; `paused` with its prompt when it waits for input."""

    session: int
    text: str
    paused: bool
    prompt: str = ""


@message("resumed")
class Resumed(Message):
    """Broker to the client that holds a session: another client's line (a cast, the top-level
    continue) sent it running, so what the holder showed of it is past; it says where it stops
    next with `SessionOutput` (paused), or ends with `SessionEnded`."""

    session: int
    release: bool = False
    """By the top-level continue: its next stop is news, published as an event."""


@message("session_ended")
class SessionEnded(Message):
    """The held session is gone: `reason` is how it ended (see `Ended`), or `Ending.LOST`,
    `TAKEN` or `UNKNOWN`."""

    session: int
    text: str
    reason: str
    by: str = ""
    """Of `TAKEN`: who took it over (`another shell (bob@gpu7 pid 913)`)."""


@message("cast")
class Cast(Message):
    """One pdb command for the selected ranks of an actor; `ref` is echoed in the answers."""

    ref: int
    actor: str
    selector: str
    line: str
    timeout: float
    job: str = ""
    progress: bool = True
    """Whether the shell shows how far the cast got (at a terminal). Without it, no broker
    tells it, nor any broker below tells the one above: a script's cast costs none of that."""


@message("cast_started")
class CastStarted(Message):
    """The ranks a cast's line went to (those named below included), and the hosts of the
    brokers below that pick their own with the selector: a shell whose broker restarts before
    the answers come can say where the line may have run."""

    ref: int
    ranks: ranks.RankSet
    below: list[str]


@message("cast_progress")
class CastProgress(Message):
    """How many of a cast's ranks answered so far, while the shell waits."""

    ref: int
    answered: int
    total: int


@message("cast_result")
class CastResult(Message):
    """The answers of a cast, grouped, most common first, and the ranks that did not answer.
    Large answers come in several parts."""

    ref: int
    actor: str
    groups: list[CastGroup]
    missing: list[Missing]
    more: bool = False
    """True on every part but the last, when the answers are larger than one message."""


@message("continue")
class Continue(Message):
    """The top-level continue: every paused rank (of one job, of one actor and its `ranks(...)`
    selector, as far as they are given)."""

    job: str = ""
    actor: str = ""
    selector: str = ""


@message("continued")
class Continued(Message):
    """The ranks the top-level continue released, per actor."""

    released: list[Released]


@message("event")
class Event(Message):
    """Published to every shell: what happened to some ranks' sessions, or to a broker below.
    Events are numbered so a shell can tell that it missed some."""

    seq: int
    kind: EventKind
    job: str
    actor: str
    ranks: str
    """The ranks it happened to, as `ranks.format_ranks` writes them: one broker's pass folds
    every rank that one thing happened to into one event."""
    count: int
    """How many ranks: those of `ranks`, or those of the broker below that an event is about."""
    where: str = ""
    detail: str = ""

    def row(self) -> EventRow:
        return EventRow(**self.__dict__)

    @classmethod
    def from_row(cls, row: EventRow) -> Event:
        return cls(**{f.name: getattr(row, f.name) for f in dataclasses.fields(EventRow)})

    def rank_list(self) -> list[int]:
        return ranks.parse_ranks(self.ranks) if self.ranks else []


@message("printed")
class Printed(Message):
    """Published for shells that follow ranks: a chunk of a session's output, numbered per
    session so a follower can tell that it missed some and ask for them (`OutputSince`)."""

    session: int
    seq: int
    job: str
    actor: str
    rank: int
    text: str


@message("output_live")
class OutputLive(Message):
    """Published when a shell subscribes to output: from then on its subscription is live,
    so it fetches whatever was printed between its `Follow` and that moment."""


@message("follow")
class Follow(Message):
    """A shell starts following an actor's selected ranks; answered with `Following`."""

    actor: str
    selector: str
    job: str = ""


@message("following")
class Following(Message):
    """The followed ranks, and each session's last output number."""

    job: str
    actor: str
    sessions: list[FollowedSession]


@message("output_since")
class OutputSince(Message):
    """A session's output from entry `since` on, which the shell missed."""

    session: int
    since: int


@message("output_log")
class OutputLog(Message):
    """A session's kept output after a number, oldest first."""

    session: int
    rows: list[LogEntry]


@message("tick")
class Tick(Message):
    """Published every heartbeat with the last event's number, so a shell whose subscription
    started late, or that dropped events, notices the gap even when nothing else happens."""

    seq: int


@message("catch_up")
class CatchUp(Message):
    """A shell asks for the events after `since` that it did not receive."""

    since: int


@message("events")
class Events(Message):
    """Missed events, oldest first."""

    rows: list[EventRow]


# --- running ranks too: `list --all`, stacks, interrupts and peeks ------------------------


@message("list_all")
class ListAll(Message):
    """`list --all`: answered with `SessionList` rows for every rank the broker knows, or with
    `SessionGroups` as `ListSessions` says."""

    groups_above: int | None = None


@message("stacks")
class Stacks(Message):
    """Shell to broker: the Python stacks of the selected live ranks, answered with
    `StacksResult`."""

    ref: int
    actor: str
    selector: str
    timeout: float
    threads: Threads = Threads.MAIN
    job: str = ""
    locals: bool = False
    native: bool = False
    """The C/C++ frames too, read from outside each process by the broker of its host."""


@message("stacks_result")
class StacksResult(Message):
    """Broker to shell: the stacks of a `Stacks` request, merged over every process, and the
    ranks without one. Large results come in parts."""

    ref: int
    actor: str
    groups: list[StackGroup]
    missing: list[Missing]
    more: bool = False


@message("interrupt")
class Interrupt(Message):
    """Shell to broker: stop the selected running ranks where they are; answered with
    `Interrupting`, then each rank that stops is an ordinary session."""

    actor: str
    selector: str
    job: str = ""


@message("interrupting")
class Interrupting(Message):
    """The ranks asked to stop (those already stopped are left out)."""

    job: str
    actor: str
    ranks: list[int]


PEEK_MARGIN = 2.0
"""Seconds a peek's answers may take beyond its evaluation limit to reach the shell: a rank
still evaluating at the limit says so, and only a process that cannot answer at all (one that
holds the GIL) is named by the broker."""


@message("peek")
class Peek(Message):
    """Shell to broker: evaluate an expression in a frame of each selected live rank without
    stopping it, for at most `limit` seconds; answered with `PeekResult`. The frame is the
    innermost of the program's own code, or of `function`, then `up` frames further out.
    `reading` says what is read: the expression, or what the rank knows of itself."""

    ref: int
    actor: str
    selector: str
    expression: str
    limit: float
    function: str = ""
    up: int = 0
    job: str = ""
    reading: Reading = Reading.EXPRESSION


@message("peek_result")
class PeekResult(Message):
    """Broker to shell (or to the broker above): a peek's answers grouped over every process,
    most common first, and the ranks without one. Large results come in parts."""

    ref: int
    actor: str
    groups: list[CastGroup]
    missing: list[Missing]
    more: bool = False


# --- structured questions about a paused session (an editor's) ----------------------------


@record
class Item(Record):
    """A frame, scope, variable or value, as an `Inspection` answers: `handle` names its
    children (0: none) for as long as the session stays paused."""

    name: str
    value: str = ""
    type: str = ""
    handle: int = 0
    file: str = ""
    line: int = 0


@message("inspect")
class Inspect(Message):
    """Shell to broker: a question about the paused session of one rank, answered by the
    paused thread itself with `Inspection`; the broker passes it to the rank's process with
    the session's `sid` and a `ref` of its own."""

    ref: int
    job: str
    actor: str
    rank: int
    query: Query
    frame: int = 0
    """A frame's index in the stack, 0 the innermost."""
    handle: int = 0
    start: int = 0
    count: int = 0
    expression: str = ""
    sid: int = 0
    spots: list[Spot] = field(default_factory=list)
    mine: bool = False
    name: str = ""
    owner: bytes = b""
    """(Broker to rank process.) The asker's connection, which `Logged` names for the log points it sets."""


@message("inspection")
class Inspection(Message):
    """The answer to an `Inspect`: its items, how many there are in all (a page of a large
    container's children is `count` of `total`), or `error`, one line for the user."""

    ref: int
    items: list[Item]
    total: int = 0
    error: str = ""
    stop: int = 0
    """The session's number for the stop that answered: the same while the rank has not run
    (a Debug Console line that only prints keeps the editor's frames), another once it has."""


# --- an editor's breakpoints in running ranks ----------------------------------------------


@message("breakpoints")
class Breakpoints(Message):
    """Shell (an editor) to broker: in the process of each selected rank that runs, make
    `spots` the editor's breakpoints in the file `path` ("" leaves every file's as they are),
    and, in that of each selected live rank, paused or not, with `uncaught` set, stop in
    post-mortem on every uncaught exception (True) or as the job's own setting says (False).
    Answered with `BreakpointsResult`."""

    ref: int
    job: str = ""
    actor: str = ""
    """"" for every actor."""
    selector: str = ""
    path: str = ""
    spots: list[Spot] = field(default_factory=list)
    uncaught: bool | None = None
    timeout: float = 5.0
    owner: bytes = b""
    """(Broker to a broker below, which selects its own ranks and answers for them with a
    `BreakpointsResult`.) The editor as the broker above names it: its connection there, or,
    from further up, `UPSTREAM` before the name the broker above that uses, and so on; the
    broker below names it so in `BreakRanks`, and each `Logged` finds its way up by it."""


@record
class BreakGroup(Record):
    """Ranks of one actor whose processes answered a `Breakpoints` alike: a reason for each
    spot ("" when set), or, in `missing`, why they gave no answer."""

    actor: str
    ranks: list[int]
    reasons: list[str]
    missing: str = ""


@message("breakpoints_result")
class BreakpointsResult(Message):
    """Broker to shell: the answers to a `Breakpoints`, grouped."""

    ref: int
    groups: list[BreakGroup]
