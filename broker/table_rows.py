"""What `list`, `list --all` and `jobs` show of the broker's table: each row made from what
stands for its rank (a session, a process and what it said it runs, a row from below, or a
process gone), as it is wanted."""

from __future__ import annotations

from collections.abc import Iterator
from operator import attrgetter

from monarch_pdb import wire
from monarch_pdb.broker.entries import Peer, Session, rank_row
from monarch_pdb.broker.table import Table

Found = Session | wire.SessionRow | tuple[Peer, tuple] | None
"""What stands for a rank in `list --all`: its session, its row from below, the process that
runs it with what it said of it, or nothing (its process is gone)."""


def job_rows(table: Table) -> list[wire.JobRow]:
    """Each job's processes and hosts (a broker below counts its own), and its sessions."""
    jobs: dict[str, wire.JobRow] = {}

    def job(name: str) -> wire.JobRow:
        return jobs.setdefault(name, wire.JobRow(job=name, processes=0, sessions=0, paused=0, hosts=[]))

    for peer in table.peers.values():
        if peer.role == wire.Role.RANK:
            row = job(peer.name)
            row.processes += 1
            row.hosts += [peer.host] if peer.host not in row.hosts else []
        elif peer.role == wire.Role.BROKER:
            for below in peer.jobs:
                row = job(below.job)
                row.processes += below.processes
                row.hosts += [host for host in below.hosts if host not in row.hosts]
        else:
            continue
        for sess in peer.owned.values():
            row = job(sess.job)
            row.sessions += 1
            row.paused += sess.paused
    return [jobs[name] for name in sorted(jobs)]


def rows(table: Table) -> Iterator[wire.SessionRow]:
    """`list`: the paused sessions in order, each row made as it is wanted."""
    paused = table.paused()
    # (job, actor, rank) order by three stable sorts on what the sessions hold: a key tuple
    # per session, at every list, would be memory the allocator keeps.
    for name in ("rank", "actor", "job"):
        paused.sort(key=attrgetter(name))
    return (s.row() for s in paused)


def running_state(table: Table, key: tuple[str, str, int]) -> wire.RankState:
    """The state of a rank its process runs, without a session."""
    return table.ended.get(key, wire.RankState.RUNNING)


def rows_without_session(table: Table) -> Iterator[wire.SessionRow]:
    """`list --all` but the sessions: what a broker tells its parent besides them."""
    return (row for row in all_rows(table) if table.session_for(row.job, row.actor, row.rank) is None)


def all_rows(table: Table) -> Iterator[wire.SessionRow]:
    """`list --all`: every session, every rank running without one, and ranks whose
    process is gone, in order; each row made as it is wanted, from what stands for its
    rank: a session, a process and what it said it runs, a row from below, or the
    departed."""
    found: dict[tuple[str, str, int], Found] = {(s.job, s.actor, s.rank): s for s in table.sessions.values()}
    for peer in table.peers.values():
        for entry in peer.present:
            found.setdefault(entry[:3], (peer, entry))
    for peer in table.branches():
        for row in peer.below:
            found.setdefault((row.job, row.actor, row.rank), row)
    for key in table.departed:
        found.setdefault(key, None)
    for key in sorted(found):
        yield row_of(table, key, found[key])


def row_of(table: Table, key: tuple[str, str, int], what: Found) -> wire.SessionRow:
    """The row of a rank, from what `all_rows` found for it."""
    if isinstance(what, Session):
        return what.row()
    if isinstance(what, wire.SessionRow):
        return what
    if what is None:
        coords, host, pid, state, instance = table.departed[key]
        return rank_row(*key, coords, host, pid, state, instance)
    peer, (_, _, _, dims, values, instance) = what
    return rank_row(*key, dict(zip(dims, values)), peer.host, peer.pid, running_state(table, key), instance)
