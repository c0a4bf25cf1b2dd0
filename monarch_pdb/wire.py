"""The wire protocol: every message type, and how it is signed, encoded and checked.

A message is two ZeroMQ frames after any routing identity: a 32-byte HMAC-SHA256 signature
of the body, and the body, a msgpack map holding the protocol version (`v`), the type (`t`),
the sender's random id (`s`) and counter (`n`), and the type's own fields. Nothing else in
the project builds or reads these maps.

Several messages for one peer may travel as one batch (type `batch`, `items` a list of packed
maps of type and fields), signed once: a cast to thousands of sessions behind one connection
then costs one signature and one send per connection, not per session.

A message that is too large, badly signed, replayed, too old (the signed time stamp `ts` is
off by more than `max_age`), undecodable, of an unknown type or with a field of the wrong type
is refused with `Refused`; receivers count it and move on.
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
from typing import Any, ClassVar

import msgpack

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
AUTH_FAILED = [b"", b"monarch-pdb: authentication failed"]
"""The one unsigned answer: what a broker sends to a peer whose messages fail the signature
check, so that a shell with the wrong secret says so at once instead of waiting in silence."""


class Refused(Exception):
    """A message that must be dropped; the text says why, in a few words."""


@dataclass
class Message:
    TYPE: ClassVar[str] = ""


REGISTRY: dict[str, type[Message]] = {}
_SCHEMAS: dict[type[Message], tuple[tuple[str, tuple[type, ...], bool], ...]] = {}


def _accepted_types(annotation: Any) -> tuple[type, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return tuple(t for arg in typing.get_args(annotation) for t in _accepted_types(arg))
    if annotation is None or annotation is type(None):
        return (type(None),)
    base = typing.get_origin(annotation) or annotation
    return (float, int) if base is float else (base,)


def message(type_name: str):
    """Register a dataclass as a message type under its short wire name."""

    def register(cls):
        cls = dataclass(cls)
        cls.TYPE = type_name
        hints = typing.get_type_hints(cls)
        _SCHEMAS[cls] = tuple(
            (
                f.name,
                _accepted_types(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
        )
        REGISTRY[type_name] = cls
        return cls

    return register


# --- connection management, every peer ---------------------------------------------------


@message("hello")
class Hello(Message):
    """First message of a peer: who it is. `role` is "agent" or "shell"."""

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
    event published, and how often to beat."""

    pub: str
    heartbeat: float
    broker_pid: int
    seq: int = 0


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
    coords: dict
    host: str
    pid: int
    function: str
    filename: str
    lineno: int
    output: str
    prompt: str
    reason: str = "breakpoint"
    exc: str = ""
    instance: str = ""


@message("output")
class Output(Message):
    """Text a session printed while running, flushed after a short idle time."""

    sid: int
    text: str


@message("ended")
class Ended(Message):
    """A session is over: its endpoint returned or its program stopped tracing."""

    sid: int
    cmd: int
    output: str
    reason: str = "returned"


@message("input")
class Input(Message):
    """One line for a session's pdb; `cmd` numbers it so the answer can be matched.

    `release` is the top-level continue: forget the call's interactive breakpoints, then go on.
    """

    sid: int
    cmd: int
    line: str
    release: bool = False


@message("dismiss")
class Dismiss(Message):
    """The broker cannot hold this session (a limit is reached): go on without stopping."""

    sid: int
    text: str


# --- shell <-> broker --------------------------------------------------------------------


@message("list")
class ListSessions(Message):
    pass


@message("sessions")
class SessionList(Message):
    """Rows of paused sessions, each a map with the keys of `SESSION_ROW_KEYS`. Many rows come
    in several parts, each a message that fits, the last with `more` false."""

    rows: list
    more: bool = False


SESSION_ROW_KEYS = (
    "job", "actor", "rank", "coords", "host", "pid", "function", "filename", "lineno", "state", "instance",
)


@message("jobs")
class ListJobs(Message):
    pass


@message("job_list")
class JobList(Message):
    """One map per job: `job`, `processes`, `sessions`, `paused`, `hosts`."""

    rows: list


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


@message("session_output")
class SessionOutput(Message):
    """What the held session printed; `paused` with its prompt when it waits for input."""

    session: int
    text: str
    paused: bool
    prompt: str = ""


@message("session_ended")
class SessionEnded(Message):
    """The held session is gone: `reason` is "returned", "lost" or "taken" (by another shell)."""

    session: int
    text: str
    reason: str


@message("cast")
class Cast(Message):
    """One pdb command for the selected ranks of an actor; `ref` is echoed in the answers."""

    ref: int
    actor: str
    selector: str
    line: str
    timeout: float
    job: str = ""


@message("cast_progress")
class CastProgress(Message):
    ref: int
    answered: int
    total: int


@message("cast_result")
class CastResult(Message):
    """The answers of a cast, grouped: `groups` holds [output, outcome, ranks] triples, most
    common first (outcome "" when the rank waits at its next prompt, else how its session
    ended); `missing` holds [rank, reason] pairs for ranks that did not answer. Large answers
    come in several parts."""

    ref: int
    actor: str
    groups: list
    missing: list
    more: bool = False
    """True on every part but the last, when the answers are larger than one message."""


@message("continue")
class Continue(Message):
    job: str = ""


@message("continued")
class Continued(Message):
    """How many ranks the top-level continue released, per actor: [[actor, ranks], ...]."""

    released: list


@message("event")
class Event(Message):
    """Published to every shell: a session stopped (`breakpoint`), entered `post-mortem`,
    `ended`, was `lost`, or was `released` by a shell that went away. Events are numbered so a
    shell can tell that it missed some."""

    seq: int
    kind: str
    job: str
    actor: str
    rank: int
    where: str = ""
    detail: str = ""

    def row(self) -> list:
        return [getattr(self, name) for name, _, _ in _SCHEMAS[Event]]

    @classmethod
    def from_row(cls, row: object) -> "Event":
        """An event sent as `row()`, checked like any message's fields."""
        if not isinstance(row, list) or len(row) != len(_SCHEMAS[cls]):
            raise Refused("wrong field type")
        return build(cls, {name: value for (name, _, _), value in zip(_SCHEMAS[cls], row)})


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
    """The followed ranks, and each session's last output number: [[session, rank, seq]]."""

    job: str
    actor: str
    sessions: list


@message("output_since")
class OutputSince(Message):
    session: int
    since: int


@message("output_log")
class OutputLog(Message):
    """A session's kept output after a number: [[seq, text]], oldest first."""

    session: int
    rows: list


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
    """Missed events, as `Event.row()` lists, oldest first."""

    rows: list


# --- presence, stacks and interrupts ------------------------------------------------------


@message("present")
class Present(Message):
    """Agent to broker: the ranks this process runs, paused or not, as [job, actor, rank,
    coords] lists (and the instance, when the engine names one): all of them after each
    handshake, then (`added`) those a mesh runtime named since, so a thousand ranks starting
    at once cost a thousand entries, not a million."""

    ranks: list
    added: bool = False


@message("list_all")
class ListAll(Message):
    """`list --all`: answered with `SessionList` rows for every rank the broker knows, its
    `state` one of breakpoint, post-mortem, interrupted, running, lost, finished."""


@message("stacks")
class Stacks(Message):
    """Shell to broker: the Python stacks of the selected live ranks, answered with
    `StacksResult`. `threads` is "main" (the thread running the rank) or "all"."""

    ref: int
    actor: str
    selector: str
    timeout: float
    threads: str = "main"
    job: str = ""


@message("take_stacks")
class TakeStacks(Message):
    """Broker to agent: report the stacks of these ranks of one actor, without stopping them."""

    ref: int
    actor: str
    ranks: list
    threads: str


@message("stack_report")
class StackReport(Message):
    """Agent to broker: [threads, ranks] pairs, ranks with identical stacks sharing one pair;
    `threads` is a list of [thread name, frames], frames [file, line, function] lists,
    outermost first."""

    ref: int
    groups: list


@message("stacks_result")
class StacksResult(Message):
    """Broker to shell: the stacks of a `Stacks` request as [threads, ranks] pairs, merged
    over every process; `missing` holds [rank, reason] pairs. Large results come in parts."""

    ref: int
    actor: str
    groups: list
    missing: list
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
    """Broker to agent: stop these ranks of one actor in the thread that runs them."""

    actor: str
    ranks: list


@message("interrupting")
class Interrupting(Message):
    """The ranks asked to stop (those already stopped are left out)."""

    job: str
    actor: str
    ranks: list


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
            item = msgpack.packb({"t": msg.TYPE, **msg.__dict__}, use_bin_type=True)
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
        packed = msgpack.packb(body, use_bin_type=True)
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
    declared type (a bool is not an int here), or `Refused`."""
    values = {}
    for name, accepted, required in _SCHEMAS[cls]:
        if name not in fields:
            if required:
                raise Refused("missing field")
            continue
        value = fields[name]
        if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
            raise Refused("wrong field type")
        values[name] = value
    return cls(**values)


def clip(text: str, limit: int = MAX_OUTPUT) -> str:
    """Keep a rank's output within one message, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n*** output truncated: {len(text) - limit} more characters not shown\n"
