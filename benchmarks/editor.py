"""What `next` costs in the editor: from the adapter's `next` request to its `stopped` event,
and on to the variables of the new frame as VS Code asks for them after a Step Over (`next`,
the `stopped` event, then `stackTrace`, `scopes` and `variables` of the top frame's Locals),
beside the same `n` typed in the shell, attached, from Enter to the next prompt.

Both step a rank of benchmarks/stepper.py under one broker: the real `monarch-pdb dap` on
pipes holds rank 0 (as an editor starts it), the real shell in a pseudo-terminal holds rank 1.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import debugger
import terminal
from timing import timed

from monarch_pdb.client.editor.dap import encode, read_message

STEPPER = Path(__file__).resolve().parent / "stepper.py"
DAP = [str(Path(sys.executable).parent / "monarch-pdb"), "dap"]


class Adapter:
    """`monarch-pdb dap` on pipes, attached to the stepper's rank 0, spoken to in DAP."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            DAP, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.seq = 0
        self.events: list[dict] = []
        try:
            self.request("initialize", adapterID="monarch-pdb", linesStartAt1=True)
            self.request("attach", ranks="stepper ranks(0)")
            self.request("configurationDone")
            self.thread = self.event("stopped")["threadId"]
        except BaseException:
            self.close()
            raise

    def send(self, command: str, **arguments) -> int:
        self.seq += 1
        self.proc.stdin.write(encode({"seq": self.seq, "type": "request", "command": command, "arguments": arguments}))
        self.proc.stdin.flush()
        return self.seq

    def request(self, command: str, **arguments) -> dict:
        """The body of its response; the events that came first are kept for `event`."""
        seq = self.send(command, **arguments)
        while True:
            msg = self.next_message()
            if msg["type"] == "event":
                self.events.append(msg)
            elif msg["request_seq"] == seq:
                if not msg["success"]:
                    raise RuntimeError(f"{command}: {msg.get('message')}")
                return msg.get("body") or {}

    def event(self, name: str) -> dict:
        while True:
            msg = self.events.pop(0) if self.events else self.next_message()
            if msg["type"] == "event" and msg["event"] == name:
                return msg["body"]

    def next_message(self) -> dict:
        msg = read_message(self.proc.stdout)
        if msg is None:
            raise RuntimeError("the adapter ended")
        return msg

    def step(self) -> None:
        """`next`, then its response and the `stopped` event (in whichever order they come)."""
        seq = self.send("next", threadId=self.thread)
        answered = stopped = False
        while not (answered and stopped):
            msg = self.next_message()
            answered = answered or (msg["type"] == "response" and msg["request_seq"] == seq)
            stopped = stopped or (msg["type"] == "event" and msg["event"] == "stopped")

    def step_and_show(self) -> None:
        """A Step Over as VS Code shows it: `next` to its `stopped` event, then the new top
        frame's Locals, each request sent once the previous answer is in, as VS Code sends them."""
        self.step()
        frames = self.request("stackTrace", threadId=self.thread, startFrame=0, levels=20)["stackFrames"]
        scopes = self.request("scopes", frameId=frames[0]["id"])["scopes"]
        variables = self.request("variables", variablesReference=scopes[0]["variablesReference"])["variables"]
        if not any(v["name"] == "total" for v in variables):
            raise RuntimeError(f"the stepper's Locals lack `total`: {variables}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


class Stepping:
    """The stepper, its broker, the adapter on rank 0 and the shell attached to rank 1."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.example = debugger.Example(workdir, script=STEPPER, ranks=2)
        self.adapter: Adapter | None = None
        self.shell: terminal.Terminal | None = None

    def __enter__(self) -> Stepping:
        self.example.__enter__()
        try:
            self.adapter = Adapter(self.example.env)
            self.shell = terminal.Terminal([str(terminal.SHELL), "debug"], self.example.env)
            self.shell.wait_for("monarch_dbg>")
            self.shell.line("attach stepper 1", "", "(Pdb) ")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        if self.shell is not None:
            self.shell.close()
        if self.adapter is not None:
            self.adapter.close()
        self.example.__exit__()

    def editor_next_round_trips(self, warmup: int, repeat: int) -> list[int]:
        return timed(self.adapter.step, warmup, repeat)

    def editor_step_shown_round_trips(self, warmup: int, repeat: int) -> list[int]:
        return timed(self.adapter.step_and_show, warmup, repeat)

    def shell_next_round_trips(self, warmup: int, repeat: int) -> list[int]:
        return timed(lambda: self.shell.line("n", "-> ", "(Pdb) "), warmup, repeat)
