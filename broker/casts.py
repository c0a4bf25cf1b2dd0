"""Casts in flight: which sessions still owe an answer, the answers grouped as they come, and
the order in which a session runs the lines of several shells' casts.

The handlers of its messages live here, one for each peer that takes part: the shell that
casts, the broker above that casts to ranks below us, and the brokers below that answer for
theirs (our own sessions answer by stopping again: `Casts.stopped`).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

from monarch_pdb import ranks, wire
from monarch_pdb.broker.entries import CannotServe
from monarch_pdb.broker.inflight import PICKED_THERE, InFlight, Request, below_timeout
from monarch_pdb.broker.registry import Picked
from monarch_pdb.broker.requests import unreachable_because
from monarch_pdb.broker.routes import Routes
from monarch_pdb.broker.upstream import UPSTREAM
from monarch_pdb.ranks import RankSet

if TYPE_CHECKING:
    from monarch_pdb.broker.audit import Audit
    from monarch_pdb.broker.entries import Session
    from monarch_pdb.broker.requests import Requests

PROGRESS_EVERY = 0.25
"""Seconds between two words to a shell on how far its cast got."""
PROGRESS_UP_EVERY = 1.0
"""Seconds between two words to the broker above on how far one of its casts got here."""
PROGRESS_HEARD_PER_SECOND = 8
"""About how many words of progress a broker asks to hear a second from its brokers below
together, however many they are: each word costs the root a message to take in."""


COUNT = attrgetter("count")
"""How many ranks a rank set holds, read in C: summed over the answers of each broker below."""


def question(prompt: str) -> str:
    """As a line, the prompt a session waits at where it is not pdb's at any depth ("(Pdb) ",
    "((Pdb)) "): a question such as "Clear all breaks? ", or `commands`' "(com) ", which the
    next line answers."""
    return "" if prompt.strip("() ") in ("", "Pdb") else prompt.rstrip() + "\n"


@dataclass(kw_only=True)
class CastInFlight(Request[wire.CastGroup]):
    total: int = 0
    """The ranks picked here, and those named below (see `expected` for those picked there)."""
    pending: dict[int, int] = field(default_factory=dict)
    """Session id -> rank, for each session whose answer is awaited."""
    answers: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    """Our own sessions' answers."""
    below: dict[tuple[str, str], wire.CastGroup] = field(default_factory=dict)
    """The answers from brokers below, each as the first group of it that came: at the root of
    a tree whose every answer differs, each is passed on as it came, made only once."""
    again: dict[tuple[str, str], list[RankSet]] = field(default_factory=lambda: defaultdict(list))
    """The ranks of an answer that came again (from another broker below, or in another part),
    besides the first group's: merged as runs, not ranks."""
    owed: dict[bytes, RankSet | None] = field(default_factory=dict)
    """What each broker below still owes: these ranks, or (PICKED_THERE) whichever its
    selector picks; it sends them grouped, in one `CastResult`."""
    hosts: dict[bytes, str] = field(default_factory=dict)
    """The host of each broker below, to name it when it fails us."""
    answered_below: dict[bytes, int] = field(default_factory=dict)
    """How many of its ranks each broker below says have answered, before it sends them."""
    picked_below: dict[bytes, int] = field(default_factory=dict)
    """How many ranks each broker below picked with the selector, as it says."""
    merged: dict[bytes, list[RankSet]] = field(default_factory=lambda: defaultdict(list))
    """The ranks each broker below answered for so far."""
    picking: set[bytes] = field(default_factory=set)
    """The brokers below that evaluate the selector."""
    merged_count: int = 0
    """How many ranks below have answered, in the parts merged so far."""
    answered_here: int = 0
    """How many of our own sessions have answered."""
    picked_there: Callable[[bytes], list[int]] = lambda branch: []
    """The ranks a broker below picks with the selector, from what it told us: looked up only
    when it fails us, to name them."""
    estimate: int = 0
    """The sessions of the actor below, until every broker below says how many it picked."""
    next_progress: float = 0.0
    progress_every: float = 0.0
    """At most how often a broker above wants to hear of the cast's progress."""
    reported: int = -1
    """How many answers a broker above was last told of: it is told again only of a change."""
    RESULT = wire.CastResult

    @property
    def done(self) -> bool:
        return not self.pending and not self.owed

    @property
    def answered(self) -> int:
        return self.answered_here + self.merged_count + sum(self.answered_below.values())

    @property
    def picked_nothing(self) -> bool:
        return not self.answers and not self.below and not self.missing

    @property
    def expected(self) -> int:
        """How many ranks the cast is for, as far as known."""
        if any(branch not in self.picked_below for branch in self.picking):
            return self.total + self.estimate
        return self.total + sum(self.picked_below.values())

    def owe(self, branch: bytes, host: str, ranks: RankSet | None) -> None:
        self.owed[branch], self.hosts[branch] = ranks, host
        if ranks is PICKED_THERE:
            self.picking.add(branch)

    def picked_there_count(self, branch: bytes, count: int) -> None:
        """A broker below that evaluates the selector says how many ranks it picked."""
        if branch in self.picking:
            self.picked_below[branch] = count

    def merge(self, branch: bytes, groups: list[wire.CastGroup], missing: list[wire.Missing], more: bool) -> None:
        """A broker below answers for its ranks, grouped; the last part (not `more`) ends
        what it owes, and a rank it left out is named. Only the ranks it owes count."""
        if branch not in self.owed:
            return
        owed = self.owed[branch]
        if owed is not PICKED_THERE:
            groups = [
                wire.CastGroup(group.output, group.outcome, RankSet.of(r for r in owed if r in group.ranks))
                for group in groups
            ]
        below, again, merged = self.below, self.again, self.merged[branch]
        for group in groups:
            if not group.ranks.count:
                continue
            key = (group.output, group.outcome)
            if below.setdefault(key, group) is not group:
                again[key].append(group.ranks)
            merged.append(group.ranks)
            self.merged_count += group.ranks.count
        gone = [missed for missed in missing if owed is PICKED_THERE or missed.rank in owed]
        self.missing += gone
        if owed is not PICKED_THERE:
            self.owed[branch] = RankSet.of(set(owed).difference(*self.merged[branch], (missed.rank for missed in gone)))
        if not more:
            if owed is PICKED_THERE:
                self.picked_below[branch] = sum(map(COUNT, self.merged[branch])) + len(missing)
                self.owed.pop(branch)
            self.lost(branch, f"no answer from the broker on {self.hosts[branch]}")

    def still_owed(self, branch: bytes) -> list[int]:
        """The ranks a broker below has not answered for yet."""
        owed = self.owed.get(branch)
        ranks = self.picked_there(branch) if owed is PICKED_THERE else list(owed or ())
        if not ranks:
            return []
        answered = set().union(*self.merged.get(branch, ()))
        return sorted(rank for rank in ranks if rank not in answered)

    def lost(self, peer: bytes, reason: str) -> None:
        """A broker below will send nothing more (lost, or done): its ranks still owed are missing.
        (A lost rank process's sessions end one by one: `Casts.ended`.)"""
        if peer in self.owed:
            self.missing += [wire.Missing(rank, reason) for rank in self.still_owed(peer)]
            self.owed.pop(peer)
        self.answered_below.pop(peer, None)

    def answer(self, session_id: int, output: str, outcome: str) -> None:
        rank = self.pending.pop(session_id, None)
        if rank is not None:
            self.answers[(output, outcome)].append(rank)
            self.answered_here += 1

    def give_up(self, session_id: int, reason: str) -> None:
        rank = self.pending.pop(session_id, None)
        if rank is not None:
            self.missing.append(wire.Missing(rank, reason))

    def groups(self) -> list[wire.CastGroup]:
        """Our answers and those from below, each answer's rank sets joined (an answer that
        came once from below, the most common case at the root, is taken as it came)."""
        own = {key: RankSet.of(ranks) for key, ranks in self.answers.items()}
        if not own and not self.again:
            return list(self.below.values())
        found = []
        for key, group in self.below.items():
            here, again = own.pop(key, None), self.again.get(key)
            if here is not None or again is not None:
                group = wire.CastGroup(*key, RankSet.joined([group.ranks, *(again or ()), *([here] if here else [])]))
            found.append(group)
        return found + [wire.CastGroup(*key, ranks) for key, ranks in own.items()]

    def weight(self, group: wire.CastGroup) -> int:
        return len(group.output) + 8 * len(group.ranks.spans)

    def unanswered(self) -> list[wire.Missing]:
        below = [
            wire.Missing(rank, f"no answer in time from the broker on {self.hosts[branch]}")
            for branch in self.owed
            for rank in self.still_owed(branch)
        ]
        return [wire.Missing(rank, "still running") for rank in self.pending.values()] + below


class Casts(InFlight[CastInFlight]):
    """Casts in flight, and the one record of which cast's line each session runs. A session
    runs one cast's line at a time: a line of another cast waits until the session stops
    again, and is dropped when its cast is over by then."""

    def __init__(self, part_size: int) -> None:
        super().__init__(part_size)
        self.busy: dict[int, int] = {}
        """Session id -> the cast whose line it runs (a cast over by now makes the next one
        name the session as running)."""
        self.waiting: dict[int, list[tuple[int, str]]] = {}
        """Session id -> the lines of other casts waiting for its current one (rarely any)."""

    def running(self, sess: Session) -> CastInFlight | None:
        """The open cast whose line the session runs, if any."""
        return self.get(self.busy.get(sess.id, 0))

    def start(self, cast: CastInFlight, line: str, chosen: list[Session]) -> list[Session]:
        """Open `cast` over the chosen sessions; those to send its line to now. A running
        session not busy with a cast will not answer: it is named as running."""
        self.open(cast)
        ready = []
        for sess in chosen:
            if self.running(sess) is not None:
                self.waiting.setdefault(sess.id, []).append((cast.id, line))
                cast.pending[sess.id] = sess.rank
            elif sess.paused:
                cast.pending[sess.id] = sess.rank
                self.busy[sess.id] = cast.id
                ready.append(sess)
            else:
                cast.missing.append(wire.Missing(sess.rank, wire.RankState.RUNNING))
        return ready

    def stopped(self, sess: Session) -> CastInFlight | None:
        """The session stopped: its output since the line is its answer to the cast that sent
        the line, and the question it waits at, if any; that cast, if it is still open."""
        cast = self.get(self.busy.pop(sess.id, 0))
        if cast is not None:
            cast.answer(sess.id, sess.log.replay() + question(sess.prompt), "")
        return cast

    def next_line(self, sess: Session) -> str | None:
        """The line of the next waiting cast for a paused session, which is now busy with it."""
        queued = self.waiting.get(sess.id)
        while queued and sess.paused:
            cast_id, line = queued.pop(0)
            if not queued:
                del self.waiting[sess.id]
            if cast_id in self:
                self.busy[sess.id] = cast_id
                return line
        return None

    def ended(self, sess: Session, reason: str) -> list[CastInFlight]:
        """The session is over (`reason` as it ended): the casts that will have no answer
        from it, with its last output as the answer to the one it was running."""
        touched = []
        if (cast := self.get(self.busy.pop(sess.id, 0))) is not None:
            if reason == wire.Ending.LOST:
                cast.give_up(sess.id, wire.Ending.LOST)
            else:
                cast.answer(
                    sess.id, sess.log.replay(), wire.Ending.FINISHED if reason == wire.Ending.RETURNED else reason
                )
            touched.append(cast)
        for cast_id, _ in self.waiting.pop(sess.id, ()):
            if (cast := self.get(cast_id)) is not None:
                cast.give_up(
                    sess.id,
                    wire.Ending.LOST if reason == wire.Ending.LOST else "its session ended before the command ran",
                )
                touched.append(cast)
        return touched

    def progress_due(self, now: float, every: float, upstream_every: float) -> list[CastInFlight]:
        """Casts whose shell is due a word on how far they got, every `every` seconds. A broker
        above hears it from each of its brokers below, so it is told every `upstream_every`
        seconds, or as seldom as it asked, and only when the count changed: 64 brokers below
        reporting four times a second during a long cast were most of the root's work for a
        cast of one answer."""
        due = []
        for cast in self.requests.values():
            if now < cast.next_progress:
                continue
            above = cast.shell == UPSTREAM
            cast.next_progress = now + (max(upstream_every, cast.progress_every) if above else every)
            if above:
                if cast.answered == cast.reported:
                    continue
                cast.reported = cast.answered
            due.append(cast)
        return due


class CastRequests:
    """The handlers of a cast's messages, over the casts in flight through one broker."""

    def __init__(
        self,
        requests: Requests,
        casts: Casts,
        audit: Audit,
        forward: Callable[[Session, str], None],
        tell_holders: Callable[[list[Session], bytes], None],
    ) -> None:
        """`forward` hands a line to one of our sessions; `tell_holders` tells the clients
        that hold sessions (but the one named) that they run."""
        self.requests = requests
        self.registry = requests.registry
        self.send = requests.send
        self.casts = requests.add(casts)
        self.audit = audit
        self.forward = forward
        self.tell_holders = tell_holders

    def routes(self) -> Routes:
        return Routes(
            shell={wire.Cast: self.on_cast},
            parent={wire.CastDown: self.on_cast_down},
            branch={wire.CastResult: self.on_cast_result, wire.CastProgress: self.on_cast_progress},
        )

    def on_cast(self, shell: bytes, msg: wire.Cast) -> None:
        try:
            picked = self.registry.pick_for_cast(msg.job, msg.actor, msg.selector)
        except CannotServe as refusal:
            self.send(shell, wire.Error(text=str(refusal)))
            return
        self.start(
            shell, msg.ref, msg.actor, picked, msg.line, msg.timeout, msg.selector, 0.0 if msg.progress else math.inf
        )

    def on_cast_down(self, parent: bytes, msg: wire.CastDown) -> None:
        """The parent's cast, for the ranks it names here or those its selector picks here; a
        selector that picks none here is answered with no groups."""
        if not msg.selector:
            chosen, absent = self.registry.pick(msg.job, msg.actor, list(msg.ranks))
            picked = Picked(msg.job, chosen, absent, {}, ranks.Selection())
        else:
            try:
                picked = self.registry.pick_for_cast(msg.job, msg.actor, msg.selector)
            except CannotServe:
                picked = Picked(msg.job, [], [], {}, ranks.Selection())
        self.start(parent, msg.ref, msg.actor, picked, msg.line, msg.timeout, msg.selector, msg.progress_every)

    def start(
        self,
        shell: bytes,
        ref: int,
        actor: str,
        picked: Picked,
        line: str,
        timeout: float,
        selector: str = "",
        progress_every: float = 0.0,
    ) -> None:
        """Run one line on the picked sessions: ours one by one, each broker below's in one
        message (the ranks it names there, or the selector to evaluate there); the answers go to
        `shell` grouped, once all are in or the time is up. A shell whose selector picked
        nothing anywhere is told why, as when it picks nothing here. Progress goes to `shell`
        as often as `progress_every` says (never when infinite), and from below as seldom."""
        job = picked.job
        evaluated_below = any(asked is None for asked in picked.below.values())
        self.audit.record(
            shell, job, actor, [s.rank for s in picked.sessions], line, selector if evaluated_below else ""
        )
        self.tell_holders([sess for sess in picked.sessions if sess.paused], shell)
        now = time.monotonic()
        quiet = progress_every == math.inf
        cast = CastInFlight(
            shell=shell,
            ref=ref,
            actor=actor,
            deadline=now + timeout,
            total=len(picked.sessions)
            + len(picked.absent)
            + sum(len(asked) for asked in picked.below.values() if asked is not None),
            missing=picked.absent,
            estimate=picked.estimate,
            progress_every=progress_every,
            next_progress=math.inf
            if quiet
            else now + (max(PROGRESS_UP_EVERY, progress_every) if shell == UPSTREAM else PROGRESS_EVERY),
        )
        if evaluated_below:
            branches = {peer.identity: peer for peer in self.registry.table.branches()}
            cast.picked_there = lambda branch: self.registry.picked_below(
                branches[branch], job, actor, picked.selection
            )
            if shell != UPSTREAM:
                cast.refusal = lambda: self.requests.nothing_picked(job, actor, picked.selection)
        for sess in self.casts.start(cast, line, picked.sessions):
            self.forward(sess, line)
        for branch, asked in picked.below.items():
            peer = self.registry.table.peer(branch)
            assert peer is not None
            cast.owe(branch, peer.host, asked)
            if peer.silent:
                cast.lost(branch, unreachable_because(peer.host))
                continue
            self.send(
                branch,
                wire.CastDown(
                    ref=cast.id,
                    job=job,
                    actor=actor,
                    ranks=asked or RankSet(),
                    line=line,
                    timeout=below_timeout(timeout),
                    selector=selector if asked is None else "",
                    progress_every=math.inf if quiet else len(picked.below) / PROGRESS_HEARD_PER_SECOND,
                ),
            )
        if shell != UPSTREAM and not cast.done:
            sent = RankSet.joined(
                [RankSet.of(cast.pending.values()), *(asked for asked in cast.owed.values() if asked is not None)]
            )
            self.send(
                shell,
                wire.CastStarted(
                    ref=ref,
                    ranks=sent,
                    below=sorted({cast.hosts[b] for b, asked in cast.owed.items() if asked is None}),
                ),
            )
        self.requests.settle(self.casts, cast)

    def on_cast_result(self, branch: bytes, msg: wire.CastResult) -> None:
        cast = self.casts.get(msg.ref)
        if cast is not None and branch in cast.owed:
            cast.merge(branch, msg.groups, msg.missing, msg.more)
            self.requests.settle(self.casts, cast)

    def on_cast_progress(self, branch: bytes, msg: wire.CastProgress) -> None:
        cast = self.casts.get(msg.ref)
        if cast is not None and branch in cast.owed:
            cast.answered_below[branch] = msg.answered
            cast.picked_there_count(branch, msg.total)

    def next_progress(self) -> float:
        """When the first cast is due to tell its progress."""
        return min((cast.next_progress for cast in self.casts), default=math.inf)

    def tell_progress(self, now: float) -> None:
        for cast in self.casts.progress_due(now, PROGRESS_EVERY, PROGRESS_UP_EVERY):
            self.send(cast.shell, wire.CastProgress(ref=cast.ref, answered=cast.answered, total=cast.expected))
