"""What a command gives back to whichever front end ran it, and how it says it could not.

An answer is the text a person reads (folded: ranks grouped, stacks merged, numbers summed up)
and the `--json` document a program reads, of one result; each may be a function that makes
it, so that a front end that shows only one never pays for the other. `failure` says why the
result is not whole (ranks that did not answer): the result still stands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from monarch_pdb import wire
from monarch_pdb.client.connection import BrokerConnection, RequestFailed, Timeout

Reply = TypeVar("Reply", bound=wire.Message)


class CommandError(Exception):
    """A command that cannot be carried out; its text is the one line every front end shows."""


class UsageError(CommandError):
    """Words a command's parser cannot read as its arguments."""


FAILURES = (CommandError, RequestFailed, Timeout)
"""What a command raises when it cannot answer: each is said as its one line."""


def made(value: Any) -> Any:
    """A value, or what the function given for it makes."""
    return value() if callable(value) else value


@dataclass
class Answer:
    """A command's result. `colours`: the text is coloured (the mesh's cells, pdb's source) and
    its colour sequences are to be kept where colours are shown. `actors`: the actor names
    the command met, which a shell offers on Tab."""

    text: str | Callable[[], str]
    document: Any
    failure: str = ""
    colours: bool = False
    actors: frozenset[str] = frozenset()

    @property
    def shown(self) -> str:
        return made(self.text)

    @property
    def doc(self) -> Any:
        return made(self.document)


def one_or_all(docs: list) -> Any:
    """The document of a command over one actor, or over several: one actor's as it is."""
    return docs[0] if len(docs) == 1 else docs


def ask(conn: BrokerConnection, msg: wire.Message, *replies: type[Reply]) -> Reply:
    """The broker's answer to `msg`, one of `replies`; its refusal becomes the command's
    one-line error."""
    reply = conn.request(msg, *replies)
    if isinstance(reply, wire.Error):
        raise CommandError(reply.text)
    assert isinstance(reply, replies)
    return reply
