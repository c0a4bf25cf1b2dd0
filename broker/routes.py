"""Which peer may send which message, and who handles it: the broker looks at the sender's
role once, as the ZeroMQ guide's Majordomo broker routes by peer and then by message, and a
handler never asks again who sent what it got."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from monarch_pdb import wire
from monarch_pdb.broker.entries import Peer

Handler = Callable[[bytes, Any], None]
Table = dict[type, Handler]


@dataclass
class Routes:
    """The handlers for each kind of peer; an editor (and a coding agent's MCP server) is a shell that
    may also ask what only an editor asks."""

    every: Table = field(default_factory=dict)
    rank: Table = field(default_factory=dict)
    """A rank process."""
    shell: Table = field(default_factory=dict)
    editor: Table = field(default_factory=dict)
    branch: Table = field(default_factory=dict)
    """A broker below."""
    parent: Table = field(default_factory=dict)
    """The broker above, which asks for its shells up there."""

    def add(self, more: Routes) -> None:
        for name in ("every", "rank", "shell", "editor", "branch", "parent"):
            getattr(self, name).update(getattr(more, name))

    def table(self, peer: Peer) -> Table:
        if peer.role == wire.Role.RANK:
            kind = self.rank
        elif peer.role == wire.Role.BROKER:
            kind = self.branch
        elif peer.role == wire.Role.PARENT:
            kind = self.parent
        elif peer.inspects:
            kind = {**self.shell, **self.editor}
        else:
            kind = self.shell
        return {**self.every, **kind}

    def tables(self) -> dict[tuple[str, bool], Table]:
        """Each table made once, by (role, `Peer.inspects`)."""
        return {
            (role, inspects): self.table(Peer(b"", role, wire.Client.EDITOR if inspects else "", "", 0, "", 0.0))
            for role in (wire.Role.RANK, wire.Role.SHELL, wire.Role.BROKER, wire.Role.PARENT)
            for inspects in (False, True)
        }


def sender(peer: Peer) -> str:
    """Who sent a message, as a refusal names it."""
    if peer.role == wire.Role.RANK:
        return "a rank process"
    if peer.role == wire.Role.BROKER:
        return f"the broker below on {peer.host}"
    if peer.role == wire.Role.PARENT:
        return "the broker above"
    return "an editor" if peer.name == wire.Client.EDITOR else "a shell"
