"""What a rank process tells the broker of its sessions and ranks: a session that stops
(its prompt), what it prints while it runs, its end, and which ranks the process runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from monarch_pdb import wire
from monarch_pdb.broker.entries import CannotServe
from monarch_pdb.broker.routes import Routes

if TYPE_CHECKING:
    from monarch_pdb.broker.requests import Requests
    from monarch_pdb.broker.sessions import Sessions

TOO_MANY = "too many sessions on one connection"


class FromRanks:
    def __init__(
        self, requests: Requests, sessions: Sessions, refused: Callable[[str], None], started: Callable[[bytes], None]
    ) -> None:
        """`refused` counts a refusal for the log; `started` asks a process that said which
        ranks it runs what stands for them (`Breakpoints.started`)."""
        self.registry = requests.registry
        self.requests = requests
        self.send = requests.send
        self.sessions = sessions
        self.casts = sessions.casts
        self.refused = refused
        self.started = started

    def routes(self) -> Routes:
        return Routes(
            rank={
                wire.Prompt: self.on_prompt,
                wire.Output: self.on_output,
                wire.Ended: self.on_ended,
                wire.Present: self.on_present,
            }
        )

    def on_prompt(self, process: bytes, msg: wire.Prompt) -> None:
        try:
            sess, news = self.registry.table.prompt(process, msg)
        except CannotServe as refusal:
            self.send(process, wire.Dismiss(sid=msg.sid, text=str(refusal)))
            self.refused(TOO_MANY)
            return
        if sess is None:
            return
        sessions = self.sessions
        sessions.name_twins()
        sessions.touched(sess, news, new=news or msg.again)
        sessions.record_output(sess, msg.output)
        if (cast := self.casts.stopped(sess)) is not None:
            self.requests.settle(self.casts, cast)
        sessions.to_holder(sess, wire.SessionOutput(session=sess.id, text=msg.output, paused=True, prompt=msg.prompt))
        if news:
            sessions.publish(wire.EventKind(msg.reason), sess, msg.exc)
        if (line := self.casts.next_line(sess)) is not None:
            sessions.forward(sess, line)

    def on_output(self, process: bytes, msg: wire.Output) -> None:
        sess = self.registry.table.session_of(process, msg.sid)
        if sess is None:
            return
        self.sessions.record_output(sess, msg.text)
        self.sessions.to_holder(sess, wire.SessionOutput(session=sess.id, text=msg.text, paused=False))

    def on_ended(self, process: bytes, msg: wire.Ended) -> None:
        sess = self.registry.table.session_of(process, msg.sid)
        if sess is not None:
            self.sessions.end(sess, msg.output, msg.reason)

    def on_present(self, process: bytes, msg: wire.Present) -> None:
        self.registry.table.set_present(process, msg.ranks, msg.added)
        self.started(process)
        self.sessions.below_changed()
