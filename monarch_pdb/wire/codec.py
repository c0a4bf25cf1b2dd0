"""Signing, framing and replay: one `Codec` signs and packs what a peer sends, and checks
and unpacks what it receives.

A message is two ZeroMQ frames after any routing identity: a 32-byte HMAC-SHA256 signature of
the body, and the body, a msgpack map holding the protocol version (`v`), the type (`t`), the
sender's random id (`s`) and counter (`n`), the time it was sent (`ts`), and the type's own
fields. Several messages for one peer may travel as one batch (type `batch`, `items` a list of
packed maps of type and fields), signed once: a cast to thousands of sessions behind one
connection then costs one signature and one send per connection, not per session.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

import msgpack

from monarch_pdb.wire.schema import Dropped, Message, flatten, from_fields

PROTOCOL = 3
"""The version of what travels: a message of another version is dropped as "wrong protocol"
(raised whenever a message changes in a way an older peer would misread)."""
MAX_BODY = 8 * 1024 * 1024
MAX_OUTPUT = 1024 * 1024
REPLAY_MEMORY = 65536
MAX_AGE = 600.0
BATCH = "batch"
BATCH_BYTES = 256 * 1024
"""Messages are batched up to this many bytes; a larger one travels alone."""
ITEM_HEADER = 5
"""The most bytes msgpack adds in front of each packed item of a batch."""
AUTH_FAILED = [b"", b"monarch-pdb: authentication failed"]
"""The one unsigned answer: what a broker sends to a peer whose messages fail the signature
check, so that a shell with the wrong secret says so at once instead of waiting in silence."""


class ReplayGuard:
    """Remembers the highest counter seen from each sender; anything not above it is a replay."""

    def __init__(self, memory: int = REPLAY_MEMORY) -> None:
        self._last: OrderedDict[bytes, int] = OrderedDict()
        self._memory = memory

    def admit(self, sender: bytes, counter: int) -> None:
        last = self._last.get(sender)
        if last is not None and counter <= last:
            raise Dropped("replayed")
        self._last[sender] = counter
        self._last.move_to_end(sender)
        if len(self._last) > self._memory:
            self._last.popitem(last=False)


@dataclass
class Codec:
    """Signs and encodes outgoing messages; checks and decodes incoming ones.

    One codec belongs to one thread. `refused` counts dropped messages by reason.
    """

    key: bytes
    max_body: int = MAX_BODY
    max_age: float = MAX_AGE
    sender: bytes = field(default_factory=lambda: os.urandom(8))
    counter: int = 0
    guard: ReplayGuard = field(default_factory=ReplayGuard)
    refused: Counter = field(default_factory=Counter)

    def encode(self, msg: Message) -> list[bytes]:
        return self._sign({"t": msg.TYPE, **msg.__dict__})

    def encode_many(self, msgs: list[Message]) -> list[list[bytes]]:
        """Messages for one peer, in order, in as few signed bodies as fit a batch, which is
        never more than half the largest message a peer takes."""
        limit = min(BATCH_BYTES, self.max_body // 2)
        if len(msgs) == 1:
            return [self.encode(msgs[0])]
        bodies: list[list[bytes]] = []
        items: list[bytes] = []
        size = 0
        for msg in msgs:
            item = _pack({"t": msg.TYPE, **msg.__dict__})
            if items and size + len(item) + ITEM_HEADER > limit:
                bodies.append(self._sign({"t": BATCH, "items": items}))
                items, size = [], 0
            items.append(item)
            size += len(item) + ITEM_HEADER
        bodies.append(self._sign({"t": BATCH, "items": items}))
        return bodies

    def _sign(self, fields: dict) -> list[bytes]:
        self.counter += 1
        body = {"v": PROTOCOL, "s": self.sender, "n": self.counter, "ts": time.time()}
        body.update(fields)
        packed = _pack(body)
        return [hmac.new(self.key, packed, hashlib.sha256).digest(), packed]

    def decode(self, frames: list[bytes]) -> list[Message]:
        """The messages in the last two frames (one, or a batch), or `Dropped` (counted) with
        the reason; a batch with one bad item is refused whole."""
        try:
            return self._decode(frames)
        except Dropped as refusal:
            self.refused[str(refusal)] += 1
            raise

    def _decode(self, frames: list[bytes]) -> list[Message]:
        if len(frames) < 2:
            raise Dropped("too few frames")
        signature, packed = frames[-2], frames[-1]
        if len(packed) > self.max_body:
            raise Dropped("too large")
        expected = hmac.new(self.key, packed, hashlib.sha256).digest()
        if not hmac.compare_digest(signature, expected):
            raise Dropped("bad signature")
        body = _unpack(packed)
        if body.get("v") != PROTOCOL:
            raise Dropped("wrong protocol")
        sender, counter, sent = body.get("s"), body.get("n"), body.get("ts")
        if not isinstance(sender, bytes) or not isinstance(counter, int) or not isinstance(sent, float):
            raise Dropped("no sender")
        if abs(time.time() - sent) > self.max_age:
            raise Dropped("too old")
        if body.get("t") == BATCH:
            items = body.get("items")
            if not isinstance(items, list) or not all(isinstance(item, bytes) for item in items):
                raise Dropped("wrong field type")
            msgs = [from_fields(_unpack(item)) for item in items]
        else:
            msgs = [from_fields(body)]
        self.guard.admit(sender, counter)
        return msgs


def _unpack(packed: bytes) -> dict:
    try:
        body = msgpack.unpackb(packed, raw=False, strict_map_key=True)
    except Exception:
        raise Dropped("undecodable") from None
    if not isinstance(body, dict):
        raise Dropped("wrong protocol")
    return body


def _pack(body: dict) -> bytes:
    """msgpack's bytes for `body`; text that UTF-8 cannot carry (a lone surrogate: a path or a
    message decoded from undecodable bytes) travels escaped, as `\\udcff`."""
    return msgpack.packb(body, use_bin_type=True, default=flatten, unicode_errors="backslashreplace")


def clip(text: str, limit: int = MAX_OUTPUT) -> str:
    """Keep a rank's output within one message, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n*** output truncated: {len(text) - limit} more characters not shown\n"
