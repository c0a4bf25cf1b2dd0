"""What a broker and the broker above it (`--upstream`) say to each other.

A broker below speaks to its parent as a shell would be answered: it says hello as `broker`,
and the parent sends it what a shell sends (Attach, Send, Detach, Continue) and what a rank process
is sent (TakeStacks, PeekRanks, InterruptRanks), plus `CastDown`; it answers as to a shell
(Attached, SessionOutput, CastResult, StacksResult, PeekResult) and tells what lies below it in
the messages here.
"""

from __future__ import annotations

from monarch_pdb import ranks
from monarch_pdb.wire.records import JobRow, SessionRow
from monarch_pdb.wire.schema import Message, Record, message, record


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
