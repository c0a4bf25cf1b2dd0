"""What the broker's table holds: a peer (a rank process, a shell, an editor, a broker below or
above), a session and its output, a rank that runs, a peer that left, and the refusal the rules
answer with. Plain records with the few verbs that are theirs alone; the table
(`broker/table.py`) keeps them and changes them by its rules.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field

from monarch_pdb import wire

CLIENT_KINDS: dict[str, str] = {wire.Client.EDITOR: "an editor", wire.Client.AGENT: "an agent"}
"""How a refusal to attach names the holder of a session, when it is no shell."""


@dataclass(slots=True)
class Peer:
    """One connection: a rank process or a shell."""

    identity: bytes
    role: str
    name: str
    host: str
    pid: int
    user: str
    last_seen: float
    link: bytes = b""
    owned: dict[int, Session] = field(default_factory=dict)
    """A rank process's sessions (those of the ranks it runs), or a broker below's, by its own number
    for each."""
    held: set[int] = field(default_factory=set)
    """A shell's sessions: those it is attached to."""
    present: list = field(default_factory=list)
    """The ranks this process runs, paused or not: (job, actor, rank, dimension names,
    coordinates, instance) tuples (no dict per rank: a big job has many)."""
    below: list[wire.SessionRow] = field(default_factory=list)
    """A broker below's ranks that have no session there (its sessions are `owned`)."""
    jobs: list[wire.JobRow] = field(default_factory=list)
    """A broker below's jobs, as it counts them."""
    silent: bool = False
    """A broker (below, or the parent) not heard from for a while, and kept: a stopped or
    starved process keeps its connection, and goes on where it was when it answers again."""

    @property
    def inspects(self) -> bool:
        """An editor, or a coding agent's MCP server (which reads a rank's source so): a shell that
        may also ask a paused session structured questions (`Inspect`)."""
        return self.name in (wire.Client.EDITOR, wire.Client.AGENT)

    def describe(self) -> str:
        if self.role == wire.Role.PARENT:
            return f"a shell of the parent broker ({self.host})"
        who = f"{self.user}@{self.host}" if self.user else self.host
        return f"{who} pid {self.pid}"

    def attached_in(self) -> str:
        """Where a session this peer holds is attached, as a refusal to attach says it."""
        kind = CLIENT_KINDS.get(self.name, "another shell")
        return f"{kind} ({self.describe()})"


STOPS = frozenset(stop.value for stop in wire.Stop)
STOP_STATES = {stop: wire.RankState(stop.value) for stop in wire.Stop}
"""How a session's stop reads in `list` (looked up: an enum made from a value costs more than
the rest of a row)."""
LIVE = frozenset((wire.RankState.RUNNING, wire.RankState.QUIT))
CALL_ENDED = frozenset((wire.RankState.FINISHED, wire.RankState.QUIT))
"""How a rank whose process runs on is listed while its last call, ended with a session, has no
successor."""


class State(enum.Enum):
    """Where a session is in its life, as the broker sees it."""

    STOPPED = "stopped"
    """At the stop the broker first saw; no line sent to it yet."""
    RUNNING = "running"
    """Running a line a shell sent."""
    RELEASED = "released"
    """Let go by a top-level continue: its next stop is news for every shell."""
    PAUSED = "paused"
    """Stopped again after running a line."""


@dataclass(slots=True)
class KeptOutput:
    """What a session printed, chunk by chunk, numbered, and at most `limit` characters in
    all: the oldest goes first, and a replay says how much of what was printed since the last
    input was not kept."""

    limit: int
    chunks: list[tuple[int, str]] = field(default_factory=list)
    size: int = 0
    seq: int = 0
    """The number of the latest chunk."""
    input_seq: int = 0
    """The latest chunk printed before the last input."""
    dropped: int = 0

    def add(self, text: str) -> int:
        self.seq += 1
        self.chunks.append((self.seq, text))
        self.size += len(text)
        while self.size > self.limit:
            seq, first = self.chunks[0]
            cut = min(len(first), self.size - self.limit)
            if cut == len(first):
                self.chunks.pop(0)
            else:
                self.chunks[0] = (seq, first[cut:])
            self.size -= cut
            if seq > self.input_seq:
                self.dropped += cut
        return self.seq

    def since(self, seq: int) -> list[wire.LogEntry]:
        return [wire.LogEntry(n, text) for n, text in self.chunks if n > seq]

    def replay(self) -> str:
        """What was printed since the last input."""
        note = f"*** {self.dropped} earlier characters not kept (MONARCH_PDB_SESSION_HISTORY)\n" if self.dropped else ""
        since = len(self.chunks)
        while since and self.chunks[since - 1][0] > self.input_seq:
            since -= 1
        return note + "".join(text for _, text in self.chunks[since:])

    def mark_input(self) -> None:
        self.input_seq = self.seq
        self.dropped = 0


NO_OUTPUT = KeptOutput(limit=0)
"""The log of every session below that has printed nothing up here: most never do (output goes
up only while a shell up here follows ranks), and a log each would cost the root a tenth of its
memory. Never added to (`Registry.output_log`)."""


@dataclass(slots=True)
class LiveRank:
    """A rank some connected process runs, paused or not: who it is, as a `wire.RankRef` says,
    without where it stands. A session is one with a paused thread."""

    peer: bytes
    job: str
    actor: str
    rank: int
    dims: tuple[str, ...]
    """The names of its coordinates, one tuple shared by the ranks that have them."""
    values: tuple[int, ...]
    """Its coordinates, in the order of `dims`: no dict per rank (a big job has many), made a
    dict only for a selector that filters on them."""
    instance: str = ""

    @property
    def coords(self) -> dict[str, int]:
        return dict(zip(self.dims, self.values))


@dataclass(slots=True, kw_only=True)
class Session(LiveRank):
    """One paused (or briefly running) thread of a rank, as the broker sees it."""

    id: int
    sid: int
    host: str
    pid: int
    log: KeptOutput
    function: str = ""
    filename: str = ""
    lineno: int = 0
    prompt: str = ""
    reason: wire.Stop = wire.Stop.BREAKPOINT
    state: State = State.STOPPED
    cmd: int = 0
    """The number of the latest line sent to it."""
    holder: bytes | None = None
    attached: str = ""
    """What kind of client holds it (a `wire.Client` word), as `list` shows it."""
    watcher: bytes | None = None
    """The editor a shell took it from (`attach --force`): it hears what the holder hears, and
    holds it again when the shell lets go."""
    detail: str = ""
    """Why it stopped, when an exception says so (post-mortem)."""

    @property
    def paused(self) -> bool:
        return self.state in (State.STOPPED, State.PAUSED)

    @property
    def resumed(self) -> bool:
        """It ran since the broker first saw it stop: a replay is its latest output, not its stop."""
        return self.state is not State.STOPPED

    def resume(self, release: bool) -> int:
        """A line goes to its pdb (with `release`, the top-level continue): it runs, and what it
        prints next starts a fresh replay. The line's number."""
        self.cmd += 1
        self.log.mark_input()
        self.state = State.RELEASED if release else State.RUNNING
        return self.cmd

    def row(self) -> wire.SessionRow:
        return rank_row(
            self.job,
            self.actor,
            self.rank,
            self.coords,
            self.host,
            self.pid,
            STOP_STATES[self.reason] if self.paused else wire.RankState.RUNNING,
            self.instance,
            self.function,
            self.filename,
            self.lineno,
            self.attached,
        )


def rank_row(
    job: str,
    actor: str,
    rank: int,
    coords: dict,
    host: str,
    pid: int,
    state: wire.RankState,
    instance: str,
    function: str = "",
    filename: str = "",
    lineno: int = 0,
    attached: str = "",
) -> wire.SessionRow:
    return wire.SessionRow(job, actor, rank, coords, host, pid, function, filename, lineno, state, instance, attached)


@dataclass
class Departure:
    """A peer that is gone, and what went with it."""

    peer: Peer
    ended: list[Session] = field(default_factory=list)
    """A rank process's sessions, over with it."""
    freed: list[Session] = field(default_factory=list)
    """The sessions a shell held, free again."""
    job_left: bool = False
    """It was its job's last process."""


class CannotServe(Exception):
    """A request the rules turn down: nothing by that name, a session another shell holds, a
    connection with too many sessions. The text is the line the user reads."""


def process_gone(pid: int) -> bool:
    """Whether no process `pid` runs on this host (a zombie runs no more); False when it
    cannot tell."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False
