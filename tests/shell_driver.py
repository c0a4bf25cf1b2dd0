"""Drives the real `monarch debug` shell through a pseudo-terminal, as a user would.

prompt_toolkit draws with escape sequences, so the driver strips them before matching, and
recognises "a prompt is ready for input" by the bracketed-paste switch prompt_toolkit turns on
when it starts reading a line and off when the line is accepted.
"""

from __future__ import annotations

import os
import re
import sys
import time

import pexpect

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>78]|\x07")
PROMPT_ON = "\x1b[?2004h"
PROMPT_OFF = "\x1b[?2004l"


def plain(raw: str) -> str:
    return ANSI.sub("", raw).replace("\r", "")


class ShellDriver:
    def __init__(self, env: dict[str, str], *args: str, timeout: float = 20.0) -> None:
        script = os.path.join(os.path.dirname(sys.executable), "monarch")
        shell_env = dict(env, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", MONARCH_PDB_HISTORY="")
        self.child = pexpect.spawn(script, ["debug", *args], env=shell_env, encoding="utf-8",
                                   dimensions=(50, 220), timeout=timeout)
        self.timeout = timeout
        self.raw = ""
        self.seen = 0

    @property
    def text(self) -> str:
        return plain(self.raw)

    def _read(self, deadline: float) -> bool:
        """Read what the shell printed until the deadline; False at end of file."""
        try:
            self.raw += self.child.read_nonblocking(65536, timeout=max(0.01, min(0.2, deadline - time.monotonic())))
        except pexpect.TIMEOUT:
            pass
        except pexpect.EOF:
            return False
        return True

    def expect(self, pattern: str, timeout: float | None = None) -> re.Match:
        """Wait for `pattern` in the plain text printed since the last match."""
        deadline = time.monotonic() + (timeout or self.timeout)
        regex = re.compile(pattern, re.MULTILINE)
        while True:
            text = self.text
            match = regex.search(text, self.seen)
            if match:
                self.seen = match.end()
                return match
            if time.monotonic() > deadline or not self._read(deadline):
                raise AssertionError(f"never saw {pattern!r}; the shell printed:\n{text[self.seen - 2000 if self.seen > 2000 else 0:]}")

    def wait_prompt(self, timeout: float | None = None) -> str:
        """Wait until the shell reads a line; returns the prompt it shows."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            at = self.raw.rfind(PROMPT_ON)
            if at >= 0 and self.raw.find(PROMPT_OFF, at) < 0:
                shown = plain(self.raw[at:]).strip()
                if shown.startswith(("monarch_dbg>", "(Pdb)")) or shown.endswith((">", ")")):
                    return shown
            if time.monotonic() > deadline or not self._read(deadline):
                raise AssertionError(f"no prompt; the shell printed:\n{self.text[-3000:]}")

    def command(self, line: str, timeout: float | None = None) -> str:
        """Type a line, wait for the next prompt, and return what was printed in between."""
        start = len(self.raw)
        self.child.sendline(line)
        deadline = time.monotonic() + (timeout or self.timeout)
        while self.raw.find(PROMPT_OFF, start) < 0:
            if time.monotonic() > deadline or not self._read(deadline):
                raise AssertionError(f"{line!r} was not accepted; the shell printed:\n{self.text[-3000:]}")
        accepted = self.raw.find(PROMPT_OFF, start) + len(PROMPT_OFF)
        self.wait_prompt(timeout)
        out = plain(self.raw[accepted: self.raw.rfind(PROMPT_ON)])
        self.seen = len(self.text)
        return out

    @property
    def prompt(self) -> str:
        return plain(self.raw[self.raw.rfind(PROMPT_ON):]).strip()

    def quit(self) -> int:
        self.child.sendline("quit")
        self.child.expect(pexpect.EOF, timeout=self.timeout)
        self.child.close()
        return self.child.exitstatus

    def kill(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
