"""What a shell or an editor asks of the sessions themselves (attach, a line, Tab, `continue`,
`interrupt`, following output, an editor's questions), and what the broker above asks the same
way for its own shells: it holds sessions here as a shell does."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from monarch_pdb import ranks, wire
from monarch_pdb.broker.entries import CannotServe, State
from monarch_pdb.broker.inspections import Inspections
from monarch_pdb.broker.requests import unreachable_because
from monarch_pdb.broker.routes import Routes, Table

if TYPE_CHECKING:
    from monarch_pdb.broker.audit import Audit
    from monarch_pdb.broker.entries import LiveRank, Session
    from monarch_pdb.broker.requests import Requests
    from monarch_pdb.broker.sessions import Sessions


class Shells:
    def __init__(self, requests: Requests, sessions: Sessions, audit: Audit, breakpoint_setters: set[bytes]) -> None:
        """`breakpoint_setters` are the editors that set breakpoints here (`Breakpoints.setters`)."""
        self.requests = requests
        self.registry = requests.registry
        self.send = requests.send
        self.sessions = sessions
        self.audit = audit
        self.inspections = Inspections()
        self.breakpoint_setters = breakpoint_setters

    def routes(self) -> Routes:
        holding: Table = {
            wire.Attach: self.on_attach,
            wire.Detach: self.on_detach,
            wire.Send: self.on_send,
            wire.Complete: self.on_complete,
            wire.Continue: self.on_continue,
        }
        answers: Table = {wire.Inspection: self.on_inspection, wire.Completions: self.on_inspection}
        return Routes(
            shell={
                **holding,
                wire.Follow: self.on_follow,
                wire.OutputSince: self.on_output_since,
                wire.Interrupt: self.on_interrupt,
            },
            editor={wire.Inspect: self.on_inspect},
            parent={**holding, wire.Inspect: self.on_inspect, wire.InterruptRanks: self.on_interrupt_ranks},
            rank=answers,
            branch=answers,
        )

    def reachable(self, sess: Session) -> Session:
        """`sess`, unless the broker below that has it does not answer."""
        below = self.registry.table.peer(sess.peer)
        assert below is not None
        if below.silent:
            raise CannotServe(f"{sess.actor} {sess.rank} is {unreachable_because(below.host)}")
        return sess

    def on_attach(self, shell: bytes, msg: wire.Attach) -> None:
        try:
            sess = self.reachable(self.registry.find(msg.job, msg.actor, msg.rank))
            taken_from = self.registry.table.hold(shell, sess, force=msg.force)
        except CannotServe as refusal:
            self.send(shell, wire.Error(text=str(refusal)))
            return
        if taken_from is not None:
            taker = self.registry.table.peer(shell)
            assert taker is not None
            self.send(
                taken_from.identity,
                wire.SessionEnded(session=sess.id, text="", reason=wire.Ending.TAKEN, by=taker.attached_in()),
            )
            self.sessions.publish(wire.EventKind.TAKEN, sess, taker.describe())
        self.sessions.now_held(shell, sess, taken_from.attached_in() if taken_from is not None else "")

    def on_detach(self, shell: bytes, msg: wire.Detach) -> None:
        sess = self.registry.table.held(shell, msg.session)
        if sess is not None and self.registry.table.is_branch(sess.peer):
            self.send(sess.peer, wire.Detach(session=sess.sid))
        self.registry.table.release(shell, msg.session)
        self.send(shell, wire.Detached(session=msg.session))
        if sess is not None:
            self.sessions.hand_back(sess)
        elif (watched := self.registry.table.session_at(msg.session)) is not None and watched.watcher == shell:
            watched.watcher = None

    def on_send(self, shell: bytes, msg: wire.Send) -> None:
        sess = self.registry.table.held(shell, msg.session)
        if sess is None:
            reason = wire.Ending.UNKNOWN if self.registry.table.session_at(msg.session) is None else wire.Ending.TAKEN
            self.send(shell, wire.SessionEnded(session=msg.session, text="", reason=reason))
            return
        self.audit.record(shell, sess.job, sess.actor, [sess.rank], msg.line)
        if sess.watcher is not None:
            self.send(sess.watcher, wire.Resumed(session=sess.id))
        if self.registry.table.is_branch(sess.peer):
            self.send(sess.peer, wire.Send(session=sess.sid, line=msg.line, colour=msg.colour))
        else:
            self.sessions.forward(sess, msg.line, colour=msg.colour)

    def on_complete(self, shell: bytes, msg: wire.Complete) -> None:
        """Pass a Tab at the held session's prompt to its process (or to the broker below that
        has it); the paused thread answers, and the answer comes back as an inspection's does."""
        sess = self.registry.table.held(shell, msg.session)
        if sess is None:
            self.send(shell, wire.Completions(ref=msg.ref, matches=[], error="this shell does not hold the session"))
            return
        self.send(sess.peer, replace(msg, ref=self.inspections.number(shell, msg.ref), session=sess.sid))

    def on_inspect(self, editor: bytes, msg: wire.Inspect) -> None:
        """Pass an editor's question to the paused thread of the rank, or to the broker below
        that has it (which passes it on as to a shell's); the answer comes back the same way."""
        try:
            sess = self.reachable(self.registry.find(msg.job, msg.actor, msg.rank))
        except CannotServe as refusal:
            self.send(editor, wire.Inspection(ref=msg.ref, items=[], error=str(refusal)))
            return
        ask = self.inspections.ask(editor, msg, sess.sid)
        if msg.query == wire.Query.BREAKPOINTS:
            self.breakpoint_setters.add(ask.owner)
        self.send(sess.peer, ask)

    def on_inspection(self, peer: bytes, msg: wire.Inspection | wire.Completions) -> None:
        """An answer, from a rank process or a broker below, to whoever asked."""
        if (answer := self.inspections.answered(msg)) is not None:
            self.send(*answer)

    def on_follow(self, shell: bytes, msg: wire.Follow) -> None:
        chosen, _ = self.requests.selected(shell, msg.job, msg.actor, msg.selector)
        if chosen:
            self.send(
                shell,
                wire.Following(
                    job=chosen[0].job,
                    actor=msg.actor,
                    sessions=[wire.FollowedSession(s.id, s.rank, s.log.seq) for s in chosen],
                ),
            )

    def on_output_since(self, shell: bytes, msg: wire.OutputSince) -> None:
        sess = self.registry.table.session_at(msg.session)
        self.send(shell, wire.OutputLog(session=msg.session, rows=sess.log.since(msg.since) if sess else []))

    def on_continue(self, shell: bytes, msg: wire.Continue) -> None:
        """Release every paused rank (of one job, one actor and its selector, as far as named)
        after clearing its breakpoints; each broker below releases its own, told once."""
        released: dict[tuple[str, str], list[int]] = {}
        branches = set()
        chosen = self.registry.table.paused(msg.job)
        if msg.actor:
            chosen = [sess for sess in chosen if sess.actor == msg.actor]
        if msg.selector:
            try:
                selection = ranks.parse_selector(msg.selector)
            except ranks.SelectorError as error:
                self.send(shell, wire.Error(text=str(error)))
                return
            picked = set(ranks.select(selection, ((sess.rank, sess.coords) for sess in chosen)))
            chosen = [sess for sess in chosen if sess.rank in picked]
        self.sessions.tell_holders(chosen, shell, release=True)
        for sess in chosen:
            self.sessions.publish(wire.EventKind.RESUMED, sess)
            released.setdefault((sess.job, sess.actor), []).append(sess.rank)
            if self.registry.table.is_branch(sess.peer):
                branches.add(sess.peer)
                sess.state = State.RELEASED
            else:
                self.sessions.forward(sess, "continue", release=True)
        for branch in branches:
            self.send(branch, wire.Continue(job=msg.job, actor=msg.actor, selector=msg.selector))
        by_actor: dict[str, list[int]] = {}
        for (job, actor), ranks_released in released.items():
            self.audit.record(shell, job, actor, ranks_released, "continue (top level)")
            by_actor.setdefault(actor, []).extend(ranks_released)
        self.send(shell, wire.Continued(released=[wire.Released(a, sorted(r)) for a, r in sorted(by_actor.items())]))

    def on_interrupt(self, shell: bytes, msg: wire.Interrupt) -> None:
        """Ask the processes of the selected ranks to stop them; ranks already paused are left."""
        chosen, _ = self.requests.selected(shell, msg.job, msg.actor, msg.selector, live=True)
        if chosen:
            asked = self.interrupt(shell, chosen[0].job, msg.actor, chosen)
            self.send(shell, wire.Interrupting(job=chosen[0].job, actor=msg.actor, ranks=asked))

    def on_interrupt_ranks(self, parent: bytes, msg: wire.InterruptRanks) -> None:
        chosen, _ = self.registry.pick(msg.job, msg.actor, msg.ranks, live=True)
        self.interrupt(parent, msg.job, msg.actor, chosen)

    def interrupt(self, shell: bytes, job: str, actor: str, chosen: list[LiveRank]) -> list[int]:
        """Ask each process (or broker below) to stop its chosen ranks that run; those asked."""
        by_peer: dict[bytes, list[int]] = {}
        for live in chosen:
            if not self.registry.table.is_paused(live.job, live.actor, live.rank):
                by_peer.setdefault(live.peer, []).append(live.rank)
        asked = sorted(rank for peer_ranks in by_peer.values() for rank in peer_ranks)
        self.audit.record(shell, job, actor, asked, "interrupt")
        for peer, peer_ranks in by_peer.items():
            self.send(peer, wire.InterruptRanks(actor=actor, ranks=peer_ranks, job=job))
        return asked
