"""Who is on each connection of the broker's ROUTER, and what it refused of whom.

A connection is known by its file descriptor from the socket monitor's word that it was
accepted until its peer's first message names it; one that drops is noted, and the broker
decides whether its peer is lost (`Broker.check_dropped`). A peer whose signature fails is told
once, and named in the log once by its address; refusals are summed up in the log at most once
every `REFUSALS_LOGGED_EVERY` seconds, never a line per message.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict

import zmq
from zmq.utils.monitor import recv_monitor_message

from monarch_pdb.broker.log import log

TOLD_UNSIGNED = 4096
"""Peers remembered as told that their signatures fail, and addresses named for it, at most."""
REFUSALS_LOGGED_EVERY = 10.0


class Connections:
    """The ROUTER's connections: by descriptor until named, and those that dropped."""

    def __init__(self) -> None:
        self.unmapped: dict[int, float] = {}
        """Connections accepted whose peer is not yet known, by descriptor, and since when."""
        self.peer_of_fd: dict[int, bytes] = {}
        self.fd_of_peer: dict[bytes, int] = {}
        self.unplaced: set[bytes] = set()
        """Peers that said hello on a connection not known by its descriptor (its first message
        came before the monitor said it was accepted): any connection dropped unnamed may be theirs."""
        self.dropped: dict[bytes, float] = {}
        """Peers whose connection dropped, and when: lost unless they reconnect."""

    def note(self, monitor: zmq.Socket) -> None:
        """Connections come and go (the socket monitor's events, each in order before anything
        the new connection sends)."""
        while True:
            try:
                event = recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            fd = event["value"]
            if event["event"] == zmq.EVENT_ACCEPTED:
                self.unmapped[fd] = time.monotonic()
                continue
            self.unmapped.pop(fd, None)
            identity = self.peer_of_fd.pop(fd, None)
            if identity is None:
                for unplaced in self.unplaced:
                    self.dropped.setdefault(unplaced, time.monotonic())
            elif self.fd_of_peer.get(identity) == fd:
                del self.fd_of_peer[identity]
                self.dropped[identity] = time.monotonic()

    def learn(self, identity: bytes, frame: zmq.Frame) -> None:
        """The peer on a connection not yet known, from its first message."""
        try:
            fd = frame.get(zmq.SRCFD)
        except zmq.ZMQError:  # a message that carries no descriptor (its connection is gone)
            return
        if self.unmapped.pop(fd, None) is not None:
            self.peer_of_fd[fd] = identity
            self.fd_of_peer[identity] = fd
            self.dropped.pop(identity, None)
            self.unplaced.discard(identity)

    def said_hello(self, identity: bytes) -> None:
        if identity not in self.fd_of_peer:
            self.unplaced.add(identity)

    def forget_unmapped(self, now: float) -> None:
        """A connection that said nothing for a while (a port probe that stays) stays unknown."""
        while self.unmapped and now - next(iter(self.unmapped.values())) > REFUSALS_LOGGED_EVERY:
            self.unmapped.pop(next(iter(self.unmapped)))


class Refusals:
    """What the broker refused: counted by reason (the codec's counter, which counts what it
    drops itself), each unsigned peer told once and named once, all summed up in the log."""

    def __init__(self, counts: Counter[str]) -> None:
        self.counts = counts
        self.told_unsigned: OrderedDict[bytes, None] = OrderedDict()
        """Peers already told that their signatures fail: each is told once."""
        self.unnamed: OrderedDict[bytes, float] = OrderedDict()
        """Those of them whose address is not yet known, and since when."""
        self.addresses: set[int | str] = set()
        """Addresses named in the log as sending what our secret did not sign: each is named once."""
        self.logged = 0
        self.logged_at = float("-inf")
        self.latest = ""

    def unsigned(self, identity: bytes) -> bool:
        """A peer whose signature failed: whether it is to be told so (the first time)."""
        if identity in self.told_unsigned:
            return False
        self.told_unsigned[identity] = None
        self.unnamed[identity] = time.monotonic()
        for table in (self.told_unsigned, self.unnamed):
            if len(table) > TOLD_UNSIGNED:
                table.popitem(last=False)
        return True

    def name(self, identity: bytes, frame: zmq.Frame) -> None:
        """Name, once, the address of a peer whose signature failed, from its next message:
        a message carries its connection's address only as a frame, which costs more than bytes
        to receive, so frames are taken only while some refused peer is still unnamed."""
        if self.unnamed.pop(identity, None) is None:
            return
        try:
            address = frame.get("Peer-Address")
        except zmq.ZMQError:
            return
        if address not in self.addresses and len(self.addresses) < TOLD_UNSIGNED:
            self.addresses.add(address)
            log(f"refused a peer at {address}: what it sends is not signed with our secret (is the secret the same?)")

    def count(self, reason: str, detail: str = "") -> None:
        """Count a message refused for `reason`, for the log's summary (which names `detail`)."""
        self.counts[reason] += 1
        self.note(detail or reason)

    def note(self, reason: str) -> None:
        """A refusal (counted already): at most one summary line every REFUSALS_LOGGED_EVERY seconds."""
        self.latest = reason
        self.summarize(time.monotonic())

    def forget_unnamed(self, now: float) -> None:
        """Peers that said nothing more within a summary's time stay unnamed."""
        while self.unnamed and now - next(iter(self.unnamed.values())) > REFUSALS_LOGGED_EVERY:
            self.unnamed.popitem(last=False)

    def summarize(self, now: float, final: bool = False) -> None:
        total = sum(self.counts.values())
        if total == self.logged or (now - self.logged_at < REFUSALS_LOGGED_EVERY and not final):
            return
        self.logged, self.logged_at = total, now
        counts = ", ".join(f"{n} {why}" for why, n in self.counts.most_common())
        log(f"dropped {total} bad messages so far ({counts}); latest: {self.latest}")
