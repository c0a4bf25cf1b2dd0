"""The records that messages of more than one conversation carry: a rank (`RankRef`) and the
rows, answers and stacks told of it."""

from __future__ import annotations

from dataclasses import dataclass, field

from monarch_pdb import ranks
from monarch_pdb.wire.schema import Record, record
from monarch_pdb.wire.words import RankState


@dataclass
class RankRef:
    """A rank: who it is (job, actor, rank, coordinates, the host and pid of its process) and
    where it stands (function, file and line; "", "", 0 for nowhere). The fields that a row of
    `list` and a stop's `Prompt` begin with. It holds none of them itself (no slots of its own):
    a row keeps them in its slots, a message in its map, so each travels as its kind does."""

    __slots__ = ()

    job: str
    actor: str
    rank: int
    coords: dict[str, int]
    host: str
    pid: int
    function: str
    filename: str
    lineno: int


@record
class SessionRow(RankRef, Record):
    """A row of `list`: a rank, where it stands (nowhere, for a rank without a session) and
    its state."""

    state: RankState
    instance: str
    attached: str = ""
    """Who is attached to it, as a `Client` word; "" for nobody."""


@record
class JobRow(Record):
    """A row of `jobs`."""

    job: str
    processes: int
    sessions: int
    paused: int
    hosts: list[str]


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
    """One frame of a stack, innermost last, as `stacks` shows and merges it."""

    file: str
    line: int
    """0 where it is unknown (on 3.12, returning from an `except*` block)."""
    function: str
    native: bool = False
    """A C/C++ frame read from outside its process: `file` is its library, `line` 0."""


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
    outside: bool = False
    """Read from outside the processes by their host's broker, their rank processes not answering (C
    code holding the GIL): frames only, no code run in them."""


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
