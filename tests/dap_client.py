"""An editor, as the tests play it: `monarch-pdb dap` started on pipes, spoken to in DAP.

Every event is kept in arrival order, so a test waits for one that came before it asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

DAP = [os.path.join(os.path.dirname(sys.executable), "monarch-pdb"), "dap"]


class DapClient:
    """The adapter on pipes; or, given `streams` (a socket's files), one it serves over TCP."""

    def __init__(self, env: dict[str, str], *args: str, streams: tuple | None = None) -> None:
        if streams is None:
            self.proc = subprocess.Popen([*DAP, *args], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE)
            self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        else:
            self.proc = None
            self.stdout, self.stdin = streams
        self.seq = 0
        self.responses: dict[int, dict] = {}
        self.events: list[dict] = []
        self.arrived = threading.Condition()
        self.ended = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        stream = self.stdout
        while True:
            length = None
            while True:
                try:
                    line = stream.readline()
                except (OSError, ValueError):  # closed by `close`
                    line = b""
                if not line:
                    with self.arrived:
                        self.ended = True
                        self.arrived.notify_all()
                    return
                if not line.strip():
                    break
                name, _, value = line.decode().partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            msg = json.loads(stream.read(length))
            with self.arrived:
                if msg["type"] == "response":
                    self.responses[msg["request_seq"]] = msg
                else:
                    self.events.append(msg)
                self.arrived.notify_all()

    def write(self, data: bytes) -> None:
        self.stdin.write(data)
        self.stdin.flush()

    def send(self, command: str, /, **arguments) -> int:
        self.seq += 1
        body = json.dumps({"seq": self.seq, "type": "request", "command": command, "arguments": arguments}).encode()
        self.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        return self.seq

    def response(self, seq: int, timeout: float = 30.0) -> dict:
        with self.arrived:
            assert self.arrived.wait_for(lambda: seq in self.responses or self.ended, timeout), \
                f"no response to request {seq} within {timeout} s"
            assert seq in self.responses, f"the adapter ended before answering request {seq}: {self.stderr()}"
            return self.responses.pop(seq)

    def request(self, command: str, /, timeout: float = 30.0, **arguments) -> dict:
        """The body of a successful response."""
        reply = self.response(self.send(command, **arguments), timeout)
        assert reply["success"], f"{command} failed: {reply.get('message')}"
        return reply.get("body") or {}

    def failure(self, command: str, /, **arguments) -> str:
        reply = self.response(self.send(command, **arguments))
        assert not reply["success"], f"{command} should have failed: {reply}"
        return reply["message"]

    def take_events(self, name: str, count: int = 1, timeout: float = 60.0, **match) -> list[dict]:
        """The first `count` events `name` whose body has `match`, removed from those kept."""
        deadline = time.monotonic() + timeout

        def found() -> list[dict]:
            return [e for e in self.events if e["event"] == name
                    and all(e.get("body", {}).get(k) == v for k, v in match.items())][:count]

        with self.arrived:
            while len(found()) < count:
                left = deadline - time.monotonic()
                assert left > 0 and not self.ended, f"expected {count} {name} events {match}, had {self.events}"
                self.arrived.wait(left)
            taken = found()
            self.events = [e for e in self.events if not any(e is t for t in taken)]
            return taken

    def attach(self, **arguments) -> dict:
        capabilities = self.request("initialize", adapterID="monarch-pdb", clientID="tests", linesStartAt1=True)
        self.request("attach", **arguments)
        self.take_events("initialized")
        self.request("configurationDone")
        return capabilities

    def stderr(self) -> str:
        if self.proc is None or self.proc.poll() is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")

    def close(self) -> None:
        if self.proc is None:
            self.stdin.close()
            self.stdout.close()
            return
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()
