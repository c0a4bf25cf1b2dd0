"""Casts in flight: which sessions still owe an answer, the answers grouped as they come, and
the order in which a session runs the lines of several shells' casts."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from monarch_pdb import wire
from monarch_pdb.broker.inflight import InFlight, Request

if TYPE_CHECKING:
    from monarch_pdb.broker.registry import Session


def question(prompt: str) -> str:
    """As a line, the prompt a session waits at where it is not pdb's at any depth ("(Pdb) ",
    "((Pdb)) "): a question such as "Clear all breaks? ", or `commands`' "(com) ", which the
    next line answers."""
    return "" if prompt.strip("() ") in ("", "Pdb") else prompt.rstrip() + "\n"


@dataclass(kw_only=True)
class CastInFlight(Request):
    total: int = 0
    pending: dict[int, int] = field(default_factory=dict)
    """Session id -> rank, for each session whose answer is awaited."""
    answers: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    owed: dict[bytes, set[int]] = field(default_factory=dict)
    """The ranks each broker below still owes: it sends them grouped, in one `CastResult`."""
    hosts: dict[bytes, str] = field(default_factory=dict)
    """The host of each broker below, to name it when it fails us."""
    answered_below: dict[bytes, int] = field(default_factory=dict)
    """How many of its ranks each broker below says have answered, before it sends them."""
    next_progress: float = 0.0
    RESULT = wire.CastResult

    @property
    def done(self) -> bool:
        return not self.pending and not self.owed

    @property
    def answered(self) -> int:
        owed = sum(len(ranks) for ranks in self.owed.values())
        return self.total - len(self.pending) - owed - len(self.missing) + sum(self.answered_below.values())

    def owe(self, branch: bytes, host: str, ranks: list[int]) -> None:
        self.owed[branch], self.hosts[branch] = set(ranks), host

    def merge(self, branch: bytes, groups: list[wire.CastGroup], missing: list[wire.Missing], more: bool) -> None:
        """A broker below answers for its ranks, grouped; the last part (not `more`) ends
        what it owes, and a rank it left out is named."""
        owed = self.owed.get(branch)
        if owed is None:
            return
        for group in groups:
            mine = owed.intersection(group.ranks)
            owed -= mine
            self.answers[(group.output, group.outcome)].extend(mine)
        for gone in missing:
            if gone.rank in owed:
                owed.discard(gone.rank)
                self.missing.append(gone)
        if not more:
            self.lost(branch, f"no answer from the broker on {self.hosts[branch]}")

    def lost(self, peer: bytes, reason: str) -> None:
        """A broker below will send nothing more (lost, or done): its ranks still owed are missing.
        (A lost agent's sessions end one by one: `Casts.ended`.)"""
        self.missing += [wire.Missing(rank, reason) for rank in sorted(self.owed.pop(peer, ()))]
        self.answered_below.pop(peer, None)

    def answer(self, session_id: int, output: str, outcome: str) -> None:
        rank = self.pending.pop(session_id, None)
        if rank is not None:
            self.answers[(output, outcome)].append(rank)

    def give_up(self, session_id: int, reason: str) -> None:
        rank = self.pending.pop(session_id, None)
        if rank is not None:
            self.missing.append(wire.Missing(rank, reason))

    def groups(self) -> list[tuple[wire.CastGroup, int]]:
        return [(wire.CastGroup(output, outcome, sorted(ranks)), len(output) + 8 * len(ranks))
                for (output, outcome), ranks in self.answers.items()]

    def unanswered(self) -> list[wire.Missing]:
        below = [wire.Missing(rank, f"no answer in time from the broker on {self.hosts[branch]}")
                 for branch, ranks in self.owed.items() for rank in ranks]
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

    def progress_due(self, now: float, every: float) -> list[CastInFlight]:
        """Casts whose shell is due a word on how far they got."""
        due = [cast for cast in self.requests.values() if now >= cast.next_progress]
        for cast in due:
            cast.next_progress = now + every
        return due
