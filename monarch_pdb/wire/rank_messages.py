"""What a rank's rank process and its broker say to each other: stops, input and output, the ranks a
process runs, and the requests (stacks, peeks, interrupts, breakpoints) its rank process thread answers
without stopping them. A broker below is sent some of them too, and answers as a broker."""

from __future__ import annotations

from monarch_pdb import ranks
from monarch_pdb.wire.records import CastGroup, RankRef, Spot, StackGroup
from monarch_pdb.wire.schema import Message, Record, message, record
from monarch_pdb.wire.words import Ending, Reading, Stop, Threads


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


@message("prompt")
class Prompt(RankRef, Message):
    """A session waits for input: its rank, where it stands and what pdb printed since the
    last input.

    `cmd` is the input this answers (0 for a fresh stop). The rank travels every time, so a
    restarted broker learns the whole session from the next prompt; `again` says a broker was
    told of this stop before (one that restarted since), so it is no news to shells.
    """

    sid: int
    cmd: int
    output: str
    prompt: str
    reason: Stop = Stop.BREAKPOINT
    exc: str = ""
    instance: str = ""
    again: bool = False


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


@message("present")
class Present(Message):
    """Agent to broker: the ranks this process runs, paused or not: all of them after each
    handshake, then (`added`) those a mesh runtime named since, so a thousand ranks starting
    at once cost a thousand entries, not a million."""

    ranks: list[PresentRank]
    added: bool = False


@message("take_stacks")
class TakeStacks(Message):
    """Broker to rank process, or to a broker below: report the stacks of these ranks of one actor,
    without stopping them, or, to a broker below with a `selector`, of the live ranks it picks
    there (as `CastDown`). A rank process answers `StackReport`; a broker, `StacksResult` by `timeout`."""

    ref: int
    actor: str
    ranks: ranks.RankSet
    threads: Threads
    job: str = ""
    timeout: float = 0.0
    locals: bool = False
    """Each group's locals too: read on a thread of the rank process's own, as a `peek` is."""
    selector: str = ""
    native: bool = False
    """C/C++ frames too: a broker reads its host's processes from outside for them (a rank process,
    which cannot see them, answers its Python frames)."""


@message("stack_report")
class StackReport(Message):
    """Agent to broker: the stacks of the ranks asked, ranks with identical stacks sharing one
    group."""

    ref: int
    groups: list[StackGroup]


@message("interrupt_ranks")
class InterruptRanks(Message):
    """Broker to rank process (or to a broker below, which passes it on): stop these ranks of one
    actor in the thread that runs them."""

    actor: str
    ranks: list[int]
    job: str = ""


@message("peek_ranks")
class PeekRanks(Message):
    """Broker to rank process, or to a broker below: a `Peek` for these ranks of one actor. A rank process
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
    reading: Reading = Reading.EXPRESSION


@message("peek_report")
class PeekReport(Message):
    """Agent to broker: each rank's answer (what pdb's `p` would print), ranks with the same
    answer sharing one group."""

    ref: int
    groups: list[CastGroup]


@message("break_ranks")
class BreakRanks(Message):
    """Broker to rank process: `Breakpoints` for the whole process (a breakpoint is in its code, which
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
    """Broker to rank process, and to a broker below: the editor `owner` (named as in `BreakRanks`)
    disconnected or was lost; its breakpoints, in running and paused ranks, and its `uncaught`
    filter go with it."""

    owner: bytes
