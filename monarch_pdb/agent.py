"""The agent: what a rank process keeps to talk to the broker, one per process.

Paused threads never touch a socket. They hand their prompt to the agent and block on a
queue of their own until the broker sends their next line; the link's thread does the rest,
including sending output that a running command printed once it has sat idle a moment.
"""

from __future__ import annotations

import os
import queue
import sys
import itertools
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import zmq

from monarch_pdb import discovery, wire
from monarch_pdb.identity import job_name
from monarch_pdb.link import Link
from monarch_pdb.settings import Settings
from monarch_pdb.settings import load as load_settings

OUTPUT_IDLE = 0.05


@dataclass
class Line:
    """An input line for a session, numbered by the broker."""

    cmd: int
    text: str
    release: bool = False


class OutputSource(Protocol):
    """A session's pdb output, sent on its own once it has sat idle for OUTPUT_IDLE."""

    def take_idle(self, now: float) -> str | None:
        """Idle output, "" while output is still being written, None when there is none."""


class Agent:
    _instance: Agent | None = None
    _instance_lock = threading.Lock()

    @classmethod
    def get(cls) -> Agent:
        """The process's agent, started on first use (the one global this package keeps)."""
        with cls._instance_lock:
            if cls._instance is None or cls._instance.pid != os.getpid():
                cls._instance = Agent(load_settings())
            return cls._instance

    def __init__(self, settings: Settings, context: zmq.Context | None = None) -> None:
        """A process has one agent (`get`); a load generator that stands in for many rank
        processes makes one per emulated rank, sharing one ZeroMQ context."""
        self.settings = settings
        self.pid = os.getpid()
        self._inboxes: dict[int, queue.SimpleQueue[Line]] = {}
        self._sources: dict[int, OutputSource] = {}
        self._waiting: dict[int, wire.Prompt] = {}
        self._unsent: list[int] = []
        self._printing: set[int] = set()
        """Sessions that wrote output since the link last looked: only these are looked at, so
        a process with thousands of paused sessions does no work per session when one prints."""
        self._sids = itertools.count(1)
        self._lock = threading.Lock()
        self.loose_sessions: dict[int, Any] = {}
        """Sessions opened outside any endpoint call, by thread: they end when tracing stops."""
        self.link = Link(settings, "agent", job_name(), self, self._locate, context=context)

    def _locate(self) -> discovery.Connection | None:
        conn = discovery.locate(self.settings)
        if conn is None and discovery.is_local(self.settings.host):
            conn = discovery.start_embedded_broker(self.settings)
        if conn is None:
            remote = "" if discovery.is_local(self.settings.host) else "; for a remote broker set MONARCH_PDB_SECRET"
            raise discovery.NotFound(f"no running broker's file at {discovery.connection_file(self.settings)}{remote}")
        return conn

    def clip(self, text: str) -> str:
        """Output as large as one message may carry, with room for the rest of it."""
        return wire.clip(text, min(wire.MAX_OUTPUT, self.settings.max_message // 2))

    # --- called from paused threads ----------------------------------------------------

    def open_session(self, output: OutputSource) -> tuple[int, queue.SimpleQueue[Line]]:
        """A new session id and the queue its input lines arrive on."""
        sid = next(self._sids)
        inbox: queue.SimpleQueue[Line] = queue.SimpleQueue()
        with self._lock:
            self._inboxes[sid] = inbox
            self._sources[sid] = output
        return sid, inbox

    def close_session(self, sid: int, ended: wire.Ended) -> None:
        with self._lock:
            self._inboxes.pop(sid, None)
            self._sources.pop(sid, None)
            self._waiting.pop(sid, None)
            self._printing.discard(sid)
        self.link.post(ended)

    def printing(self, sid: int) -> None:
        """A session wrote output while running: the link sends it once it sits idle."""
        with self._lock:
            self._printing.add(sid)
        self.link.post()

    def wait_for_input(self, prompt: wire.Prompt) -> None:
        """Announce that a session waits; kept so a new broker learns of it after a restart."""
        with self._lock:
            self._waiting[prompt.sid] = prompt
            self._unsent.append(prompt.sid)
        self.link.post()

    def wait_ready(self, who: str) -> bool:
        """Block until a broker has welcomed us; say on stderr what we wait for, and why."""
        ready = self.link.ready
        if ready.wait(self.settings.connect_timeout):
            return True
        where = f"{self.settings.host}:{self.settings.port}"
        print(
            f"monarch-pdb: {who} (pid {os.getpid()}) is paused at a breakpoint, but no debug broker "
            f"answers at {where}{self.link.problem}. Start one with `monarch-pdb broker` "
            "(set MONARCH_DEBUG_SERVER_HOST/PORT to match); waiting.",
            file=sys.stderr, flush=True,
        )
        limit = self.settings.give_up_after
        if not ready.wait(limit if limit > 0 else None):
            print(f"monarch-pdb: {who}: no broker after {limit:g} s; continuing without stopping.",
                  file=sys.stderr, flush=True)
            return False
        print(f"monarch-pdb: {who}: connected to the debug broker at {where}.", file=sys.stderr, flush=True)
        return True

    # --- the link's thread (link.Peer) -------------------------------------------------

    def welcomed(self) -> list[wire.Message]:
        with self._lock:
            self._unsent = list(self._waiting)
        return []

    def received(self, msg: wire.Message) -> None:
        if isinstance(msg, wire.Dismiss):
            print(f"monarch-pdb: the debug broker {msg.text}", file=sys.stderr, flush=True)
            msg = wire.Input(sid=msg.sid, cmd=0, line="continue", release=True)
        if isinstance(msg, wire.Input):
            with self._lock:
                inbox = self._inboxes.get(msg.sid)
                self._waiting.pop(msg.sid, None)
            if inbox is not None:
                inbox.put(Line(msg.cmd, msg.line, msg.release))

    def published(self, msg: wire.Event | wire.Printed | wire.OutputLive) -> None:
        pass

    def idle_delay(self) -> float | None:
        if self._unsent:
            return 0.0
        return OUTPUT_IDLE if self._printing else None

    def tick(self, now: float) -> list[wire.Message]:
        """Prompts first (each took its output before anything queued after it), then idle output.

        A session is forgotten here only under both locks, so a write racing with that tells
        the agent again."""
        with self._lock:
            out: list[wire.Message] = [self._waiting[s] for s in self._unsent if s in self._waiting]
            self._unsent.clear()
            for sid in list(self._printing):
                source = self._sources.get(sid)
                text = source.take_idle(now) if source is not None else None
                if text is None:
                    self._printing.discard(sid)
                elif text:
                    out.append(wire.Output(sid=sid, text=self.clip(text)))
        return out
