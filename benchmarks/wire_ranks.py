"""Ranks emulated at the wire: one process holds thousands of paused sessions on one connection
per host, as a process of many paused threads does, with no pdb and no thread per session.

Each connection is the project's own `Link` (hello, libzmq's heartbeats, a hello again after a
broker restarts), and every message is built and read by `wire`, so the emulator speaks exactly the
protocol a real rank process speaks. What a session does:
- stops at once, at one canned place (`FUNCTION` in this file at `LINENO`): its `Prompt` goes
  with the first handshake, and again after any welcome as a stranger;
- answers a line with a `Prompt` carrying its output: `p rank` and `p __name__` as a rank's pdb
  would (`'__main__'`), `p` of a Python constant (a number, a string, a tuple of them) as its
  repr, anything else with pdb's NameError line;
- ends with `Ended(continued)` on `c`/`continue` or the top-level continue;
- reports one canned stack (`STACK`) to `TakeStacks`, all of its ranks in one group.
Interrupts are not emulated (every rank is paused already), nor peeks or an editor's requests.
The process ends when every session has ended.

    python wire_ranks.py PARENT_PID RUNTIME_DIR:FIRST_RANK:COUNT [RUNTIME_DIR:FIRST_RANK:COUNT ...]

Each RUNTIME_DIR is a host broker's (its connection file says where it listens); the rest of the
environment (job name, heartbeat) is the ranks'.
"""

from __future__ import annotations

import ast
import os
import socket
import sys
import threading

import zmq
from floors import die_with_parent

from monarch_pdb import discovery, wire
from monarch_pdb.link import Link
from monarch_pdb.rank.identity import job_name
from monarch_pdb.ranks import RankSet
from monarch_pdb.settings import load as load_settings

ACTOR = "emu"
FUNCTION = "wire_ranks.rank_main"
FILENAME = os.path.abspath(__file__)
LINENO = 1
PROMPT = "(Pdb) "
STACK = [
    wire.ThreadStack("MainThread", [wire.Frame(FILENAME, 1, "<module>"), wire.Frame(FILENAME, LINENO, "rank_main")])
]
CONTINUE = frozenset(("c", "cont", "continue"))


def answer(line: str, rank: int) -> str:
    """What pdb prints for `line` in a rank whose locals hold `rank`, for the documented set."""
    command, _, expr = line.strip().partition(" ")
    if command not in ("p", "print"):
        return f"*** the wire-level emulator runs only `p`, not {line.strip()!r}\n"
    expr = expr.strip()
    if expr == "rank":
        return f"{rank}\n"
    if expr == "__name__":
        return "'__main__'\n"
    try:
        return f"{ast.literal_eval(expr)!r}\n"
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return f"*** NameError: name {expr!r} is not defined\n"


class Ranks:
    """The sessions of one connection, as `link.LinkOwner`: every method runs on the link's thread."""

    def __init__(self, settings, first: int, count: int, host: int, context: zmq.Context, done) -> None:
        self.first, self.count, self.host = first, count, host
        self.cmds = [0] * count
        """Each session's latest line (its sid is its index + 1); -1 once it ended."""
        self.open = count
        self.done = done
        self.outgoing: list[wire.Message] = []
        self.job, self.hostname, self.pid = job_name(), socket.gethostname(), os.getpid()
        # The link's thread starts at once, and may ask for `welcomed` before it is assigned here.
        self.link = Link(
            settings, wire.Role.RANK, self, lambda: discovery.locate(settings), context=context, job=self.job
        )

    def prompt(self, index: int, output: str) -> wire.Prompt:
        rank = self.first + index
        return wire.Prompt(
            sid=index + 1,
            cmd=self.cmds[index],
            job=self.job,
            actor=ACTOR,
            rank=rank,
            coords={"host": self.host, "local": index},
            host=self.hostname,
            pid=self.pid,
            function=FUNCTION,
            filename=FILENAME,
            lineno=LINENO,
            output=output,
            prompt=PROMPT,
        )

    def welcomed(self, broker_pid: int) -> list[wire.Message]:
        return [self.prompt(i, "") for i, cmd in enumerate(self.cmds) if cmd >= 0]

    def received(self, msg: wire.Message) -> None:
        if isinstance(msg, (wire.Input, wire.Dismiss)):
            index = msg.sid - 1
            if not 0 <= index < self.count or self.cmds[index] < 0:
                return
            line = msg.line if isinstance(msg, wire.Input) else "continue"
            release = isinstance(msg, wire.Dismiss) or msg.release
            if release or line.strip() in CONTINUE:
                self.cmds[index] = -1
                self.outgoing.append(
                    wire.Ended(sid=msg.sid, cmd=getattr(msg, "cmd", 0), output="", reason=wire.Ending.CONTINUED)
                )
                self.open -= 1
                if not self.open:
                    self.done()
                return
            self.cmds[index] = msg.cmd
            self.outgoing.append(self.prompt(index, answer(line, self.first + index)))
        elif isinstance(msg, wire.TakeStacks) and msg.actor == ACTOR:
            mine = [
                rank for rank in msg.ranks if 0 <= rank - self.first < self.count and self.cmds[rank - self.first] >= 0
            ]
            self.outgoing.append(
                wire.StackReport(ref=msg.ref, groups=[wire.StackGroup(STACK, RankSet.of(mine))] if mine else [])
            )

    def published(self, msg: wire.Message) -> None:
        pass

    def idle_delay(self) -> float | None:
        return 0.0 if self.outgoing else None

    def tick(self, now: float) -> list[wire.Message]:
        out, self.outgoing = self.outgoing, []
        return out


def main(specs: list[str]) -> None:
    context = zmq.Context()
    finished = threading.Semaphore(0)
    connections = []
    for spec in specs:
        runtime_dir, first, count = spec.rsplit(":", 2)
        settings = load_settings({**os.environ, "MONARCH_PDB_RUNTIME_DIR": runtime_dir})
        host = int(first) // int(count)
        connections.append(Ranks(settings, int(first), int(count), host, context, finished.release))
    for _ in connections:
        finished.acquire()
    for ranks in connections:
        ranks.link.close()


if __name__ == "__main__":
    die_with_parent(int(sys.argv[1]))
    main(sys.argv[2:])
