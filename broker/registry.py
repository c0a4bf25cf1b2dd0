"""What the broker knows, and how a name finds it: the table (`broker/table.py`) with the
lookups of sessions and ranks by actor and rank, and by a `ranks(...)` selector, here and in
the brokers below. Refusals here are the line the user reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from operator import attrgetter

from monarch_pdb import ranks, wire
from monarch_pdb.broker import table_rows
from monarch_pdb.broker.entries import LIVE, CannotServe, LiveRank, Peer, Session
from monarch_pdb.broker.table import Table


@dataclass
class Picked:
    """What a cast's selector picks: our own sessions, the ranks it names that have none, and
    what each broker below is asked for: the ranks it names there, or (None) whatever the
    selector picks there, evaluated where the sessions are."""

    job: str
    sessions: list[Session]
    absent: list[wire.Missing]
    below: dict[bytes, ranks.RankSet | None]
    selection: ranks.Selection
    estimate: int = 0
    """The sessions of the actor below, where it is evaluated there: the most it may pick."""


class Registry:
    """The table, and finding sessions and live ranks in it by name and by selector."""

    def __init__(self, table: Table | None = None) -> None:
        self.table = table if table is not None else Table()

    def actor_sessions(self, job: str, actor: str) -> list[Session]:
        """Every session of one actor in one job, with Monarch's wording when there is none."""
        found = [s for s in self.table.sessions.values() if s.actor == actor and (not job or s.job == job)]
        if not found:
            raise CannotServe(f"No debug sessions for actor {actor}")
        named = {s.job for s in found}
        jobs = self.in_one_job(actor, named)
        return found if jobs == named else [s for s in found if s.job in jobs]

    def in_one_job(self, actor: str, jobs: set[str]) -> set[str]:
        """The one job of an actor named without its job, as a set, or refused. A job whose
        processes all ran on this host and are gone (killed, their connections not yet timed
        out) does not count: a job started again names its actor alone at once."""
        if len(jobs) > 1:
            jobs = jobs - self.table.dead_jobs(jobs)
        if len(jobs) > 1:
            raise CannotServe(
                f"actor {actor} exists in {len(jobs)} jobs ({', '.join(sorted(jobs))}); name it as job:{actor}"
            )
        return jobs

    def find(self, job: str, actor: str, rank: int) -> Session:
        """The session of actor/rank, with Monarch's wording when there is none."""
        job = self.actor_sessions(job, actor)[0].job
        sess = self.table.session_for(job, actor, rank)
        if sess is None:
            raise CannotServe(f"No debug session for rank {rank} for actor {actor}")
        return sess

    def select(self, job: str, actor: str, selector: str, live: bool = False) -> tuple[list, list]:
        """The sessions a `ranks(...)` selector picks (with `live`, the live ranks, paused or
        not), in rank order, and a `Missing` for each rank it names that is not among them;
        refused when it picks none. A slice or filter picks other threads' sessions only when
        it asks for threads (ranks.py)."""
        try:
            selection = ranks.parse_selector(selector)
        except ranks.SelectorError as error:
            raise CannotServe(str(error)) from None
        found = self.live_ranks(job, actor) if live else self.actor_sessions(job, actor)
        chosen = self.picked(selection, found)
        if not chosen:
            raise CannotServe(no_match(actor, selection, found, "that runs" if live else "with a session"))
        absent = sorted(set(ranks.named(selection)) - {r.rank for r in found})
        return chosen, self.without_session(found[0].job, actor, absent) if absent else []

    def pick_for_cast(self, job: str, actor: str, selector: str) -> Picked:
        """What a cast's selector picks, in time that grows with the brokers below and the
        ranks it names, not with the sessions below: a slice or filter goes down as it is, and
        each broker below evaluates it over its own sessions. CannotServe as `select` refuses, where
        that can be told here (an unknown dimension; named ranks none of which has a session)."""
        branches = self.table.branches()
        if not branches:
            chosen, absent = self.select(job, actor, selector)
            return Picked(chosen[0].job, chosen, absent, {}, ranks.parse_selector(selector))
        try:
            selection = ranks.parse_selector(selector)
        except ranks.SelectorError as error:
            raise CannotServe(str(error)) from None
        jobs = {j for j, a in self.table.by_rank if a == actor and (not job or j == job)}
        if not jobs:
            raise CannotServe(f"No debug sessions for actor {actor}")
        (job,) = self.in_one_job(actor, jobs)
        of_actor = self.table.by_rank[(job, actor)]
        names = ranks.named(selection)
        if names:
            here: list[Session] = []
            below: dict[bytes, list[int]] = {}
            for rank in names:
                sess = of_actor.get(rank)
                if sess is None:
                    continue
                if self.table.is_branch(sess.peer):
                    below.setdefault(sess.peer, []).append(rank)
                else:
                    here.append(sess)
            if not here and not below:
                raise CannotServe(no_match(actor, selection, self.actor_sessions(job, actor), "with a session"))
            absent = sorted(set(names) - of_actor.keys())
            return Picked(
                job,
                sorted(here, key=attrgetter("rank")),
                self.without_session(job, actor, absent) if absent else [],
                {branch: ranks.RankSet.of(asked) for branch, asked in below.items()},
                selection,
            )
        known = {dim for dims in self.table.dims for dim in dims}
        if any(dim not in known for dim in ranks.dimensions(selection)):
            raise CannotServe(no_match(actor, selection, self.actor_sessions(job, actor), "with a session"))
        own = [
            s
            for peer in self.table.peers.values()
            if peer.role == wire.Role.RANK
            for s in peer.owned.values()
            if s.actor == actor and s.job == job
        ]
        chosen = self.picked(selection, own)
        return Picked(
            job,
            chosen,
            [],
            {branch.identity: None for branch in branches},
            selection,
            estimate=len(of_actor) - len(own),
        )

    def picked(self, selection: ranks.Selection, found: list) -> list:
        """Those of the sessions (or live ranks) a selection picks, in rank order. A slice or
        filter picks other threads' sessions only when it asks for threads (ranks.py)."""
        by_rank = {r.rank: r for r in found}
        # Coordinates are made only for a selector that filters on them, not for ranks(0:8).
        by_coords = bool(ranks.dimensions(selection))
        picked = (
            found
            if selection.threads or ranks.named(selection) or not self.table.thread_sessions
            else [r for r in found if not wire.is_thread(r.instance)]
        )
        candidates = ((r.rank, r.coords if by_coords else {}) for r in picked)
        return [by_rank[rank] for rank in ranks.select(selection, candidates)]

    def picked_below(self, branch: Peer, job: str, actor: str, selection: ranks.Selection) -> list[int]:
        """The ranks of a broker below's sessions (as it told us of them) a selection picks."""
        found = [s for s in branch.owned.values() if s.actor == actor and s.job == job]
        return [s.rank for s in self.picked(selection, found)]

    def live_ranks(self, job: str, actor: str) -> list[LiveRank]:
        """Every rank of one actor that a connected process runs (or holds a session of), in
        rank order: a rank with a session is its session, which has all a live rank has (no
        copy of each of a million sessions)."""
        found: dict[tuple[str, int], LiveRank] = {}
        for peer in self.table.peers.values():
            found.update(self._present_live(peer, job, actor))
        for peer in self.table.branches():
            found.update(self._rows_live(peer, job, actor))
        for sess in self.table.sessions.values():
            if sess.actor == actor and (not job or sess.job == job):
                found.setdefault((sess.job, sess.rank), sess)
        if not found:
            raise CannotServe(f"No running rank of actor {actor} is known to the broker")
        jobs = self.in_one_job(actor, {j for j, _ in found})
        return sorted((r for (j, _), r in found.items() if j in jobs), key=attrgetter("rank"))

    def running(self) -> dict[tuple[str, str], set[int]]:
        """The ranks that run without a session, by job and actor, here and below: where a
        stall is looked for (a session stands still on purpose)."""
        paused = {(s.job, s.actor, s.rank) for s in self.table.sessions.values()}
        found: dict[tuple[str, str], set[int]] = {}
        for peer in self.table.peers.values():
            for job, actor, rank, *_ in peer.present:
                if (job, actor, rank) not in paused:
                    found.setdefault((job, actor), set()).add(rank)
        for branch in self.table.branches():
            for row in branch.below:
                if row.state == wire.RankState.RUNNING:
                    found.setdefault((row.job, row.actor), set()).add(row.rank)
        return found

    def watched(self) -> bool:
        """Whether a shell or an editor is connected: someone to tell what happens."""
        return any(peer.role == wire.Role.SHELL for peer in self.table.peers.values())

    def _present_live(self, peer: Peer, job: str, actor: str) -> dict[tuple[str, int], LiveRank]:
        """The ranks of one actor a process says it runs."""
        return {
            (j, rank): LiveRank(peer.identity, j, a, rank, dims, values)
            for j, a, rank, dims, values, _ in peer.present
            if a == actor and (not job or j == job)
        }

    def _rows_live(self, branch: Peer, job: str, actor: str) -> dict[tuple[str, int], LiveRank]:
        """The ranks of one actor a broker below runs without a session."""
        return {
            (row.job, row.rank): LiveRank(
                branch.identity, row.job, actor, row.rank, tuple(row.coords), tuple(row.coords.values()), row.instance
            )
            for row in branch.below
            if row.actor == actor and (not job or row.job == job) and row.state in LIVE
        }

    def pick_live(self, job: str, actor: str, selector: str) -> Picked:
        """What `stacks`' selector picks among the live ranks, as `pick_for_cast` does among the
        sessions: a slice or filter goes down as it is, and each broker below evaluates it over
        its own live ranks, so the time here grows with the brokers below, not with their ranks.
        Ranks named one by one are found here, as `select` finds them."""
        try:
            selection = ranks.parse_selector(selector)
        except ranks.SelectorError as error:
            raise CannotServe(str(error)) from None
        branches = self.table.branches()
        if not branches or ranks.named(selection):
            chosen, absent = self.select(job, actor, selector, live=True)
            return Picked(chosen[0].job, chosen, absent, {}, selection)
        jobs = {j for j, a in self.table.by_rank if a == actor}
        jobs.update(j for peer in self.table.peers.values() for j, a, *_ in peer.present if a == actor)
        jobs.update(row.job for peer in branches for row in peer.below if row.actor == actor and row.state in LIVE)
        jobs = {j for j in jobs if not job or j == job}
        if not jobs:
            raise CannotServe(f"No running rank of actor {actor} is known to the broker")
        (job,) = self.in_one_job(actor, jobs)
        own: dict[tuple[str, int], LiveRank] = {}
        for peer in self.table.peers.values():
            if peer.role == wire.Role.RANK:
                own.update(self._present_live(peer, job, actor))
                for sess in peer.owned.values():
                    if sess.actor == actor and sess.job == job:
                        own.setdefault((job, sess.rank), sess)
        return Picked(
            job,
            self.picked(selection, list(own.values())),
            [],
            {branch.identity: None for branch in branches},
            selection,
        )

    def picked_live_below(self, branch: Peer, job: str, actor: str, selection: ranks.Selection) -> list[int]:
        """The live ranks of a broker below (as it told us of them) a selection picks."""
        found: dict[tuple[str, int], LiveRank] = self._rows_live(branch, job, actor)
        for sess in branch.owned.values():
            if sess.actor == actor and sess.job == job:
                found.setdefault((job, sess.rank), sess)
        return [r.rank for r in self.picked(selection, list(found.values()))]

    def without_session(self, job: str, actor: str, wanted: list[int]) -> list[wire.Missing]:
        """A `Missing` for each of `wanted` that has no session: it runs, its process is gone
        (lost or finished), or the broker never heard of it."""
        running = {
            rank for peer in self.table.peers.values() for j, a, rank, *_ in peer.present if j == job and a == actor
        }
        below = {
            row.rank: row.state
            for peer in self.table.branches()
            for row in peer.below
            if row.job == job and row.actor == actor
        }
        found = []
        for rank in wanted:
            gone = self.table.departed.get((job, actor, rank))
            found.append(
                wire.Missing(
                    rank,
                    table_rows.running_state(self.table, (job, actor, rank))
                    if rank in running
                    else below[rank]
                    if rank in below
                    else gone[3]
                    if gone
                    else "no such rank is known",
                )
            )
        return found

    def pick(self, job: str, actor: str, wanted: list[int], live: bool = False) -> tuple[list, list[wire.Missing]]:
        """The sessions of these ranks (with `live`, the live ranks) and a `Missing` for each
        of the others; never refused, since the parent that asks knew of them all."""
        try:
            found = self.live_ranks(job, actor) if live else self.actor_sessions(job, actor)
        except CannotServe:
            found = []
        by_rank = {r.rank: r for r in found}
        chosen = [by_rank[rank] for rank in wanted if rank in by_rank]
        absent = [rank for rank in wanted if rank not in by_rank]
        return chosen, self.without_session(job, actor, absent) if absent else []


def no_match(actor: str, selection: ranks.Selection, found: Sequence[LiveRank], having: str) -> str:
    """Why a selector picked nothing: a dimension the mesh lacks, or ranks not stopped."""
    dims = list(dict.fromkeys(d for s in found for d in s.coords))
    unknown = [d for d in ranks.dimensions(selection) if d not in dims]
    if unknown:
        have = ", ".join(dims) if dims else "none"
        return f"no dimension {unknown[0]!r} in {actor} (its dimensions: {have})"
    stopped = ranks.format_ranks(s.rank for s in found)
    why = f"{ranks.render_selector(selection)} matches no rank of {actor} {having}"
    with_threads = replace(selection, threads=True)
    if not selection.threads and ranks.select(with_threads, ((s.rank, s.coords) for s in found)):
        return f"{why}: those are other threads' (ranks[{stopped}]); {ranks.render_selector(with_threads)} picks them"
    return f"{why} (those are ranks[{stopped}])"
