"""What the broker knows: connected peers and the debug sessions their ranks hold open.

Plain data and lookups; no sockets here, so the rules can be read in one place.
"""

from __future__ import annotations

import secrets
from collections import Counter, OrderedDict
from sys import intern
from dataclasses import dataclass, field

from monarch_pdb import wire


@dataclass(slots=True)
class Peer:
    """One connection: an agent (a rank process) or a shell."""

    identity: bytes
    role: str
    name: str
    host: str
    pid: int
    user: str
    last_seen: float
    link: bytes = b""
    sessions: set[int] = field(default_factory=set)
    present: list = field(default_factory=list)
    """The ranks this process runs, paused or not: (job, actor, rank, dimension names,
    coordinates, instance) tuples (no dict per rank: a big job has many)."""

    def describe(self) -> str:
        who = f"{self.user}@{self.host}" if self.user else self.host
        return f"{who} pid {self.pid}"


@dataclass(slots=True)
class Session:
    """One paused (or briefly running) thread of a rank, as the broker sees it."""

    id: int
    peer: bytes
    sid: int
    job: str
    actor: str
    rank: int
    coords: dict
    host: str
    pid: int
    instance: str = ""
    function: str = ""
    filename: str = ""
    lineno: int = 0
    prompt: str = ""
    reason: str = ""
    exc: str = ""
    paused: bool = False
    resumed: bool = False
    cmd: int = 0
    cast: int = 0
    queued: tuple[tuple[int, str], ...] = ()
    """Lines of other shells' casts waiting for this session's current one (rarely any)."""
    fresh: bool = True
    released: bool = False
    holder: bytes | None = None
    log: list[tuple[int, str]] = field(default_factory=list)
    log_size: int = 0
    out_seq: int = 0
    input_seq: int = 0
    dropped: int = 0

    def printed(self, text: str, limit: int) -> int:
        """Number and keep a chunk of output, holding at most `limit` characters in all: the
        oldest goes first, and a replay says how much of it was printed since the last input."""
        self.out_seq += 1
        self.log.append((self.out_seq, text))
        self.log_size += len(text)
        while self.log_size > limit:
            seq, first = self.log[0]
            cut = min(len(first), self.log_size - limit)
            if cut == len(first):
                self.log.pop(0)
            else:
                self.log[0] = (seq, first[cut:])
            self.log_size -= cut
            if seq > self.input_seq:
                self.dropped += cut
        return self.out_seq

    def output_since(self, seq: int) -> list[list]:
        return [[n, text] for n, text in self.log if n > seq]

    def replay(self) -> str:
        """What the session printed since the last line sent to it."""
        note = f"*** {self.dropped} earlier characters not kept (MONARCH_PDB_SESSION_HISTORY)\n" if self.dropped else ""
        since = len(self.log)
        while since and self.log[since - 1][0] > self.input_seq:
            since -= 1
        return note + "".join(text for _, text in self.log[since:])

    def forget_output(self) -> None:
        self.input_seq = self.out_seq
        self.dropped = 0

    def row(self) -> dict:
        return rank_row(self.job, self.actor, self.rank, self.coords, self.host, self.pid,
                        self.reason if self.paused else "running", self.instance,
                        self.function, self.filename, self.lineno)


def rank_row(job: str, actor: str, rank: int, coords: dict, host: str, pid: int, state: str, instance: str,
             function: str = "", filename: str = "", lineno: int = 0) -> dict:
    """A row of `list` (the keys of wire.SESSION_ROW_KEYS); a rank without a session stands nowhere."""
    return {"job": job, "actor": actor, "rank": rank, "coords": coords, "host": host, "pid": pid,
            "function": function, "filename": filename, "lineno": lineno, "state": state, "instance": instance}


DEPARTED_KEPT = 65536
"""Ranks of processes that are gone, remembered for `list --all` and `mesh` (the latest ones)."""


@dataclass(slots=True)
class LiveRank:
    """A rank some connected process runs, paused or not."""

    peer: bytes
    job: str
    actor: str
    rank: int
    coords: dict


class LookupFailed(Exception):
    """An attach or cast named something that is not there; the text is the user's line."""


@dataclass
class Registry:
    """Every session of every peer. Names that thousands of sessions share (job, actor, host,
    function, file, coordinate names) are interned: one copy each, not one per session."""

    history_limit: int = 1024 * 1024
    peers: dict[bytes, Peer] = field(default_factory=dict)
    sessions: dict[int, Session] = field(default_factory=dict)
    by_agent: dict[tuple[bytes, int], int] = field(default_factory=dict)
    by_key: dict[tuple[str, str, int], int] = field(default_factory=dict)
    by_link: dict[bytes, bytes] = field(default_factory=dict)
    """Each link id's current connection."""
    agents_per_job: Counter = field(default_factory=Counter)
    dims: dict[tuple, tuple] = field(default_factory=dict)
    """One copy of each tuple of dimension names that present ranks use."""
    quit: set = field(default_factory=set)
    """(job, actor, rank) of running ranks whose last session ended by quitting the debugger
    (the rank's call ended with BdbQuit), until the rank stops again or is announced again."""
    departed: OrderedDict = field(default_factory=OrderedDict)
    """(job, actor, rank) of ranks whose process is gone: (coords, host, pid, "lost" or "finished", instance)."""
    next_id: int = field(default_factory=lambda: secrets.randbits(40))
    """Session ids start at random, so an id from a broker before a restart never names a
    session of this one."""

    def add_peer(self, peer: Peer) -> None:
        """Know a peer that said hello. An agent whose link had another socket, not yet declared
        lost, takes over that connection's sessions."""
        self.peers[peer.identity] = peer
        if peer.role != "agent":
            return
        self.agents_per_job[peer.name] += 1
        if not peer.link:
            return
        old = self.by_link.get(peer.link)
        self.by_link[peer.link] = peer.identity
        if old is not None and old != peer.identity and old in self.peers:
            self.adopt(old, peer.identity)

    def has_job(self, name: str) -> bool:
        return self.agents_per_job[name] > 0

    def prompt(self, peer: bytes, msg: wire.Prompt) -> tuple[Session | None, bool]:
        """Record a session waiting for input; the flag says the stop is news for every shell:
        a first stop, a stop after a top-level continue, or the start of post-mortem. None for
        a prompt we already have, or one that an input we sent since will answer: an agent
        sends what it waits with again after each handshake."""
        sess = self.session_of(peer, msg.sid)
        if sess is not None and (msg.cmd < sess.cmd or (msg.cmd == sess.cmd and sess.paused)):
            return None, False
        if sess is None:
            sess = Session(
                id=self.next_id, peer=peer, sid=msg.sid, job=intern(msg.job), actor=intern(msg.actor),
                rank=msg.rank, coords={intern(k): v for k, v in msg.coords.items()}, host=intern(msg.host),
                pid=msg.pid, instance=msg.instance, cmd=msg.cmd,
            )
            self.next_id += 1
            self.sessions[sess.id] = sess
            self.by_agent[(peer, msg.sid)] = sess.id
            self.by_key[(sess.job, sess.actor, sess.rank)] = sess.id
            self.peers[peer].sessions.add(sess.id)
            self.quit.discard((sess.job, sess.actor, sess.rank))
        newly = sess.fresh or sess.released or (msg.reason == "post-mortem" and sess.reason != "post-mortem")
        sess.fresh = sess.released = False
        sess.paused = True
        sess.function, sess.filename, sess.lineno = intern(msg.function), intern(msg.filename), msg.lineno
        sess.prompt, sess.reason, sess.exc = intern(msg.prompt), intern(msg.reason), msg.exc
        return sess, newly

    def session_of(self, peer: bytes, sid: int) -> Session | None:
        sess_id = self.by_agent.get((peer, sid))
        return None if sess_id is None else self.sessions.get(sess_id)

    def remove(self, sess: Session, reason: str = "") -> None:
        """Forget a session (ended for `reason`); a rank its process runs on after quitting is
        listed as quit."""
        key = (sess.job, sess.actor, sess.rank)
        owner = self.peers.get(sess.peer)
        if reason == "quit" and owner is not None and any(p[:3] == key for p in owner.present):
            self.quit.add(key)
        self.sessions.pop(sess.id, None)
        self.by_agent.pop((sess.peer, sess.sid), None)
        if self.by_key.get(key) == sess.id:
            del self.by_key[key]
        if owner is not None:
            owner.sessions.discard(sess.id)
        holder = self.peers.get(sess.holder) if sess.holder else None
        if holder is not None:
            holder.sessions.discard(sess.id)

    def adopt(self, old: bytes, new: bytes) -> None:
        """A process that reconnected on a new socket before its old one was declared lost:
        its sessions move to the new connection instead of being listed twice."""
        previous = self._forget_peer(old)
        for sess_id in previous.sessions:
            sess = self.sessions[sess_id]
            del self.by_agent[(old, sess.sid)]
            sess.peer = new
            self.by_agent[(new, sess.sid)] = sess_id
        self.peers[new].sessions |= previous.sessions

    def _forget_peer(self, identity: bytes) -> Peer | None:
        peer = self.peers.pop(identity, None)
        if peer is not None and peer.role == "agent":
            self.agents_per_job[peer.name] -= 1
            if not self.agents_per_job[peer.name]:
                del self.agents_per_job[peer.name]
        if peer is not None and self.by_link.get(peer.link) == identity:
            del self.by_link[peer.link]
        return peer

    def drop_peer(self, identity: bytes) -> tuple[Peer | None, list[Session]]:
        """Forget a peer; return the sessions that died with it (an agent) or that it held (a shell)."""
        peer = self._forget_peer(identity)
        if peer is None:
            return None, []
        if peer.role == "shell":
            released = [self.sessions[s] for s in peer.sessions if s in self.sessions]
            for sess in released:
                sess.holder = None
            return peer, released
        gone = [self.sessions[s] for s in peer.sessions if s in self.sessions]
        for sess in gone:
            self.remove(sess)
        return peer, gone

    def actor_sessions(self, job: str, actor: str) -> list[Session]:
        """Every session of one actor in one job, with Monarch's wording when there is none."""
        found = [s for s in self.sessions.values() if s.actor == actor and (not job or s.job == job)]
        if not found:
            raise LookupFailed(f"No debug sessions for actor {actor}")
        jobs = {s.job for s in found}
        if len(jobs) > 1:
            raise LookupFailed(
                f"actor {actor} exists in {len(jobs)} jobs ({', '.join(sorted(jobs))}); name it as job:{actor}"
            )
        return found

    def find(self, job: str, actor: str, rank: int) -> Session:
        """The session of actor/rank, with Monarch's wording when there is none."""
        job = self.actor_sessions(job, actor)[0].job
        sess_id = self.by_key.get((job, actor, rank))
        if sess_id is None:
            raise LookupFailed(f"No debug session for rank {rank} for actor {actor}")
        return self.sessions[sess_id]

    def job_rows(self) -> list[dict]:
        jobs: dict[str, dict] = {}
        for peer in self.peers.values():
            if peer.role != "agent":
                continue
            row = jobs.setdefault(peer.name, {"job": peer.name, "processes": 0, "sessions": 0, "paused": 0, "hosts": []})
            row["processes"] += 1
            if peer.host not in row["hosts"]:
                row["hosts"].append(peer.host)
            for sess_id in peer.sessions:
                row["sessions"] += 1
                row["paused"] += self.sessions[sess_id].paused
        return [jobs[name] for name in sorted(jobs)]

    def rows(self) -> list[dict]:
        paused = [s for s in self.sessions.values() if s.paused]
        paused.sort(key=lambda s: (s.job, s.actor, s.rank))
        return [s.row() for s in paused]

    # --- presence: ranks known whether or not they are paused ----------------------------

    def set_present(self, identity: bytes, ranks: list, added: bool) -> None:
        """What a process says it runs (`added`: besides what it said before); malformed
        entries are skipped."""
        present = []
        for item in ranks:
            if not (isinstance(item, list) and len(item) in (4, 5) and isinstance(item[0], str)
                    and isinstance(item[1], str) and isinstance(item[2], int) and not isinstance(item[2], bool)
                    and isinstance(item[3], dict)
                    and all(isinstance(k, str) and isinstance(v, int) for k, v in item[3].items())
                    and (len(item) == 4 or isinstance(item[4], str))):
                continue
            job, actor, rank = intern(item[0]), intern(item[1]), item[2]
            dims = tuple(intern(k) for k in item[3])
            instance = item[4] if len(item) == 5 else ""
            present.append((job, actor, rank, self.dims.setdefault(dims, dims), tuple(item[3].values()), instance))
            self.departed.pop((job, actor, rank), None)
            self.quit.discard((job, actor, rank))
        peer = self.peers[identity]
        if added:
            known = {p[:3] for p in peer.present}
            peer.present.extend(p for p in present if p[:3] not in known)
        else:
            peer.present = present

    def depart(self, peer: Peer, state: str) -> None:
        """A process is gone: its ranks stay listed as `lost` or `finished`."""
        for job, actor, rank, dims, values, instance in peer.present:
            self.departed[(job, actor, rank)] = (dict(zip(dims, values)), peer.host, peer.pid, state, instance)
            self.departed.move_to_end((job, actor, rank))
            self.quit.discard((job, actor, rank))
        while len(self.departed) > DEPARTED_KEPT:
            self.departed.popitem(last=False)

    def live_ranks(self, job: str, actor: str) -> list[LiveRank]:
        """Every rank of one actor that a connected process runs (or holds a session of), in
        rank order."""
        found: dict[tuple[str, int], LiveRank] = {}
        for peer in self.peers.values():
            for j, a, rank, dims, values, _ in peer.present:
                if a == actor and (not job or j == job):
                    found[(j, rank)] = LiveRank(peer.identity, j, a, rank, dict(zip(dims, values)))
        for sess in self.sessions.values():
            if sess.actor == actor and (not job or sess.job == job) and (sess.job, sess.rank) not in found:
                found[(sess.job, sess.rank)] = LiveRank(sess.peer, sess.job, sess.actor, sess.rank, sess.coords)
        if not found:
            raise LookupFailed(f"No running rank of actor {actor} is known to the broker")
        jobs = {j for j, _ in found}
        if len(jobs) > 1:
            raise LookupFailed(
                f"actor {actor} exists in {len(jobs)} jobs ({', '.join(sorted(jobs))}); name it as job:{actor}"
            )
        return sorted(found.values(), key=lambda r: r.rank)

    def without_session(self, job: str, actor: str, wanted: list[int]) -> list[list]:
        """[rank, why] for each of `wanted` that has no session: it runs, its process is gone
        (lost or finished), or the broker never heard of it."""
        running = {rank for peer in self.peers.values() for j, a, rank, *_ in peer.present if j == job and a == actor}
        found = []
        for rank in wanted:
            gone = self.departed.get((job, actor, rank))
            found.append([rank, self.running_state((job, actor, rank)) if rank in running
                          else gone[3] if gone else "no such rank is known"])
        return found

    def running_state(self, key: tuple[str, str, int]) -> str:
        """The state of a rank its process runs, without a session."""
        return "quit" if key in self.quit else "running"

    def all_rows(self) -> list[dict]:
        """`list --all`: every session, every rank running without one, and ranks whose
        process is gone."""
        rows = {(s.job, s.actor, s.rank): s.row() for s in self.sessions.values()}
        for peer in self.peers.values():
            for job, actor, rank, dims, values, instance in peer.present:
                if (job, actor, rank) not in rows:
                    rows[(job, actor, rank)] = rank_row(job, actor, rank, dict(zip(dims, values)), peer.host,
                                                        peer.pid, self.running_state((job, actor, rank)), instance)
        for (job, actor, rank), (coords, host, pid, state, instance) in self.departed.items():
            if (job, actor, rank) not in rows:
                rows[(job, actor, rank)] = rank_row(job, actor, rank, coords, host, pid, state, instance)
        return [rows[key] for key in sorted(rows)]
