"""What a user feels at the terminal: from pressing Enter to the answer and the next prompt.

The real `monarch-pdb debug` shell runs in a pseudo-terminal against the 16-rank example (the
same broker and ranks as debugger.py), and a line is written as a user types it. The time runs
until the answer and the next prompt are on the screen. The floor is a plain `cmd.Cmd` program
reading with readline through the same kind of terminal and answering the same line itself:
what any Python line-reading program costs before a debugger does anything. Tab is timed the same
way, from typing `p ra` and Tab to `p rank` on the screen, the floor completing it itself.

The shell's own CPU time per line is read from /proc, since on a busy machine it is what the
line editor costs everyone else too.
"""

from __future__ import annotations

import os
import re
import select
import sys
import time
from pathlib import Path

import pexpect
from timing import timed

ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>78]|\x07|\r")
SHELL = Path(sys.executable).parent / "monarch-pdb"
ANSWER_TIMEOUT = 20.0
FLOOR_PROGRAM = r"""
import cmd, readline

class Echo(cmd.Cmd):
    prompt = "(Pdb) "

    def do_p(self, arg):
        print(13)

    def complete_p(self, text, line, begidx, endidx):
        return [name for name in ("rank",) if name.startswith(text)]

Echo().cmdloop()
"""
CLEAR_LINE = "\x15"
"""readline's Ctrl-U: the line typed so far is dropped (a completed one, before the next Tab)."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MONARCH_ATTACHED_MS = 2.7
"""Monarch's attached `p rank` through its netcat client (monarch-compat.md)."""
CAST_MS = 10.0
"""A cast to 16 ranks typed in the shell, every answer shown: what feels instant."""
CPU_MS_PER_LINE = 1.5
"""The shell's own CPU for an attached line, so a busy host does not make it lag."""


class Terminal:
    """A program in a pseudo-terminal, driven one line at a time."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.child = pexpect.spawn(
            argv[0],
            argv[1:],
            env=dict(env, TERM="xterm", MONARCH_PDB_HISTORY=""),
            dimensions=(50, 200),
            timeout=ANSWER_TIMEOUT,
        )
        self.child.delaybeforesend = None  # pexpect waits 50 ms before each send unless told not to
        self.screen = b""

    def wait_for(self, *texts: str) -> None:
        """Read until `texts` show, in this order (escape sequences aside), in what was printed
        since the last wait."""
        wanted = re.compile(b".*?".join(re.escape(text.encode()) for text in texts), re.DOTALL)
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while not wanted.search(ANSI.sub(b"", self.screen)):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.child.child_fd], [], [], left)[0]:
                raise RuntimeError(f"no {texts!r} within {ANSWER_TIMEOUT:g} s; the screen shows {self.screen[-400:]!r}")
            self.screen += os.read(self.child.child_fd, 65536)
        self.screen = b""

    def line(self, text: str, answer: str, prompt: str) -> None:
        """Type `text` and Enter; return once `answer` and, after it, `prompt` are shown (a
        cast may print a summary line between)."""
        self.child.send(text + "\r")
        self.wait_for(answer, prompt.rstrip())

    def tab(self, text: str, completed: str) -> None:
        """Drop the line, type `text` and Tab; return once the line shows `completed`."""
        self.child.send(CLEAR_LINE + text + "\t")
        self.wait_for(completed)

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.child.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def close(self) -> None:
        self.child.close(force=True)


class Shells:
    """The floor program and the real shell, each started once for the whole run."""

    def __init__(self, env: dict[str, str], rank: int, ranks: int) -> None:
        self.rank, self.ranks = rank, ranks
        self.floor = Terminal([sys.executable, "-c", FLOOR_PROGRAM], env)
        self.shell = Terminal([str(SHELL), "debug"], env)
        self.cpu = {"attached": [0.0, 0], "tab": [0.0, 0], "cast": [0.0, 0]}
        try:
            self.floor.wait_for("(Pdb)")
            self.shell.wait_for("monarch_dbg>")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Shells:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.floor.close()
        self.shell.close()

    def floor_round_trips(self, warmup: int, repeat: int) -> list[int]:
        return timed(lambda: self.floor.line("p rank", "13\n", "(Pdb) "), warmup, repeat)

    def attached_round_trips(self, warmup: int, repeat: int) -> list[int]:
        self.shell.line(f"attach debugee {self.rank}", "", "(Pdb) ")
        samples = self._counted(
            "attached", lambda: self.shell.line("p rank", f"{self.rank}\n", "(Pdb) "), warmup, repeat
        )
        self.shell.line("detach", "", "monarch_dbg> ")
        return samples

    def floor_tab_round_trips(self, warmup: int, repeat: int) -> list[int]:
        samples = timed(lambda: self.floor.tab("p ra", "p rank"), warmup, repeat)
        self.floor.child.send(CLEAR_LINE)
        return samples

    def attached_tab_round_trips(self, warmup: int, repeat: int) -> list[int]:
        self.shell.line(f"attach debugee {self.rank}", "", "(Pdb) ")
        samples = self._counted("tab", lambda: self.shell.tab("p ra", "p rank"), warmup, repeat)
        self.shell.line(CLEAR_LINE + "detach", "", "monarch_dbg> ")
        return samples

    def cast_round_trips(self, warmup: int, repeat: int) -> list[int]:
        last = self.ranks - 1
        return self._counted(
            "cast",
            lambda: self.shell.line(
                "cast debugee ranks(:) p rank", f"debugee ranks[{last}] (1)\n{last}\n", "monarch_dbg> "
            ),
            warmup,
            repeat,
        )

    def _counted(self, name: str, once, warmup: int, repeat: int) -> list[int]:
        for _ in range(warmup):
            once()
        before = self.shell.cpu_seconds()
        samples = timed(once, 0, repeat)
        self.cpu[name][0] += self.shell.cpu_seconds() - before
        self.cpu[name][1] += repeat
        return samples

    def cpu_ms_per_line(self) -> dict[str, float]:
        return {name: round(seconds / lines * 1000, 2) for name, (seconds, lines) in self.cpu.items() if lines}
