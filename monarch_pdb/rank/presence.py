"""Presence: the ranks a process runs, paused or not, as the broker must know them.

A mesh runtime names the ranks it runs as their calls start (`host`); a process that is a rank
of its own (launcher variables, `set_identity`) is announced as itself (`host_self`) until a
runtime names one. After each handshake the broker is told every rank again; in between, only
what it lacks, so `list --all`, `stacks` and `interrupt` reach ranks that never stopped.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable

from monarch_pdb import wire
from monarch_pdb.rank.identity import Identity, current, here
from monarch_pdb.rank.rank_threads import RankThreads

PRESENT_EVERY = 0.25
"""Seconds between two announcements of the ranks a mesh runtime names: a thousand ranks
starting at once make a few messages, not a thousand growing ones. A process that is its own
rank is announced at once, in the same batch as a prompt that renames it."""
OWN_RECHECK = 1.0
"""Seconds between two looks at a process's own identity, which its engine may change after
start-up (a Ray worker becomes an actor)."""


def renamed_without_a_word() -> bool:
    """Whether an engine may change the process's own identity without telling us: only Ray
    does (a worker becomes an actor, a task starts). Any other process is renamed by
    `set_identity` (`renamed`) or not at all, and its idle link never wakes to look."""
    return "ray" in sys.modules


Rank = tuple[str, str, int]
"""(job, actor, rank)"""


class Presence:
    """What the broker has been told of this process's ranks, and what it must be told next
    (the rank process keeps one; its link's thread announces).

    Locking: every attribute but `_threads` and `_wake` is written under `_lock`, and read under
    it but for `host`'s first look, and nothing is called while it is held."""

    def __init__(self, threads: RankThreads, wake: Callable[[], None]) -> None:
        """`threads` says whose call a process that is its own rank runs now; `wake` tells the
        link's thread that an announcement is due."""
        self._threads = threads
        self._wake = wake
        self._lock = threading.Lock()
        self._hosted: dict[Rank, dict] = {}
        """The ranks a mesh runtime named, in the order it named them, with their coords."""
        self._own = False
        """Whether the process is a rank of its own (and hosts none)."""
        self._own_as: wire.PresentRank | None = None
        """Whom the broker has the process as, when it is its own rank."""
        self._stopped_as: wire.PresentRank | None = None
        """Its sessions' identity while one is open: a paused thread may see more of it (a Ray
        task's name) than the link's thread does."""
        self._checked = float("-inf")
        self._due = False
        self._announced: int | None = None
        """How many of `_hosted` the broker has (in order); None: it needs them all."""
        self._ended: dict[Rank, str] = {}
        """Hosted ranks whose last call ended with a session, and how the broker lists them
        (finished, or quit): a broker that restarts learns it with them. Each is announced again
        when its next call starts (then in `_again`)."""
        self._again: list[Rank] = []
        self._at = float("-inf")

    # --- the program's threads -------------------------------------------------------

    def host(self, job: str, actor: str, rank: int, coords: dict) -> None:
        """A rank this process runs from now on, named by a mesh runtime: the broker learns it
        with the next announcement (it replaces the process's own identity, see `host_self`)."""
        key = (job, actor, rank)
        if key in self._hosted and key not in self._ended:
            return  # every call of a rank after its first: two looks, no lock
        with self._lock:
            if key in self._ended:
                del self._ended[key]
                self._again.append(key)
            elif key in self._hosted:
                return
            else:
                self._hosted[key] = dict(coords)
                if self._own:
                    self._own, self._announced = False, None
            self._due = True
        self._wake()

    def host_self(self) -> None:
        """The process is a rank of its own (its identity: launcher variables, set_identity)
        until a mesh runtime names the ranks it runs."""
        with self._lock:
            self._own = not self._hosted
            self._due = True
            self._announced = None
        self._wake()

    def renamed(self) -> None:
        """The program named itself (set_identity): tell the broker, if it is its own rank."""
        with self._lock:
            own = self._own
            self._due = self._due or own
        if own:
            self._wake()

    def paused_as(self, identity: wire.PresentRank) -> None:
        """A session of the process's own rank waits for input as `identity`: the process is announced under that name while a session is open."""
        with self._lock:
            if self._own:
                self._stopped_as = identity
                self._due = self._due or identity != self._own_as

    def call_ended(self, key: Rank, state: wire.RankState) -> None:
        """A hosted rank's call ended with its session (it returned or raised: `finished`; it
        quit the debugger: `quit`): the broker lists it so until its next call starts."""
        with self._lock:
            if key in self._hosted:
                self._ended[key] = state

    def sessions_closed(self) -> None:
        """The process has no open session any more: its own rank goes by its call's name again
        (announced again at once, since no idle look would see the change)."""
        with self._lock:
            self._due = self._due or (self._own and self._stopped_as is not None)
            self._stopped_as = None

    # --- the link's thread ------------------------------------------------------------

    def welcomed(self) -> None:
        """A broker (a new one, maybe) has just welcomed us: it needs every rank."""
        with self._lock:
            self._due = bool(self._hosted) or self._own
            self._announced = None

    def delay(self, now: float) -> float | None:
        """How soon an announcement is due, or the next look at a process's own identity (its
        engine renames it without a word: a Ray task starts); None when neither is."""
        with self._lock:
            if self._own and not self._due:
                return max(0.0, self._checked + OWN_RECHECK - now) if renamed_without_a_word() else None
            if not self._due:
                return None
            return 0.0 if self._own else max(0.0, self._at + PRESENT_EVERY - now)

    def tick(self, now: float) -> wire.Present | None:
        """The announcement due now: a process that is its own rank at once, and again when its
        name changed; the ranks a runtime named at most every PRESENT_EVERY seconds."""
        with self._lock:
            recheck = self._own and now >= self._checked + OWN_RECHECK and renamed_without_a_word()
            if recheck:
                self._checked = now
            stopped_as, announced_as = self._stopped_as, self._own_as
        renamed = recheck and self._own_identity(stopped_as) != announced_as
        with self._lock:
            self._due = self._due or renamed
            if not self._due or not (self._own or now >= self._at + PRESENT_EVERY):
                return None
            self._due, self._at = False, now
            own, since, stopped_as = self._own, self._announced, self._stopped_as
            hosted = list(self._hosted.items())
            self._announced = None if own else len(hosted)
            again, self._again = [(key, self._hosted[key]) for key in self._again], []
            ended = dict(self._ended) if since is None else {}
        if own:
            own_as = self._own_identity(stopped_as)
            with self._lock:
                self._own_as = own_as
            return wire.Present(ranks=[own_as])
        fresh = hosted if since is None else hosted[since:] + again
        return wire.Present(
            ranks=[
                wire.PresentRank(job, actor, rank, coords, state=ended.get((job, actor, rank), ""))
                for (job, actor, rank), coords in fresh
            ],
            added=since is not None,
        )

    # --- whom a running rank is ------------------------------------------------------

    def own(self) -> bool:
        """Whether the process is a rank of its own: every thread of it runs that rank."""
        with self._lock:
            return self._own

    def identities(self, actor: str, ranks: Iterable[int]) -> dict[int, Identity]:
        """Whom each of `ranks` of `actor` stops as: a rank a runtime named as itself, any
        other as the process's own rank."""
        with self._lock:
            hosted = {(a, r): (job, coords) for (job, a, r), coords in self._hosted.items()}
            stopped_as = self._stopped_as
        found: dict[int, Identity] = {}
        process = here()
        for rank in ranks:
            if (actor, rank) in hosted:
                job, coords = hosted[(actor, rank)]
                name = wire.PresentRank(job, actor, rank, coords)
            else:
                name = self._own_identity(stopped_as)
            found[rank] = Identity(
                job=name.job,
                actor=name.actor,
                rank=name.rank,
                coords=dict(name.coords),
                hostname=process.hostname,
                pid=process.pid,
                instance=name.instance,
            )
        return found

    def _own_identity(self, stopped_as: wire.PresentRank | None) -> wire.PresentRank:
        """Whom a process that is its own rank is: its open sessions' name, else its newest
        call's, else the process's."""
        if stopped_as is not None:
            return stopped_as
        ident = self._threads.newest_call() or current()
        return wire.PresentRank(ident.job, ident.actor, ident.rank, ident.coords, ident.instance)
