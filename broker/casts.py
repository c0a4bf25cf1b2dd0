"""Casts in flight: which sessions still owe an answer, the answers grouped as they come, and
the order in which a session runs the lines of several shells' casts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

from monarch_pdb import wire
from monarch_pdb.broker.inflight import PICKED_THERE, InFlight, Request
from monarch_pdb.broker.upstream import UPSTREAM
from monarch_pdb.ranks import RankSet

if TYPE_CHECKING:
    from monarch_pdb.broker.registry import Session


COUNT = attrgetter("count")
"""How many ranks a rank set holds, read in C: summed over the answers of each broker below."""


def question(prompt: str) -> str:
    """As a line, the prompt a session waits at where it is not pdb's at any depth ("(Pdb) ",
    "((Pdb)) "): a question such as "Clear all breaks? ", or `commands`' "(com) ", which the
    next line answers."""
    return "" if prompt.strip("() ") in ("", "Pdb") else prompt.rstrip() + "\n"


@dataclass(kw_only=True)
class CastInFlight(Request):
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
            groups = [wire.CastGroup(group.output, group.outcome, RankSet.of(r for r in owed if r in group.ranks))
                      for group in groups]
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
        (A lost agent's sessions end one by one: `Casts.ended`.)"""
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
        below = [wire.Missing(rank, f"no answer in time from the broker on {self.hosts[branch]}")
                 for branch in self.owed for rank in self.still_owed(branch)]
        return [wire.Missing(rank, "still running") for rank in self.pending.values()] + below


class Casts(InFlight[CastInFlight]):
    """Casts in flight. A session runs one cast's line at a time: a line of another cast waits
    until the session stops again, and is dropped when its cast is over by then."""

    def start(self, cast: CastInFlight, line: str, chosen: list[Session]) -> list[Session]:
        """Open `cast` over the chosen sessions; those to send its line to now. A running
        session not busy with a cast will not answer: it is named as running."""
        self.open(cast)
        ready = []
        for sess in chosen:
            if sess.cast in self:
                sess.queued += ((cast.id, line),)
                cast.pending[sess.id] = sess.rank
            elif sess.paused:
                cast.pending[sess.id] = sess.rank
                sess.cast = cast.id
                ready.append(sess)
            else:
                cast.missing.append(wire.Missing(sess.rank, wire.RankState.RUNNING))
        return ready

    def stopped(self, sess: Session) -> CastInFlight | None:
        """The session stopped: its output since the line is its answer to the cast that sent
        the line, and the question it waits at, if any; that cast, if it is still open."""
        cast = self.get(sess.cast)
        sess.cast = 0
        if cast is not None:
            cast.answer(sess.id, sess.log.replay() + question(sess.prompt), "")
        return cast

    def next_line(self, sess: Session) -> str | None:
        """The line of the next waiting cast for a paused session, which is now busy with it."""
        while sess.queued and sess.paused:
            (cast_id, line), sess.queued = sess.queued[0], sess.queued[1:]
            if cast_id in self:
                sess.cast = cast_id
                return line
        return None

    def ended(self, sess: Session, reason: str) -> list[CastInFlight]:
        """The session is over (`reason` as it ended): the casts that will have no answer
        from it, with its last output as the answer to the one it was running."""
        touched = []
        if (cast := self.get(sess.cast)) is not None:
            if reason == wire.Ending.LOST:
                cast.give_up(sess.id, wire.Ending.LOST)
            else:
                cast.answer(sess.id, sess.log.replay(), wire.Ending.FINISHED if reason == wire.Ending.RETURNED else reason)
            touched.append(cast)
        for cast_id, _ in sess.queued:
            if (cast := self.get(cast_id)) is not None:
                cast.give_up(sess.id, wire.Ending.LOST if reason == wire.Ending.LOST else "its session ended before the command ran")
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
