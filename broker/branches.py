"""What a broker below tells of its ranks (sessions, ranks without one, ends, output, answers
to an attach), and what becomes of them when it stops answering or is gone."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from monarch_pdb import wire
from monarch_pdb.broker.entries import LIVE
from monarch_pdb.broker.log import log
from monarch_pdb.broker.requests import unreachable_because
from monarch_pdb.broker.routes import Routes
from monarch_pdb.ranks import counted

if TYPE_CHECKING:
    from monarch_pdb.broker.entries import Peer, Session
    from monarch_pdb.broker.events import EventLog
    from monarch_pdb.broker.requests import Requests
    from monarch_pdb.broker.sessions import Sessions


def ranks_below(branch: Peer, sessions: list[Session] | None = None) -> int:
    """The live ranks of a broker below: those of its sessions (or of `sessions`, once it is
    gone), and those it runs without one, each once (a rank that just stopped may be in both
    until the broker below says it has a session now)."""
    held = branch.owned.values() if sessions is None else sessions
    return len(
        {(s.job, s.actor, s.rank) for s in held}
        | {(row.job, row.actor, row.rank) for row in branch.below if row.state in LIVE}
    )


def ignore(branch: bytes, msg: wire.Message) -> None:
    """An answer that needs no reading: the broker below did what it was told."""


class Branches:
    def __init__(
        self, requests: Requests, sessions: Sessions, events: EventLog, started: Callable[[bytes], None]
    ) -> None:
        """`started` asks a broker below that said which ranks it runs what stands for them
        (`Breakpoints.started`)."""
        self.registry = requests.registry
        self.requests = requests
        self.send = requests.send
        self.sessions = sessions
        self.attaching = sessions.attaching
        self.events = events
        self.started = started

    def routes(self) -> Routes:
        return Routes(
            branch={
                wire.BranchSessions: self.on_branch_sessions,
                wire.BranchRanks: self.on_branch_ranks,
                wire.BranchEnded: self.on_branch_ended,
                wire.BranchLost: self.on_branch_lost,
                wire.BranchOutput: self.on_branch_output,
                wire.Attached: self.on_attached,
                wire.Error: self.on_error,
                wire.SessionOutput: self.on_session_output,
                wire.SessionEnded: self.on_session_ended,
                wire.Continued: ignore,
                wire.Detached: ignore,
            }
        )

    # --- its life ------------------------------------------------------------------------

    def joined(self, branch: bytes, host: str, pid: int) -> None:
        self.attaching[branch] = deque()
        self.events.add_broker(wire.EventKind.BROKER_JOINED, host, 0)
        log(f"a broker below joined from {host} (pid {pid})")

    def back(self, peer: Peer) -> None:
        """A broker below that was silent answers again, its sessions and ranks as they were."""
        self.events.add_broker(wire.EventKind.BROKER_BACK, peer.host, ranks_below(peer))
        log(f"the broker below on {peer.host} (pid {peer.pid}) answers again")

    def unreachable(self, peer: Peer) -> None:
        """A broker below does not answer: one event that names its host, and nothing waits
        for it; its sessions stay, held as they were, and lines sent to them wait for it."""
        peer.silent = True
        self.requests.lost(peer.identity, unreachable_because(peer.host))
        count = ranks_below(peer)
        self.events.add_broker(wire.EventKind.BROKER_SILENT, peer.host, count)
        are = "is" if count == 1 else "are"
        log(
            f"the broker below on {peer.host} (pid {peer.pid}) does not answer; "
            f"its {counted(count, 'rank')} {are} unreachable"
        )

    def lost(self, peer: Peer, reason: wire.Ending, ended: list[Session]) -> None:
        """A broker below is gone: its ranks are lost, in one event that names its host, and
        nothing waits for it any more."""
        host = peer.host
        for sess in ended:
            if sess.holder is not None:
                self.send(sess.holder, wire.SessionEnded(session=sess.id, text="", reason=wire.Ending.LOST))
            self.sessions.upstream.ended(sess, "", wire.Ending.LOST)
        self.requests.lost(peer.identity, f"lost with the broker on {host}")
        self.attaching.pop(peer.identity, None)
        ranks_lost = ranks_below(peer, ended)
        stopped = "stopped answering" if reason == wire.Ending.LOST else "shut down"
        self.events.add_broker(wire.EventKind.BROKER_LOST, host, ranks_lost, stopped)
        log(f"the broker below on {host} (pid {peer.pid}) {stopped}; {counted(ranks_lost, 'rank')} lost with it")
        self.sessions.below_changed()

    # --- what it tells -------------------------------------------------------------------

    def on_branch_sessions(self, branch: bytes, msg: wire.BranchSessions) -> None:
        for item in msg.sessions:
            known = self.registry.table.session_of(branch, item.id) is not None
            if not known:
                self.forget_moved(item.row)
            sess = self.registry.table.mirror(branch, item)
            if item.news and sess.paused:
                self.sessions.publish(wire.EventKind(sess.reason), sess, item.detail)
            self.sessions.touched(sess, item.news, new=not known)
        self.sessions.name_twins()

    def forget_moved(self, row: wire.SessionRow) -> None:
        """A broker below tells of a rank that another session below still stands for in the
        same process: the rank moved (its host broker was replaced before the old one was
        declared lost). The old session is forgotten without an event, and a shell attached to
        it attaches again. Another process's is the rank started twice (`Registry._stand`)."""
        old = self.registry.table.session_for(row.job, row.actor, row.rank)
        if old is None or not self.registry.table.is_branch(old.peer) or (old.host, old.pid) != (row.host, row.pid):
            return
        if old.holder is not None:
            self.send(old.holder, wire.SessionEnded(session=old.id, text="", reason=wire.Ending.UNKNOWN))
        self.sessions.upstream.forget(old)
        self.registry.table.end(old, wire.Ending.RECONNECTED)

    def on_branch_ranks(self, branch: bytes, msg: wire.BranchRanks) -> None:
        self.registry.table.set_below(branch, msg.rows, msg.jobs, msg.added)
        self.started(branch)
        self.sessions.below_changed()

    def on_branch_ended(self, branch: bytes, msg: wire.BranchEnded) -> None:
        sess = self.registry.table.session_of(branch, msg.id)
        if sess is not None:
            self.sessions.end(sess, msg.output, msg.reason)

    def on_branch_lost(self, branch: bytes, msg: wire.BranchLost) -> None:
        self.sessions.announce_lost(msg.job, msg.actor, msg.ranks)

    def on_branch_output(self, branch: bytes, msg: wire.BranchOutput) -> None:
        sess = self.registry.table.session_of(branch, msg.id)
        if sess is not None:
            self.sessions.record_output(sess, msg.text)

    def on_attached(self, branch: bytes, msg: wire.Attached) -> None:
        """A broker below holds a session for one of our shells now: that shell is attached."""
        waiting = self.attaching.get(branch)
        if not waiting:
            return
        shell, sess_id, taken_from = waiting.popleft()
        sess = self.registry.table.session_of(branch, msg.session)
        if sess is None or sess.id != sess_id or sess.holder != shell:
            self.send(branch, wire.Detach(session=msg.session))
            return
        self.send(
            shell,
            wire.Attached(
                session=sess.id,
                job=sess.job,
                actor=sess.actor,
                rank=sess.rank,
                host=sess.host,
                replay=msg.replay,
                resumed=msg.resumed,
                paused=msg.paused,
                prompt=msg.prompt,
                taken_from=taken_from or msg.taken_from,
            ),
        )

    def on_error(self, branch: bytes, msg: wire.Error) -> None:
        """A broker below refused an attach (the session ended meanwhile): tell the shell."""
        waiting = self.attaching.get(branch)
        if waiting:
            shell, sess_id, _ = waiting.popleft()
            self.registry.table.release(shell, sess_id)
            self.send(shell, msg)

    def on_session_output(self, branch: bytes, msg: wire.SessionOutput) -> None:
        sess = self.registry.table.session_of(branch, msg.session)
        if sess is not None:
            self.sessions.to_holder(
                sess, wire.SessionOutput(session=sess.id, text=msg.text, paused=msg.paused, prompt=msg.prompt)
            )

    def on_session_ended(self, branch: bytes, msg: wire.SessionEnded) -> None:
        """A session taken from us below (attach --force there): our shell holds it no more.
        A session that ended is told by `BranchEnded`."""
        sess = self.registry.table.session_of(branch, msg.session)
        if sess is not None and sess.holder is not None and msg.reason in (wire.Ending.TAKEN, wire.Ending.UNKNOWN):
            holder = sess.holder
            self.registry.table.release(holder, sess.id)
            self.send(holder, wire.SessionEnded(session=sess.id, text=msg.text, reason=msg.reason, by=msg.by))
