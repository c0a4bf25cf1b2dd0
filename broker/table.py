"""The broker's table and its rules: the connected peers, the debug sessions their ranks hold
open, which shell holds each session, and the ranks that come and go.

Plain data and the verbs that change it; no sockets here, so the rules can be read (and
tested) in one place. The server receives, asks the registry, and sends what it is told;
finding sessions and ranks by name or selector is `broker/registry.py`'s, over this table.
"""

from __future__ import annotations

import secrets
import socket
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from sys import intern

from monarch_pdb import wire
from monarch_pdb.broker.entries import (
    CALL_ENDED,
    NO_OUTPUT,
    STOPS,
    CannotServe,
    Departure,
    KeptOutput,
    Peer,
    Session,
    State,
    process_gone,
)


@dataclass
class Table:
    """Every peer and every session. Names that thousands of sessions share (job, actor, host,
    function, file, coordinate names) are interned: one copy each, not one per session."""

    history_limit: int = 1024 * 1024
    """Characters of output kept per session."""
    sessions_per_connection: int = 65536
    departed_kept: int = 65536
    """Ranks of processes that are gone, remembered for `list --all` and `mesh` (the latest ones)."""
    host: str = field(default_factory=socket.gethostname)
    """This host: a peer here whose process is gone is gone, whatever its connection says."""
    peers: dict[bytes, Peer] = field(default_factory=dict)
    brokers: dict[bytes, Peer] = field(default_factory=dict)
    """Those peers that are brokers (below, and the parent): the only ones judged by silence."""
    sessions: dict[int, Session] = field(default_factory=dict)
    by_rank: dict[tuple[str, str], dict[int, Session]] = field(default_factory=dict)
    """The session each rank stands in, under its job and actor: one key per actor, not a
    (job, actor, rank) tuple per session."""
    by_link: dict[bytes, bytes] = field(default_factory=dict)
    """Each link id's current connection."""
    processes_per_job: Counter = field(default_factory=Counter)
    dims: dict[tuple, tuple] = field(default_factory=dict)
    """One copy of each tuple of dimension names that sessions and present ranks use."""
    ended: dict = field(default_factory=dict)
    """(job, actor, rank) of ranks whose process runs on after their last session ended with
    their call: `finished` (it returned or raised), or `quit` (it ended with BdbQuit, by pdb's
    `q`); until the rank stops again or is announced again, as its next call starts."""
    departed: OrderedDict = field(default_factory=OrderedDict)
    """(job, actor, rank) of ranks whose process is gone: (coords, host, pid, lost or finished, instance)."""
    shadowed: dict[tuple[str, str, int], Session] = field(default_factory=dict)
    """A session whose rank another process's session took (the rank started twice, the first
    still running): listed still, and standing for its rank again if the other ends first."""
    twins: list[tuple[Session, Session]] = field(default_factory=list)
    """(the session that stood for a rank, the other process's that took it), to be named."""
    thread_sessions: int = 0
    """How many sessions are of threads other than their ranks' (`wire.is_thread`): a selector
    looks for them among thousands of sessions only when there are some."""
    twins_named: set = field(default_factory=set)
    """(job, actor, rank) of the ranks named as run twice: each is named once."""
    found_gone: list[bytes] = field(default_factory=list)
    """Processes of this host found gone (`dead_jobs`) and not yet declared lost."""
    next_id: int = field(default_factory=lambda: secrets.randbits(40))
    """Session ids start at random, so an id from a broker before a restart never names a
    session of this one."""

    # --- peers ---------------------------------------------------------------------------

    def peer(self, identity: bytes) -> Peer | None:
        return self.peers.get(identity)

    def heard(self, identity: bytes, now: float) -> Peer | None:
        """A message came from `identity`: the peer, its silence over; None for a stranger."""
        peer = self.peers.get(identity)
        if peer is not None:
            peer.last_seen = now
        return peer

    def knows(self, identity: bytes, role: str, link: bytes) -> bool:
        """A hello said again on a known connection is the same peer (one that stopped hearing
        us says it until we answer); a different role or link there is a new one."""
        known = self.peers.get(identity)
        return known is not None and (known.role, known.link) == (role, link)

    def join(self, peer: Peer) -> bool:
        """Know a peer that said hello; True when it is the first process of its job. A rank process
        whose link had another socket, not yet declared lost, takes over that connection's
        sessions."""
        self.peers[peer.identity] = peer
        if peer.role in (wire.Role.BROKER, wire.Role.PARENT):
            self.brokers[peer.identity] = peer
        if peer.role != wire.Role.RANK:
            return False
        first = not self.has_job(peer.name)
        self.processes_per_job[peer.name] += 1
        if peer.link:
            old = self.by_link.get(peer.link)
            self.by_link[peer.link] = peer.identity
            if old is not None and old != peer.identity and old in self.peers:
                self._adopt(old, peer.identity)
        return first

    def has_job(self, name: str) -> bool:
        return self.processes_per_job[name] > 0

    def connected(self) -> bool:
        """Whether any rank, shell or broker below is connected (the parent does not count)."""
        return any(peer.role != wire.Role.PARENT for peer in self.peers.values())

    def silent(self, now: float, limit: float, since: float) -> list[bytes]:
        """The brokers (below, and the parent) not heard from for `limit` seconds, counted from
        `since` at the earliest (when the broker last came back from a pause: their messages
        waited unread), but those already known to be silent. Ranks and shells beat in libzmq,
        not in Python: their silence says nothing, and they are not looked at."""
        return [
            identity
            for identity, peer in self.brokers.items()
            if not peer.silent and now - max(peer.last_seen, since) > limit
        ]

    def _adopt(self, old: bytes, new: bytes) -> None:
        """A process that reconnected on a new socket before its old one was declared lost:
        its sessions move to the new connection instead of being listed twice."""
        previous = self._forget_peer(old)
        assert previous is not None
        for sess in previous.owned.values():
            sess.peer = new
        self.peers[new].owned.update(previous.owned)

    def _forget_peer(self, identity: bytes) -> Peer | None:
        peer = self.peers.pop(identity, None)
        self.brokers.pop(identity, None)
        if peer is not None and peer.role == wire.Role.RANK:
            self.processes_per_job[peer.name] -= 1
            if not self.processes_per_job[peer.name]:
                del self.processes_per_job[peer.name]
        if peer is not None and self.by_link.get(peer.link) == identity:
            del self.by_link[peer.link]
        return peer

    def leave(self, identity: bytes, reason: wire.Ending) -> Departure | None:
        """Forget a peer that is gone for `reason` (lost, returned, reconnected). A shell's
        sessions are free again; a rank process's are over, and the ranks it ran stay listed as lost
        or finished, unless it only reconnected."""
        peer = self._forget_peer(identity)
        if peer is None:
            return None
        if peer.role in (wire.Role.SHELL, wire.Role.PARENT):
            freed = [self.sessions[s] for s in peer.held if s in self.sessions]
            for sess in freed:
                sess.holder, sess.attached = None, ""
            return Departure(peer, freed=freed)
        ended = list(peer.owned.values())
        if peer.role == wire.Role.BROKER:
            # Its ranks run on, out of reach: lost, whether it stopped answering or shut down.
            peer.below += [s.row() for s in ended]
            self._depart(peer, wire.RankState.LOST)
        for sess in ended:
            self.end(sess, reason)
        if peer.role == wire.Role.RANK and reason != wire.Ending.RECONNECTED:
            self._depart(peer, wire.RankState.LOST if reason == wire.Ending.LOST else wire.RankState.FINISHED, ended)
        return Departure(peer, ended=ended, job_left=peer.role == wire.Role.RANK and not self.has_job(peer.name))

    # --- sessions ------------------------------------------------------------------------

    def prompt(self, peer: bytes, msg: wire.Prompt) -> tuple[Session | None, bool]:
        """Record a session waiting for input; the flag says the stop is news for every shell:
        a first stop, a stop after a top-level continue, or the start of post-mortem. A stop an
        rank process tells again (a broker before this one heard it) is news only of a rank this broker
        took for gone. None for a prompt we already have, or one that an input we sent since
        will answer: a rank process sends what it waits with again after each handshake. CannotServe
        past the sessions one connection may have."""
        sess = self.session_of(peer, msg.sid)
        if sess is not None and (msg.cmd < sess.cmd or (msg.cmd == sess.cmd and sess.paused)):
            return None, False
        owner = self.peers[peer]
        if sess is None and len(owner.owned) >= self.sessions_per_connection:
            raise CannotServe(
                f"refused a session of {msg.actor} {msg.rank}: this process already has "
                f"{self.sessions_per_connection} (MONARCH_PDB_MAX_SESSIONS_PER_CONNECTION); "
                "it continues without stopping"
            )
        if sess is None:
            news = not msg.again or (msg.job, msg.actor, msg.rank) in self.departed
            sess = self._open(peer, msg.sid, msg, KeptOutput(self.history_limit), cmd=msg.cmd)
        else:
            news = sess.state is State.RELEASED or (
                msg.reason == wire.Stop.POST_MORTEM and sess.reason != wire.Stop.POST_MORTEM
            )
        sess.state = State.STOPPED if sess.state is State.STOPPED else State.PAUSED
        self._place(sess, msg)
        sess.prompt, sess.reason = intern(msg.prompt), msg.reason
        if news:
            sess.detail = msg.exc
        return sess, news

    def mirror(self, branch: bytes, item: wire.BranchSession) -> Session:
        """Record a session of a broker below, new or changed where it stands. Its output
        stays below; the log here fills only while some shell follows ranks."""
        row = item.row
        sess = self.session_of(branch, item.id)
        stopped = row.state in STOPS
        if sess is None:
            sess = self._open(branch, item.id, row, NO_OUTPUT, state=State.STOPPED if stopped else State.RUNNING)
        elif stopped:
            sess.state = State.STOPPED if item.news else State.PAUSED
        else:
            sess.state = State.RUNNING
        self._place(sess, row)
        sess.prompt = intern(item.prompt)
        if stopped:
            sess.reason = wire.Stop(row.state)
        if item.news:
            sess.detail = item.detail
        return sess

    def _open(
        self,
        peer: bytes,
        sid: int,
        rank: wire.Prompt | wire.SessionRow,
        log: KeptOutput,
        state: State = State.STOPPED,
        cmd: int = 0,
    ) -> Session:
        """A new session of `peer` (its number `sid` there) for the rank a stop or a row from
        below names."""
        sess = Session(
            id=self.next_id,
            peer=peer,
            sid=sid,
            job=intern(rank.job),
            actor=intern(rank.actor),
            rank=rank.rank,
            dims=self.dims_of(rank.coords),
            values=tuple(rank.coords.values()),
            host=intern(rank.host),
            pid=rank.pid,
            log=log,
            instance=rank.instance,
            state=state,
            cmd=cmd,
        )
        self.next_id += 1
        self.sessions[sess.id] = sess
        self._stand(sess)
        self.peers[peer].owned[sid] = sess
        self.ended.pop((sess.job, sess.actor, sess.rank), None)
        return sess

    @staticmethod
    def _place(sess: Session, rank: wire.RankRef) -> None:
        """Where a session stands now, as its rank's latest record says."""
        sess.function, sess.filename, sess.lineno = intern(rank.function), intern(rank.filename), rank.lineno

    def _stand(self, sess: Session) -> None:
        """A new session stands for its rank (and is counted, if a thread's). Another process's
        that stood for it (the rank started again, elsewhere, while the first runs on) stays
        listed, and is named once."""
        self.thread_sessions += wire.is_thread(sess.instance)
        ranks_of = self.by_rank.setdefault((sess.job, sess.actor), {})
        other = ranks_of.get(sess.rank)
        ranks_of[sess.rank] = sess
        if other is None or (other.host, other.pid) == (sess.host, sess.pid) or self.gone(other):
            return
        key = (sess.job, sess.actor, sess.rank)
        self.shadowed[key] = other
        if key not in self.twins_named:
            self.twins_named.add(key)
            self.twins.append((other, sess))

    def gone(self, sess: Session) -> bool:
        """Whether a session's process is gone from this host (restarted, not yet found silent)."""
        return sess.host == self.host and process_gone(sess.pid)

    def take_twins(self) -> list[tuple[Session, Session]]:
        """The ranks found run by two processes since last asked, each (first, second)."""
        twins, self.twins = self.twins, []
        return twins

    def output_log(self, sess: Session) -> KeptOutput:
        """A session's log to add to: one below has none until it first prints up here."""
        if sess.log is NO_OUTPUT:
            sess.log = KeptOutput(self.history_limit)
        return sess.log

    def set_below(self, branch: bytes, rows: list[wire.SessionRow], jobs: list[wire.JobRow], added: bool) -> None:
        """What a broker below says it has besides its sessions: ranks and jobs (`added`:
        ranks besides those it said last)."""
        for row in rows:
            row.job, row.actor, row.host = intern(row.job), intern(row.actor), intern(row.host)
            row.coords = {intern(k): v for k, v in row.coords.items()}
        peer = self.peers[branch]
        peer.below = peer.below + rows if added else rows
        peer.jobs = jobs

    def branches(self) -> list[Peer]:
        return [peer for peer in self.brokers.values() if peer.role == wire.Role.BROKER]

    def is_branch(self, identity: bytes) -> bool:
        peer = self.peers.get(identity)
        return peer is not None and peer.role == wire.Role.BROKER

    def session_of(self, peer: bytes, sid: int) -> Session | None:
        """A session by its rank process's own number for it."""
        owner = self.peers.get(peer)
        return None if owner is None else owner.owned.get(sid)

    def session_for(self, job: str, actor: str, rank: int) -> Session | None:
        """The session a rank stands in, if any."""
        ranks_of = self.by_rank.get((job, actor))
        return None if ranks_of is None else ranks_of.get(rank)

    def session_at(self, session_id: int) -> Session | None:
        """A session by the broker's number for it, as shells name it."""
        return self.sessions.get(session_id)

    def is_paused(self, job: str, actor: str, rank: int) -> bool:
        sess = self.session_for(job, actor, rank)
        return sess is not None and sess.paused

    def paused(self, job: str = "") -> list[Session]:
        """Every paused session (of one job, if named), but those of a job found dead where
        another job has an actor of the same name (`dead_jobs`): `wait` counts the live one's."""
        stopped, paused = State.STOPPED, State.PAUSED  # compared inline: 1,048,576 at the root of a tree
        found = [
            s for s in self.sessions.values() if (s.state is stopped or s.state is paused) and (not job or s.job == job)
        ]
        dead = self.dead_jobs(self.shared_jobs())
        return [s for s in found if s.job not in dead] if dead else found

    def shared_jobs(self) -> set[str]:
        """The jobs with sessions of an actor that another job has sessions of too."""
        jobs_of: dict[str, set[str]] = {}
        for job, actor in self.by_rank:
            jobs_of.setdefault(actor, set()).add(job)
        return {job for jobs in jobs_of.values() if len(jobs) > 1 for job in jobs}

    def end(self, sess: Session, reason: str = "") -> None:
        """Forget a session (over for `reason`). A rank whose call ended with it, and whose
        process runs on, is listed as finished (or quit) until its next call; one continued
        out of the debugger runs on, and is listed as running."""
        key = (sess.job, sess.actor, sess.rank)
        owner = self.peers.get(sess.peer)
        if reason != wire.Ending.CONTINUED and owner is not None and any(p[:3] == key for p in owner.present):
            self.ended[key] = wire.RankState.QUIT if reason == wire.Ending.QUIT else wire.RankState.FINISHED
        if self.sessions.pop(sess.id, None) is not None:
            self.thread_sessions -= wire.is_thread(sess.instance)
        ranks_of = self.by_rank.get((sess.job, sess.actor), {})
        shadow = self.shadowed.pop(key, None)
        if shadow is not None and shadow is not sess and shadow.id in self.sessions:
            if ranks_of.get(sess.rank) is sess:
                ranks_of[sess.rank] = shadow
            else:
                self.shadowed[key] = shadow
        elif ranks_of.get(sess.rank) is sess:
            del ranks_of[sess.rank]
            if not ranks_of:
                del self.by_rank[(sess.job, sess.actor)]
        if owner is not None:
            owner.owned.pop(sess.sid, None)
        holder = self.peers.get(sess.holder) if sess.holder else None
        if holder is not None:
            holder.held.discard(sess.id)

    # --- who holds a session -------------------------------------------------------------

    def hold(self, shell: bytes, sess: Session, force: bool = False) -> Peer | None:
        """`shell` holds `sess` from now on; the shell it was taken from (with `force`), to be
        told. CannotServe while another shell holds it. A holder on this host whose process is gone
        (killed, its connection not yet timed out) holds nothing."""
        holder = self.peers.get(sess.holder) if sess.holder not in (None, shell) else None
        if holder is not None and holder.host == self.host and process_gone(holder.pid):
            holder.held.discard(sess.id)
            holder = None
        if holder is not None and not force:
            raise CannotServe(
                f"{sess.actor} {sess.rank} is attached in {holder.attached_in()}; use 'attach --force' to take it over"
            )
        if holder is not None:
            holder.held.discard(sess.id)
            sess.watcher = holder.identity if holder.name == wire.Client.EDITOR else None
        sess.holder = shell
        kind = self.peers[shell].name
        sess.attached = kind if kind in (wire.Client.EDITOR, wire.Client.AGENT) else wire.Client.SHELL
        self.peers[shell].held.add(sess.id)
        return holder

    def release(self, shell: bytes, session_id: int) -> None:
        """`shell` holds the session no more (if it held it)."""
        sess = self.sessions.get(session_id)
        if sess is not None and sess.holder == shell:
            sess.holder, sess.attached = None, ""
            self.peers[shell].held.discard(session_id)

    def held(self, shell: bytes, session_id: int) -> Session | None:
        """The session, if `shell` holds it."""
        sess = self.sessions.get(session_id)
        return sess if sess is not None and sess.holder == shell else None

    # --- jobs whose processes are gone, and what `list` and `jobs` show -------------------

    def dead_jobs(self, jobs: set[str]) -> set[str]:
        """Those of `jobs` whose every process ran on this host and is gone; their processes
        wait in `found_gone` for the broker to declare them lost."""
        if not jobs:
            return set()
        processes: dict[str, list[Peer]] = {}
        for peer in self.peers.values():
            if peer.role == wire.Role.RANK and peer.name in jobs:
                processes.setdefault(peer.name, []).append(peer)
        dead = {
            job
            for job, peers in processes.items()
            if all(peer.host == self.host and process_gone(peer.pid) for peer in peers)
        }
        self.found_gone += [peer.identity for job in dead for peer in processes[job]]
        return dead

    def take_found_gone(self) -> list[bytes]:
        """The processes found gone while names were looked up, to be declared lost."""
        found, self.found_gone = self.found_gone, []
        return found

    # --- presence: ranks known whether or not they are paused ----------------------------

    def set_present(self, identity: bytes, entries: list[wire.PresentRank], added: bool) -> None:
        """What a rank process says it runs (`added`: besides what it said before)."""
        peer = self.peers[identity]
        if peer.role != wire.Role.RANK:
            return
        present = []
        for item in entries:
            job, actor, rank = intern(item.job), intern(item.actor), item.rank
            present.append((job, actor, rank, self.dims_of(item.coords), tuple(item.coords.values()), item.instance))
            self.departed.pop((job, actor, rank), None)
            if item.state in CALL_ENDED:
                self.ended[(job, actor, rank)] = wire.RankState(item.state)
            else:
                self.ended.pop((job, actor, rank), None)
        if added:
            known = {p[:3] for p in peer.present}
            peer.present.extend(p for p in present if p[:3] not in known)
        else:
            peer.present = present

    def dims_of(self, coords: dict[str, int]) -> tuple[str, ...]:
        """The names of `coords`, as the one tuple of them that sessions and ranks share."""
        dims = tuple(intern(k) for k in coords)
        return self.dims.setdefault(dims, dims)

    def _depart(self, peer: Peer, state: wire.RankState, sessions: Sequence[Session] = ()) -> None:
        """A process (or a broker below) is gone: its ranks stay listed as `lost` or
        `finished`, the latest ones within bounds: those it said it runs, and those it had a
        session of (a process that only stopped at a breakpoint never said it runs one)."""
        gone = [((s.job, s.actor, s.rank), (s.coords, s.host, s.pid, state, s.instance)) for s in sessions]
        gone += [
            ((job, actor, rank), (dict(zip(dims, values)), peer.host, peer.pid, state, instance))
            for job, actor, rank, dims, values, instance in peer.present
        ]
        gone += [
            (
                (row.job, row.actor, row.rank),
                (
                    row.coords,
                    row.host,
                    row.pid,
                    row.state if row.state == wire.RankState.FINISHED else state,
                    row.instance,
                ),
            )
            for row in peer.below
        ]
        for key, what in gone:
            self.departed[key] = what
            self.departed.move_to_end(key)
            self.ended.pop(key, None)
        while len(self.departed) > self.departed_kept:
            self.departed.popitem(last=False)
