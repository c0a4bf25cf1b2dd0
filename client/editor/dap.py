"""`monarch-pdb dap`: a Debug Adapter Protocol server on stdin/stdout (how editors start an
adapter), or on a TCP port (`--listen HOST:PORT`) for editors that connect to one.

This module is the protocol's framing (a `Content-Length` header, a blank line, a JSON body)
and its loop; what each request does is `dap_session.DebugSession`'s, over
`runtime.Runtime`. One thread reads the editor's messages, the connection's thread
delivers the broker's events, and the adapter's own thread handles both in order, so the
session is never touched by two threads (a launched job's output and exit are only sent, under
the writer's lock, by the threads that read them). Nothing the
editor sends ends the adapter but `disconnect` or the end of its input: a message it cannot
read is named in one line in the Debug Console, and the next one is read.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
from typing import Any, BinaryIO

from monarch_pdb import discovery
from monarch_pdb import settings as settings_module
from monarch_pdb.client.connection import broker_options, readable
from monarch_pdb.client.editor.dap_session import DebugSession
from monarch_pdb.client.editor.runtime import Refused
from monarch_pdb.client.listen import listen_address
from monarch_pdb.settings import Settings

MAX_BODY = 16 * 1024 * 1024
"""The largest message the adapter reads; a larger one is skipped, and said so."""


class Malformed(Exception):
    """Input that is no DAP message; the text says what is wrong, in a few words."""


def read_message(stream: BinaryIO) -> dict | None:
    """The next message on `stream`, None at its end; Malformed (the stream then stands at the
    next message) for headers without a length, a body that is not a JSON object."""
    headers: dict[str, str] = {}
    while True:
        line = stream.readline(65536)
        if not line:
            return None
        if not line.strip():
            if headers:
                break
            continue
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon:
            raise Malformed(f"a header line without ':' ({line[:60]!r})")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length", "")
    if not length.isdigit():
        raise Malformed("a message without a Content-Length header")
    size = int(length)
    if size > MAX_BODY:
        while size > 0 and (chunk := stream.read(min(size, 65536))):
            size -= len(chunk)
        raise Malformed(f"a message of {int(length):,} bytes, more than the {MAX_BODY:,} the adapter reads")
    body = stream.read(size)
    if len(body) < size:
        return None
    try:
        msg = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise Malformed("a body that is not JSON") from None
    if not isinstance(msg, dict):
        raise Malformed("a body that is not a JSON object")
    return msg


def encode(msg: dict) -> bytes:
    body = json.dumps(msg, ensure_ascii=False).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


class Adapter:
    """One editor's connection: its messages in, responses and events out."""

    def __init__(self, reader: BinaryIO, writer: BinaryIO, settings: Settings) -> None:
        self.reader = reader
        self.writer = writer
        self._write_lock = threading.Lock()
        self._seq = itertools.count(1)
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.session = DebugSession(self.event, lambda events: self._put("events", events), settings)
        self.done = False

    def serve(self) -> None:
        """Handle the editor's requests and the broker's events until `disconnect` or the end of
        the editor's input."""
        threading.Thread(target=self._read, name="dap-reader", daemon=True).start()
        try:
            while not self.done:
                self._check_jobs()
                if not self._drain():
                    conn, due = self.session.conn, self.session.job_check
                    readable(
                        [self._wake_r] + ([conn.signal_fd] if conn is not None else []),
                        None if due is None else due - time.monotonic(),
                    )
        finally:
            self.session.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _check_jobs(self) -> None:
        """Whether the jobs debugged ended, when it is time to ask (`DebugSession.job_check`)."""
        due = self.session.job_check
        if due is None or time.monotonic() < due:
            return
        try:
            self.session.ended_jobs(time.monotonic())
        except Refused as error:
            self.console(f"monarch-pdb: {error}", "stderr")

    def _put(self, kind: str, value: Any) -> None:
        self._inbox.put((kind, value))
        try:
            os.write(self._wake_w, b"!")
        except (BlockingIOError, OSError):
            pass

    def _read(self) -> None:
        while True:
            try:
                msg = read_message(self.reader)
            except Malformed as error:
                self._put("malformed", str(error))
                continue
            except (OSError, ValueError):
                msg = None
            if msg is None:
                self._put("end", None)
                return
            self._put("message", msg)

    def _drain(self) -> bool:
        """Handle whatever waits; False when nothing did."""
        try:
            os.read(self._wake_r, 65536)
        except BlockingIOError:
            pass
        busy = False
        while not self.done:
            try:
                kind, value = self._inbox.get_nowait()
            except queue.Empty:
                break
            busy = True
            if kind == "message":
                self.dispatch(value)
            elif kind == "events":
                self.session.heard(value)
            elif kind == "malformed":
                self.console(f"monarch-pdb: ignored {value}", "stderr")
            else:
                self.done = True
        while not self.done and (conn := self.session.conn) is not None:
            reply = conn.next_reply(0)
            if reply is None:
                break
            busy = True
            self.session.heard(reply)
        return busy

    def dispatch(self, msg: dict) -> None:
        command, seq = msg.get("command"), msg.get("seq")
        if msg.get("type") != "request" or not isinstance(command, str) or not isinstance(seq, int):
            if isinstance(seq, int):
                self.respond(seq, str(command), False, message="not a request: it needs a type, seq and command")
            else:
                self.console("monarch-pdb: ignored a message that is not a request (no type, seq or command)", "stderr")
            return
        args = msg.get("arguments") or {}
        if not isinstance(args, dict):
            self.respond(seq, command, False, message=f"{command}: arguments must be a JSON object")
            return
        try:
            body = self.session.handle(command, args)
        except Refused as error:
            self.respond(seq, command, False, message=str(error))
            return
        except Exception as error:  # arguments of the wrong shape (a string for an object, a missing line)
            self.respond(seq, command, False, message=f"{command}: bad arguments ({type(error).__name__}: {error})")
            return
        self.respond(seq, command, True, body)
        if command == "disconnect":
            self.done = True

    def respond(
        self, request_seq: int, command: str, success: bool, body: dict | None = None, message: str = ""
    ) -> None:
        msg: dict[str, Any] = {"type": "response", "request_seq": request_seq, "success": success, "command": command}
        if message:
            msg["message"] = message
            msg["body"] = {"error": {"id": 1, "format": message, "showUser": True}}
        if body is not None:
            msg["body"] = body
        self.send(msg)

    def event(self, name: str, body: dict) -> None:
        self.send({"type": "event", "event": name, "body": body})

    def console(self, text: str, category: str = "console") -> None:
        self.event("output", {"category": category, "output": text + "\n"})

    def send(self, msg: dict) -> None:
        with self._write_lock:
            msg["seq"] = next(self._seq)
            try:
                self.writer.write(encode(msg))
                self.writer.flush()
            except (OSError, ValueError):
                self.done = True


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="monarch-pdb dap")
    parser.description = "a Debug Adapter Protocol server: every paused rank a thread of one debug session"
    broker_options(parser)
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="serve editors that connect over TCP, one at a time, instead of stdin/stdout",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    settings = settings_module.load().with_overrides(host=args.host, port=args.port)
    # An editor that goes away without a `disconnect` (its window closed, its process killed)
    # ends the adapter with a signal: the adapter still leaves the broker and ends the job it
    # launched, as a `disconnect` would.
    for ending in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(ending, lambda *_: sys.exit(0))
    if not args.listen:
        # The reader thread may still wait for input as the process ends: on a file of its
        # own, left open, not sys.stdin, whose lock the interpreter takes on its way out.
        Adapter(os.fdopen(os.dup(sys.stdin.fileno()), "rb"), sys.stdout.buffer, settings).serve()
        return 0
    host, port = listen_address(args.listen, settings, "monarch-pdb dap")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, port), family=family) as server:
        where = discovery.endpoint(host, server.getsockname()[1]).removeprefix("tcp://")
        print(f"monarch-pdb dap: listening on {where}", file=sys.stderr, flush=True)
        while True:
            client, _ = server.accept()
            with client, client.makefile("rb") as reader, client.makefile("wb") as writer:
                Adapter(reader, writer, settings).serve()
                # Its reader thread still waits for the editor's next message, holding the file
                # that closing would wait for: ending the connection lets both go.
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_RDWR)
