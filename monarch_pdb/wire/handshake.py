"""What every peer says on its connection, whoever it is: who it is, the broker's welcome,
heartbeats, goodbye, and the error a request gets when the broker cannot serve it."""

from __future__ import annotations

from monarch_pdb.wire.schema import Message, message
from monarch_pdb.wire.words import Client

LOST_AFTER_BEATS = 3
"""A broker silent for this many heartbeats does not answer: the broker above holds its ranks
unreachable, and a shell says the broker does not answer and says hello again."""
DROPPED_AFTER_BEATS = 30
"""A connection (a rank's, a shell's, a broker's to the one above) that carries nothing, not even
libzmq's heartbeats, for this many heartbeats is dropped (its process stopped, or its host vanished)."""


@message("hello")
class Hello(Message):
    """First message of a peer: who it is. `role` is a `Role` (a broker answers any other, and
    `parent`, with an error)."""

    role: str
    host: str
    pid: int
    job: str = ""
    """A rank process's job."""
    client: Client | None = None
    """A shell-role peer's kind: a shell or an editor."""
    user: str = ""
    link: bytes = b""
    """The sender's random id, the same across its reconnections: a peer that says hello again
    on a new socket before its old one was declared lost is the same peer."""


@message("welcome")
class Welcome(Message):
    """The broker's answer to Hello: where its events are published, the number of the last
    event published, how often to beat, and whether it knew this connection already (a hello
    said again after a silence: it has everything told before)."""

    pub: str
    heartbeat: float
    broker_pid: int
    seq: int = 0
    known: bool = False


@message("heartbeat")
class Heartbeat(Message):
    """A peer that had nothing to say for a beat is still there."""


@message("unknown")
class Unknown(Message):
    """The broker does not know this peer (it restarted, or declared the peer lost)."""


@message("bye")
class Bye(Message):
    """A peer leaving on purpose: forgotten at once, not lost after a timeout."""


@message("error")
class Error(Message):
    """A request the broker could not serve; `text` is the one line the user sees."""

    text: str
