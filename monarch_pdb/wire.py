"""The wire protocol: every message type, and how it is signed, encoded and checked.

A message is two ZeroMQ frames after any routing identity: a 32-byte HMAC-SHA256 signature
of the body, and the body, a msgpack map holding the protocol version (`v`), the type (`t`),
the sender's random id (`s`) and counter (`n`), and the type's own fields. Nothing else in
the project builds or reads these maps.

Several messages for one peer may travel as one batch (type `batch`, `items` a list of packed
maps of type and fields), signed once: a cast to thousands of sessions behind one connection
then costs one signature and one send per connection, not per session.

Rows, groups and other values nested in a message are records (`Record`): each travels as a
msgpack array of its fields and is checked field by field, as deep as it goes. The words that
travel (states, event kinds, endings) are enums here, and each is its own text on the wire.

A message that is too large, badly signed, replayed, too old (the signed time stamp `ts` is
off by more than `max_age`), undecodable, of an unknown type or with a field of the wrong type
(anywhere inside it, or a word no enum knows) is refused with `Refused`; receivers count it and
move on.
"""

import dataclasses
import hashlib
import hmac
import os
import time
import types
import typing
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from enum import Enum
from operator import attrgetter
from typing import Any, Callable, ClassVar

import msgpack

from monarch_pdb import ranks

PROTOCOL = 1
EVENT_TOPIC = b"event"
OUTPUT_TOPIC = b"out"
SIGNATURE_SIZE = 32
MAX_BODY = 8 * 1024 * 1024
MAX_OUTPUT = 1024 * 1024
REPLAY_MEMORY = 65536
MAX_AGE = 600.0
BATCH = "batch"
BATCH_BYTES = 256 * 1024
"""Messages are batched up to this many bytes; a larger one travels alone."""
ITEM_HEADER = 5
"""The most bytes msgpack adds in front of each packed item of a batch."""
LOST_AFTER_BEATS = 3
"""A broker silent for this many heartbeats does not answer: the broker above holds its ranks
unreachable, and a shell says the broker does not answer and says hello again."""
DROPPED_AFTER_BEATS = 30
"""A connection (a rank's, a shell's, a broker's to the one above) that carries nothing, not even
libzmq's heartbeats, for this many heartbeats is dropped (its process stopped, or its host vanished)."""
AUTH_FAILED = [b"", b"monarch-pdb: authentication failed"]
"""The one unsigned answer: what a broker sends to a peer whose messages fail the signature
check, so that a shell with the wrong secret says so at once instead of waiting in silence."""


class Refused(Exception):
    """A message that must be dropped; the text says why, in a few words."""


@dataclass
class Message:
    TYPE: ClassVar[str] = ""


class Record:
    """A small value nested in a message (a row, a group, a frame): it travels as a msgpack
    array of its fields in declared order, and decoding checks each field like a message's."""

    __slots__ = ()


Check = Callable[[Any], Any]
REGISTRY: dict[str, type[Message]] = {}
_SCHEMAS: dict[type, tuple[tuple[str, Check, bool], ...]] = {}
_BUILDERS: dict[type, Check] = {}
"""For each record, the function that builds one from the array it travelled as (a list of
131,072 rows, or the root's million answers of a cast, is that many records to build)."""
_FLATTENERS: dict[type, Callable[[Any], tuple]] = {}
"""For each record, its fields in order as it travels, a rank set's as its runs: one call in C."""


def _wrong(value: Any) -> Any:
    raise Refused("wrong field type")


def _checker(annotation: Any) -> Check:
    """A function that gives back a decoded value as its declared type (a record built, an
    enum's word looked up, each item of a list checked) or refuses it. A bool is no int here."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, types.UnionType) or origin is typing.Union:
        options = [_checker(arg) for arg in typing.get_args(annotation)]

        def check_union(value: Any) -> Any:
            for option in options:
                try:
                    return option(value)
                except Refused:
                    pass
            return _wrong(value)

        return check_union
    if annotation is None or annotation is type(None):
        return lambda value: value if value is None else _wrong(value)
    if origin is list:
        (item_type,) = typing.get_args(annotation) or (Any,)
        if exact := _exact_types(item_type):
            # The ranks of a cast's answers or of a broker below: 131,072 of them are checked
            # in one pass, not a call each.
            return lambda value: (value if isinstance(value, list) and all(type(item) in exact for item in value)
                                  else _wrong(value))
        check_item = _checker(item_type)
        return lambda value: list(map(check_item, value)) if isinstance(value, list) else _wrong(value)
    if origin is dict:
        key_type, value_type = typing.get_args(annotation)
        if (keys := _exact_types(key_type)) and (values := _exact_types(value_type)):
            # A rank's coordinates, in each of 131,072 rows of a list.
            return lambda value: (value if isinstance(value, dict) and all(
                type(k) in keys and type(v) in values for k, v in value.items()) else _wrong(value))
        check_key, check_value = _checker(key_type), _checker(value_type)
        return lambda value: ({check_key(k): check_value(v) for k, v in value.items()} if isinstance(value, dict)
                              else _wrong(value))
    if annotation is Any:
        return lambda value: value
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        words = {member.value: member for member in annotation}
        return lambda value: words[value] if isinstance(value, str) and value in words else _wrong(value)
    if isinstance(annotation, type) and issubclass(annotation, Record):
        return _BUILDERS[annotation]
    if annotation is ranks.RankSet:
        return _rank_set
    exact = _exact_types(annotation)
    if exact is None:
        raise TypeError(f"no check for a field of type {annotation!r}")
    return lambda value: value if type(value) in exact else _wrong(value)


def _rank_set(value: Any) -> ranks.RankSet:
    """A rank set travels as its runs, flat (`ranks.RankSet.spans`)."""
    if type(value) is not list:
        return _wrong(value)
    try:
        return ranks.RankSet.from_wire(value)
    except ValueError:
        return _wrong(value)


def _exact_types(annotation: Any) -> tuple[type, ...] | None:
    """The types msgpack gives for a plain field of this type, matched exactly (`type() in`):
    so no bool passes for an int, and a float field takes an int."""
    if annotation is float:
        return float, int
    if annotation in (int, str, bytes, bool):
        return (annotation,)
    return None


def _schema(cls: type) -> tuple[tuple[str, Check, bool], ...]:
    hints = typing.get_type_hints(cls)
    return tuple(
        (f.name, _checker(hints[f.name]),
         f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(cls)
    )


def message(type_name: str):
    """Register a dataclass as a message type under its short wire name."""

    def register(cls):
        cls = dataclass(cls)
        cls.TYPE = type_name
        _SCHEMAS[cls] = _schema(cls)
        REGISTRY[type_name] = cls
        return cls

    return register


def record(cls):
    """Declare a record: a slotted dataclass whose fields are checked as they arrive."""
    cls = dataclass(slots=True)(cls)
    _SCHEMAS[cls] = schema = _schema(cls)
    _BUILDERS[cls] = _record_builder(cls, schema)
    hints = typing.get_type_hints(cls)
    names = [f"{name}.spans" if hints[name] is ranks.RankSet else name for name, _, _ in schema]
    get = attrgetter(*names)
    _FLATTENERS[cls] = get if len(names) > 1 else lambda value: (get(value),)
    return cls


def _record_builder(cls: type, schema: tuple[tuple[str, Check, bool], ...]) -> Check:
    """How a record is built from the array it travelled as. Where each field is of one plain
    type or a rank set (a cast's answer, a frame, a rank that did not answer), the types of
    all its fields are compared at once and only the rank sets are made by a call; otherwise
    each field is checked by its own."""
    fewest, checks = sum(required for _, _, required in schema), tuple(check for _, check, _ in schema)
    hints = typing.get_type_hints(cls)
    plain = [_exact_types(hints[name]) for name, _, _ in schema]
    made = [at for at, (name, _, _) in enumerate(schema) if hints[name] is ranks.RankSet]
    if all(exact is not None and len(exact) == 1 or at in made for at, exact in enumerate(plain)):
        wire_types = tuple(list if exact is None else exact[0] for exact in plain)
        expected = {length: wire_types[:length] for length in range(fewest, len(schema) + 1)}

        def build_plain(value: Any) -> Any:
            if type(value) is not list or tuple(map(type, value)) != expected.get(len(value)):
                return _wrong(value)
            try:
                for at in made:
                    if at < len(value):
                        value[at] = ranks.RankSet.from_wire(value[at])
            except ValueError:
                return _wrong(value)
            return cls(*value)

        return build_plain

    def build_checked(value: Any) -> Any:
        if not isinstance(value, list) or not fewest <= len(value) <= len(checks):
            return _wrong(value)
        return cls(*[check(item) for check, item in zip(checks, value)])

    return build_checked


# --- the words that travel ----------------------------------------------------------------


class Word(str, Enum):
    """A word that travels: on the wire, in JSON and in print it is its own text."""

    def __str__(self) -> str:
        return str.__str__(self)


class Role(Word):
    """Who says hello."""

    AGENT = "agent"
    SHELL = "shell"
    BROKER = "broker"
    """A broker below this one (`--upstream`): it speaks for every rank below it."""


class Client(Word):
    """Which kind of client a shell-role peer is: its hello's `name`, and who `list` says is
    attached to a session."""

    SHELL = "shell"
    EDITOR = "editor"
    """An editor's Debug Adapter Protocol server (`monarch-pdb dap`)."""


class Threads(Word):
    """Whose stacks a stack request wants: the thread running each rank, or every thread."""

    MAIN = "main"
    ALL = "all"


class Stop(Word):
    """Why a session waits for input."""

    BREAKPOINT = "breakpoint"
    POST_MORTEM = "post-mortem"
    INTERRUPTED = "interrupted"


class RankState(Word):
    """Where a rank stands in `list --all`: stopped (why, as `Stop` says), or not."""

    BREAKPOINT = "breakpoint"
    POST_MORTEM = "post-mortem"
    INTERRUPTED = "interrupted"
    RUNNING = "running"
    QUIT = "quit"
    """Runs, its last call having ended by quitting the debugger."""
    LOST = "lost"
    """Its process or its connection is gone."""
    FINISHED = "finished"
    """Its process said goodbye."""


class EventKind(Word):
    BREAKPOINT = "breakpoint"
    POST_MORTEM = "post-mortem"
    INTERRUPTED = "interrupted"
    ENDED = "ended"
    LOST = "lost"
    RELEASED = "released"
    """Free again: the shell that held it went away."""
    TAKEN = "taken"
    """Another shell took it over (attach --force)."""
    TWICE = "twice"
    """A second process runs the rank: `detail` names both."""
    BROKER_LOST = "broker-lost"
    """A broker below went away with its ranks: `where` is its host, `count` how many ranks."""
    BROKER_JOINED = "broker-joined"
    """A broker below joined (again): `where` is its host."""
    BROKER_SILENT = "broker-silent"
    """A broker below does not answer, its connection standing: its ranks are unreachable
    until it does; `where` is its host, `count` how many ranks."""
    BROKER_BACK = "broker-back"
    """A broker below that did not answer answers again: its ranks are as they were."""
    RESUMED = "resumed"
    """Released by the top-level continue: it runs until a stop that is news, or its end.
    Shells say nothing of it; an editor shows its threads running (see also `Resumed`)."""


class Ending(Word):
    """How a session ended, when one word says it; an exception says "raised KeyError"."""

    RETURNED = "returned"
    """Its endpoint call returned, or its program stopped tracing."""
    QUIT = "quit"
    CONTINUED = "continued"
    """Continued with no breakpoint left: no longer traced."""
    LOST = "lost"
    TAKEN = "taken"
    """(To the shell that held it.) Another shell took it over."""
    UNKNOWN = "unknown"
    """(To a shell.) The broker does not know the session: it restarted."""
    RECONNECTED = "reconnected"
    """Its process said hello again on a new connection before the old one was lost."""
    FINISHED = "finished"
    """(A cast's outcome.) Its endpoint returned."""


# --- records nested in messages -----------------------------------------------------------


@record
class SessionRow(Record):
    """A row of `list`: a rank, where it stands (nowhere, for a rank without a session) and
    its state."""

    job: str
    actor: str
    rank: int
    coords: dict[str, int]
    host: str
    pid: int
    function: str
    filename: str
    lineno: int
    state: RankState
    instance: str
    attached: str = ""
    """Who is attached to it, as a `Client` word; "" for nobody."""


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
class JobRow(Record):
    """A row of `jobs`."""

    job: str
    processes: int
    sessions: int
    paused: int
    hosts: list[str]


@record
class Missing(Record):
    """A rank that gave no answer, and why."""

    rank: int
    reason: str


@record
class CastGroup(Record):
    """Ranks that answered a cast (or a peek) alike: `outcome` "" when they wait at their next
    prompt, else how their sessions ended (an `Ending`, or what was raised)."""

    output: str
    outcome: str
    ranks: ranks.RankSet
    """As runs: one answer of 1,048,576 ranks is a few numbers, not a list of them."""


@record
class Frame(Record):
    file: str
    line: int
    function: str


@record
class ThreadStack(Record):
    """One thread's frames, outermost first."""

    name: str
    frames: list[Frame]

    def key(self) -> tuple:
        """What makes two threads' stacks the same: their frames, not the threads' names."""
        return tuple((f.file, f.line, f.function) for f in self.frames)


@record
class LocalValue(Record):
    """A local variable of the frame `peek` reads, one short line, and the ranks where it has
    that value."""

    name: str
    value: str
    ranks: list[int]


@record
class StackGroup(Record):
    """Ranks whose threads have the same frames (threads differing only in name are the same),
    and, when asked for (`stacks --locals`), the locals of their program's frame."""

    threads: list[ThreadStack]
    ranks: ranks.RankSet
    """As runs, as a cast's answers: the stack of 1,048,576 ranks is a few numbers."""
    locals: list[LocalValue] = field(default_factory=list)


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
    seq: int
    text: str


@record
class PresentRank(Record):
    """A rank a process runs, as the broker lists it."""

    job: str
    actor: str
    rank: int
    coords: dict[str, int]
    instance: str = ""
    state: str = ""
    """`finished` or `quit` while its last call, which ended with a session, has no successor
    yet (a `RankState` word); "" while it runs."""


THREAD = "thread"
"""How a session of a thread other than its rank's is listed: its instance says `thread NAME`."""


def thread_instance(instance: str, thread: str) -> str:
    """The instance of a session listed under its thread's id rather than a rank: `thread NAME`,
    after the engine's own id when there is one."""
    named = f"{THREAD} {thread}"
    return f"{instance}, {named}" if instance else named


def is_thread(instance: str) -> bool:
    """Whether an instance is that of a session listed under its thread (`thread_instance`)."""
    return instance.startswith(f"{THREAD} ") or f", {THREAD} " in instance


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


@record
class BranchSession(Record):
    """A session of a broker below, as it tells its parent: its own number for it, where it
    stands, and whether this is news for every shell (a first stop, post-mortem, a stop after
    a top-level continue) with the exception that says why."""

    id: int
    row: SessionRow
    prompt: str
    news: bool = False
    detail: str = ""


# --- connection management, every peer ---------------------------------------------------


@message("hello")
class Hello(Message):
    """First message of a peer: who it is. `role` is a `Role` (a broker answers any other
    with an error)."""

    role: str
    name: str
    host: str
    pid: int
    user: str = ""
    link: bytes = b""
    """The sender's random id, the same across its reconnections: a peer that says hello again
    on a new socket before its old one was declared lost is the same peer."""


@message("welcome")
class Welcome(Message):
    """The broker's answer to Hello: where its events are published, the number of the last
    event published, how often to beat, and whether it knew this connection already (a hello
    said again after a silence: it has everything told before)."""

    pub: str
    heartbeat: float
    broker_pid: int
    seq: int = 0
    known: bool = False


@message("heartbeat")
class Heartbeat(Message):
    pass


@message("unknown")
class Unknown(Message):
    """The broker does not know this peer (it restarted, or declared the peer lost)."""


@message("bye")
class Bye(Message):
    pass


@message("error")
class Error(Message):
    """A request the broker could not serve; `text` is the one line the user sees."""

    text: str


# --- agent <-> broker --------------------------------------------------------------------


@message("prompt")
class Prompt(Message):
    """A session waits for input: where it stands and what pdb printed since the last input.

    `cmd` is the input this answers (0 for a fresh stop). The identity travels every time,
    so a restarted broker learns the whole session from the next prompt.
    """

    sid: int
    cmd: int
    job: str
    actor: str
    rank: int
    coords: dict[str, int]
    host: str
    pid: int
    function: str
    filename: str
    lineno: int
    output: str
    prompt: str
    reason: Stop = Stop.BREAKPOINT
    exc: str = ""
    instance: str = ""


@message("output")
class Output(Message):
    """Text a session printed while running, flushed after a short idle time."""

    sid: int
    text: str


@message("ended")
class Ended(Message):
    """A session is over: how, as an `Ending` says, or what was raised."""

    sid: int
    cmd: int
    output: str
    reason: str = Ending.RETURNED


@message("input")
class Input(Message):
    """One line for a session's pdb; `cmd` numbers it so the answer can be matched.

    `release` is the top-level continue: forget the call's interactive breakpoints, then go on.
    """

    sid: int
    cmd: int
    line: str
    release: bool = False
    colour: bool = False
    """Run it with pdb's own colours (Python 3.14+): the shell that typed it shows them (`Send`)."""


@message("dismiss")
class Dismiss(Message):
    """The broker cannot hold this session (a limit is reached): go on without stopping."""

    sid: int
    text: str


# --- shell <-> broker --------------------------------------------------------------------


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
    pass


@message("job_list")
class JobList(Message):
    rows: list[JobRow]


@message("attach")
class Attach(Message):
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
    session: int


@message("detached")
class Detached(Message):
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
    it is. `session` is the receiver's number for the session (the broker's, the agent's)."""

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
    def from_row(cls, row: EventRow) -> "Event":
        return cls(**{name: getattr(row, name) for name, _, _ in _SCHEMAS[EventRow]})

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


# --- presence, stacks and interrupts ------------------------------------------------------


@message("present")
class Present(Message):
    """Agent to broker: the ranks this process runs, paused or not: all of them after each
    handshake, then (`added`) those a mesh runtime named since, so a thousand ranks starting
    at once cost a thousand entries, not a million."""

    ranks: list[PresentRank]
    added: bool = False


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


@message("take_stacks")
class TakeStacks(Message):
    """Broker to agent, or to a broker below: report the stacks of these ranks of one actor,
    without stopping them, or, to a broker below with a `selector`, of the live ranks it picks
    there (as `CastDown`). An agent answers `StackReport`; a broker, `StacksResult` by `timeout`."""

    ref: int
    actor: str
    ranks: ranks.RankSet
    threads: Threads
    job: str = ""
    timeout: float = 0.0
    locals: bool = False
    """Each group's locals too: read on a thread of the agent's own, as a `peek` is."""
    selector: str = ""


@message("stack_report")
class StackReport(Message):
    """Agent to broker: the stacks of the ranks asked, ranks with identical stacks sharing one
    group."""

    ref: int
    groups: list[StackGroup]


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


@message("interrupt_ranks")
class InterruptRanks(Message):
    """Broker to agent (or to a broker below, which passes it on): stop these ranks of one
    actor in the thread that runs them."""

    actor: str
    ranks: list[int]
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
    innermost of the program's own code, or of `function`, then `up` frames further out."""

    ref: int
    actor: str
    selector: str
    expression: str
    limit: float
    function: str = ""
    up: int = 0
    job: str = ""


@message("peek_ranks")
class PeekRanks(Message):
    """Broker to agent, or to a broker below: a `Peek` for these ranks of one actor. An agent
    answers `PeekReport`, within `limit`; a broker, `PeekResult` by `timeout`."""

    ref: int
    actor: str
    ranks: list[int]
    expression: str
    limit: float
    function: str = ""
    up: int = 0
    job: str = ""
    timeout: float = 0.0


@message("peek_report")
class PeekReport(Message):
    """Agent to broker: each rank's answer (what pdb's `p` would print), ranks with the same
    answer sharing one group."""

    ref: int
    groups: list[CastGroup]


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


class Query(Word):
    """What an `Inspect` asks of a paused session's frames."""

    STACK = "stack"
    """Its frames, innermost first: `name` the function, `file` and `line` where it stands,
    `handle` the frame's index (only the program's own frames, without the library's and
    installed packages', when `mine`)."""
    SCOPES = "scopes"
    """A frame's Locals and Globals, each with a `handle` to ask for its variables."""
    VARIABLES = "variables"
    """The children of a `handle`: `count` of them from `start` (0: all)."""
    EVALUATE = "evaluate"
    """An expression's value in a frame, with a handle when it has children."""
    BREAKPOINTS = "breakpoints"
    """Make `spots` the editor's breakpoints in the file `expression`: an item for each, its
    `value` empty when set, else why not."""
    EXCEPTION = "exception"
    """What a post-mortem stop caught: `name` its type, `value` its message, `type` the
    traceback as Python prints it."""
    SET = "set"
    """Give the child `name` of `handle` (as `VARIABLES` names it) the value of `expression`,
    evaluated in that scope's frame (else the current one); the child as it is now."""
    SOURCE = "source"
    """The text of the file `expression` (a frame's `file`, as `STACK` names it) as the rank
    knows it, in `value`: for code with no file on the editor's disk (a cell, generated code,
    a script shipped by value, a file only the rank's host has)."""


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


@record
class Spot(Record):
    """An editor's breakpoint on a line: it stops (or logs) when `condition` (a Python
    expression, "" for always) holds, from the `hits`-th time on (0: the first)."""

    line: int
    condition: str = ""
    hits: int = 0
    log: str = ""
    """A log point's message, `{expression}`s replaced by their values: it prints, and never
    stops ("" for a breakpoint that stops)."""


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
    """(Broker to agent.) The asker's connection, which `Logged` names for the log points it sets."""


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


@message("break_ranks")
class BreakRanks(Message):
    """Broker to agent: `Breakpoints` for the whole process (a breakpoint is in its code, which
    all its ranks share); `owner` is the editor's connection, named in each `Logged`. Answered
    with `BreakReport`."""

    ref: int
    path: str
    spots: list[Spot]
    uncaught: bool | None
    owner: bytes


@message("break_report")
class BreakReport(Message):
    """Agent to broker: for each spot, "" when it is set (in a file the process has not loaded
    yet: as it loads), else why not (no code at that line, a Python that sets it only at the
    next stop)."""

    ref: int
    reasons: list[str]


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


@message("logged")
class Logged(Message):
    """Agent to broker, broker below to broker above, and broker to the editor that set the
    log point (`owner`): what it printed in a rank."""

    owner: bytes
    job: str
    actor: str
    rank: int
    text: str


@message("editor_gone")
class EditorGone(Message):
    """Broker to agent, and to a broker below: the editor `owner` (named as in `BreakRanks`)
    disconnected or was lost; its breakpoints, in running and paused ranks, and its `uncaught`
    filter go with it."""

    owner: bytes


# --- between brokers: a broker with an upstream, and its parent ----------------------------
#
# A broker below speaks to its parent as a shell would be answered: it says hello as `broker`,
# and the parent sends it what a shell sends (Attach, Send, Detach, Continue) and what an agent
# is sent (TakeStacks, PeekRanks, InterruptRanks), plus `CastDown`; it answers as to a shell
# (Attached, SessionOutput, CastResult, StacksResult, PeekResult) and tells what lies below it
# in the messages here.


@message("branch_sessions")
class BranchSessions(Message):
    """Child to parent: sessions below that are new or changed where they stand (a session
    that only ran a moment and stopped where it was is not news, so a cast of `p` costs the
    parent nothing per rank)."""

    sessions: list[BranchSession]


@message("branch_ranks")
class BranchRanks(Message):
    """Child to parent: every rank below without a session (as `list --all` rows: running,
    quit, lost, finished) and its jobs; sent again whole when they change, in parts (`added`:
    besides the part before) when large."""

    rows: list[SessionRow]
    jobs: list[JobRow]
    added: bool = False


@message("branch_ended")
class BranchEnded(Message):
    """Child to parent: a session below is over, with what it printed last."""

    id: int
    output: str
    reason: str


@message("branch_lost")
class BranchLost(Message):
    """Child to parent: ranks below that ran without a session and are lost with their process
    (those with one end by `BranchEnded`): each broker up the tree announces them."""

    job: str
    actor: str
    ranks: list[int]


@message("branch_output")
class BranchOutput(Message):
    """Child to parent, while the parent wants output (`OutputWanted`): what a session printed."""

    id: int
    text: str


@message("output_wanted")
class OutputWanted(Message):
    """Parent to child: some shell follows ranks, so send what they print up (or stop)."""

    on: bool


@message("cast_down")
class CastDown(Message):
    """Parent to child: run one line on these ranks' sessions, or, with a `selector`, on the
    sessions it picks there (the parent does not go through the ranks of every branch to pick
    them), and answer with `CastResult` (its answers grouped) by `timeout`; one message per
    broker, however many ranks."""

    ref: int
    job: str
    actor: str
    ranks: ranks.RankSet
    line: str
    timeout: float
    selector: str = ""
    progress_every: float = 0.0
    """Tell the cast's progress up at most this often, in seconds (and only when it changed):
    a parent with many brokers below spreads their reports, as it hears them all; never when
    infinite (its shell shows none)."""


# --- encoding ------------------------------------------------------------------------------


class ReplayGuard:
    """Remembers the highest counter seen from each sender; anything not above it is a replay."""

    def __init__(self, memory: int = REPLAY_MEMORY) -> None:
        self._last: OrderedDict[bytes, int] = OrderedDict()
        self._memory = memory

    def admit(self, sender: bytes, counter: int) -> None:
        last = self._last.get(sender)
        if last is not None and counter <= last:
            raise Refused("replayed")
        self._last[sender] = counter
        self._last.move_to_end(sender)
        if len(self._last) > self._memory:
            self._last.popitem(last=False)


@dataclass
class Codec:
    """Signs and encodes outgoing messages; checks and decodes incoming ones.

    One codec belongs to one thread. `refused` counts dropped messages by reason.
    """

    key: bytes
    max_body: int = MAX_BODY
    max_age: float = MAX_AGE
    sender: bytes = field(default_factory=lambda: os.urandom(8))
    counter: int = 0
    guard: ReplayGuard = field(default_factory=ReplayGuard)
    refused: Counter = field(default_factory=Counter)

    def encode(self, msg: Message) -> list[bytes]:
        return self._sign({"t": msg.TYPE, **msg.__dict__})

    def encode_many(self, msgs: list[Message]) -> list[list[bytes]]:
        """Messages for one peer, in order, in as few signed bodies as fit a batch, which is
        never more than half the largest message a peer takes."""
        limit = min(BATCH_BYTES, self.max_body // 2)
        if len(msgs) == 1:
            return [self.encode(msgs[0])]
        bodies: list[list[bytes]] = []
        items: list[bytes] = []
        size = 0
        for msg in msgs:
            item = _pack({"t": msg.TYPE, **msg.__dict__})
            if items and size + len(item) + ITEM_HEADER > limit:
                bodies.append(self._sign({"t": BATCH, "items": items}))
                items, size = [], 0
            items.append(item)
            size += len(item) + ITEM_HEADER
        bodies.append(self._sign({"t": BATCH, "items": items}))
        return bodies

    def _sign(self, fields: dict) -> list[bytes]:
        self.counter += 1
        body = {"v": PROTOCOL, "s": self.sender, "n": self.counter, "ts": time.time()}
        body.update(fields)
        packed = _pack(body)
        return [hmac.new(self.key, packed, hashlib.sha256).digest(), packed]

    def decode(self, frames: list[bytes]) -> list[Message]:
        """The messages in the last two frames (one, or a batch), or `Refused` (counted) with
        the reason; a batch with one bad item is refused whole."""
        try:
            return self._decode(frames)
        except Refused as refusal:
            self.refused[str(refusal)] += 1
            raise

    def _decode(self, frames: list[bytes]) -> list[Message]:
        if len(frames) < 2:
            raise Refused("too few frames")
        signature, packed = frames[-2], frames[-1]
        if len(packed) > self.max_body:
            raise Refused("too large")
        expected = hmac.new(self.key, packed, hashlib.sha256).digest()
        if not hmac.compare_digest(signature, expected):
            raise Refused("bad signature")
        body = _unpack(packed)
        if body.get("v") != PROTOCOL:
            raise Refused("wrong protocol")
        sender, counter, sent = body.get("s"), body.get("n"), body.get("ts")
        if not isinstance(sender, bytes) or not isinstance(counter, int) or not isinstance(sent, float):
            raise Refused("no sender")
        if abs(time.time() - sent) > self.max_age:
            raise Refused("too old")
        if body.get("t") == BATCH:
            items = body.get("items")
            if not isinstance(items, list) or not all(isinstance(item, bytes) for item in items):
                raise Refused("wrong field type")
            msgs = [_build_typed(_unpack(item)) for item in items]
        else:
            msgs = [_build_typed(body)]
        self.guard.admit(sender, counter)
        return msgs


def _unpack(packed: bytes) -> dict:
    try:
        body = msgpack.unpackb(packed, raw=False, strict_map_key=True)
    except Exception:
        raise Refused("undecodable") from None
    if not isinstance(body, dict):
        raise Refused("wrong protocol")
    return body


def _build_typed(fields: dict) -> Message:
    cls = REGISTRY.get(fields.get("t"))  # type: ignore[arg-type]
    if cls is None:
        raise Refused("unknown type")
    return build(cls, fields)


def build(cls: type[Message], fields: dict) -> Message:
    """A message of type `cls` from decoded fields, each present when required and of its
    declared type, records and lists checked all the way down, or `Refused`."""
    values = {}
    for name, check, required in _SCHEMAS[cls]:
        if name not in fields:
            if required:
                raise Refused("missing field")
            continue
        values[name] = check(fields[name])
    return cls(**values)


def _flatten(value: Any) -> tuple:
    """A record as it travels: its fields in order; a rank set as its runs."""
    flatten = _FLATTENERS.get(type(value))
    if flatten is not None:
        return flatten(value)
    if isinstance(value, ranks.RankSet):
        return value.spans
    raise TypeError(f"cannot send {type(value).__name__}")


def _pack(body: dict) -> bytes:
    """msgpack's bytes for `body`; text that UTF-8 cannot carry (a lone surrogate: a path or a
    message decoded from undecodable bytes) travels escaped, as `\\udcff`."""
    return msgpack.packb(body, use_bin_type=True, default=_flatten, unicode_errors="backslashreplace")


def clip(text: str, limit: int = MAX_OUTPUT) -> str:
    """Keep a rank's output within one message, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n*** output truncated: {len(text) - limit} more characters not shown\n"
