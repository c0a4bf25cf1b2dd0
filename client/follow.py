"""Following ranks' output as it is published: in order, and with nothing missing.

Each session's output chunks are numbered. The follower starts from the numbers the broker
gave when following began. A chunk that skips ahead (the subscription started late, or the
shell fell behind) is held back, and the missing ones are fetched from the broker's
per-session log; once they arrive, they and the held chunks are delivered in order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from monarch_pdb import wire

Deliver = Callable[[str, int, str], None]


@dataclass
class Follower:
    job: str = ""
    actor: str = ""
    ranks: frozenset[int] = frozenset()
    deliver: Deliver | None = None
    seen: dict[int, int] = field(default_factory=dict)
    rank_of: dict[int, int] = field(default_factory=dict)
    held: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    gaps: set[int] = field(default_factory=set)
    asked: set[int] = field(default_factory=set)
    confirmed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, following: wire.Following, deliver: Deliver) -> None:
        with self.lock:
            self.job, self.actor, self.deliver = following.job, following.actor, deliver
            self.ranks = frozenset(f.rank for f in following.sessions)
            self.seen = {f.session: f.seq for f in following.sessions}
            self.rank_of = {f.session: f.rank for f in following.sessions}
            self.held, self.gaps, self.asked, self.confirmed = {}, set(), set(), False

    def live(self) -> None:
        """Our subscription is live: fetch, once, what every followed session printed between
        the start of following and now (the publisher drops what it sends before that)."""
        with self.lock:
            if self.deliver is not None and not self.confirmed:
                self.confirmed = True
                self.gaps |= set(self.seen) - self.asked

    def stop(self) -> None:
        with self.lock:
            self.deliver = None

    def printed(self, msg: wire.Printed) -> None:
        with self.lock:
            if self.deliver is None or (msg.job, msg.actor) != (self.job, self.actor) or msg.rank not in self.ranks:
                return
            self.rank_of[msg.session] = msg.rank
            self.held.setdefault(msg.session, []).append((msg.seq, msg.text))
            self._flush(msg.session)

    def caught_up(self, log: wire.OutputLog) -> None:
        with self.lock:
            self.asked.discard(log.session)
            if self.deliver is None:
                return
            self.held.setdefault(log.session, []).extend((entry.seq, entry.text) for entry in log.rows)
            self._flush(log.session)

    def requests(self) -> list[wire.Message]:
        """One question per session with a gap; its answer (or the next gap) may ask again."""
        with self.lock:
            wanted: list[wire.Message] = [wire.OutputSince(session=s, since=self.seen.get(s, 0)) for s in self.gaps]
            self.asked |= self.gaps
            self.gaps = set()
            return wanted

    def has_requests(self) -> bool:
        return bool(self.gaps)

    def _flush(self, session: int) -> None:
        """Deliver held chunks in order up to the first gap; a gap not yet asked about is noted."""
        held = sorted(self.held.pop(session, []))
        last = self.seen.get(session, 0)
        for at, (seq, text) in enumerate(held):
            if seq <= last:
                continue
            if seq != last + 1:
                self.held[session] = held[at:]
                if session not in self.asked:
                    self.gaps.add(session)
                break
            last = self.seen[session] = seq
            assert self.deliver is not None
            self.deliver(self.actor, self.rank_of[session], text)
