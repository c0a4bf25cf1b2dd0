"""Length-framed pickles over a socketpair between a parent and each worker it starts; the
program's own classes and functions by value when it has no script file to rerun."""

from __future__ import annotations

import pickle
import socket
from multiprocessing.connection import Connection
from typing import Any

from monarch_pdb.actor import by_value, main_module


def socket_pair() -> tuple[Connection, socket.socket]:
    """The parent's connection, and the socket whose descriptor the worker inherits."""
    ours, theirs = socket.socketpair()
    return Connection(ours.detach()), theirs


def adopt(fd: int) -> Connection:
    return Connection(fd)


def dumps(value: Any, what: str) -> bytes:
    try:
        if main_module.by_value():
            return by_value.dumps(value)
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise TypeError(f"cannot send {what} to another process: {exc}") from exc


def send(conn: Connection, message: Any) -> None:
    conn.send_bytes(dumps(message, type(message).__name__))


def receive(conn: Connection) -> Any:
    """The next message; EOFError once the other side is gone."""
    return pickle.loads(conn.recv_bytes())
