"""Who wants the ranks' output as they print it: a shell here that follows ranks (it subscribes
to the event socket's output topic), or the broker above, for a shell up there that does.

Output is published and sent up only while someone wants it, so casts cost nothing extra
otherwise; the brokers below are told when that changes, and send theirs up only meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from monarch_pdb import wire
from monarch_pdb.broker.routes import Routes

if TYPE_CHECKING:
    from monarch_pdb.broker.entries import Peer, Session


class Followers:
    def __init__(
        self,
        publish: Callable[[wire.Message], None],
        send: Callable[[bytes, wire.Message], None],
        branches: Callable[[], list[Peer]],
        send_up: Callable[[Session, str], None],
    ) -> None:
        """`publish` publishes on the output topic; `send_up` sends a chunk to the broker above."""
        self.publish = publish
        self.send = send
        self.branches = branches
        self.send_up = send_up
        self.followed = False
        """Some shell here follows ranks."""
        self.parent_wants_output = False
        """Some shell of the broker above follows ranks (its `OutputWanted`)."""

    def routes(self) -> Routes:
        return Routes(parent={wire.OutputWanted: self.on_output_wanted})

    @property
    def wanted(self) -> bool:
        """Some shell follows ranks, here or above: brokers below send what they print."""
        return self.followed or self.parent_wants_output

    def subscribed(self, on: bool) -> None:
        """The first shell here subscribed to output (told once it is live), or the last one
        left. (A verbose XPUB passes every subscription, and the last unsubscription.)"""
        was_wanted = self.wanted
        self.followed = on
        if on:
            self.publish(wire.OutputLive())
        self.tell_branches(was_wanted)

    def on_output_wanted(self, parent: bytes, msg: wire.OutputWanted) -> None:
        was_wanted = self.wanted
        self.parent_wants_output = msg.on
        self.tell_branches(was_wanted)

    def parent_joined(self) -> None:
        """A broker above that welcomed us as a stranger wants nothing until it says so."""
        was_wanted = self.wanted
        self.parent_wants_output = False
        self.tell_branches(was_wanted)

    def branch_joined(self, branch: bytes) -> None:
        if self.wanted:
            self.send(branch, wire.OutputWanted(on=True))

    def tell_branches(self, was_wanted: bool) -> None:
        if self.wanted != was_wanted:
            for branch in self.branches():
                self.send(branch.identity, wire.OutputWanted(on=self.wanted))

    def printed(self, sess: Session, seq: int, text: str) -> None:
        """A chunk of a session's output, numbered as kept: published while a shell here
        follows ranks, sent up while one above does."""
        if self.followed:
            self.publish(
                wire.Printed(session=sess.id, seq=seq, job=sess.job, actor=sess.actor, rank=sess.rank, text=text)
            )
        if self.parent_wants_output:
            self.send_up(sess, text)
