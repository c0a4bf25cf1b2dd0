"""Drives the real `monarch debug` shell through a pseudo-terminal, as a user would.

readline redraws with escape sequences, so the driver strips them before matching, and
recognises "a prompt is ready for input" by the bracketed-paste switch the shell's readline
turns on when it starts reading a line and off when the line is accepted.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable

import pexpect
from conftest import wait_for_exit

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>78]|\x07")
PROMPT_ON = "\x1b[?2004h"
PROMPT_OFF = "\x1b[?2004l"


def plain(raw: str) -> str:
    return ANSI.sub("", raw).replace("\r", "")


def without_progress(text: str) -> str:
    """A command's output as the terminal shows it once done: a slow cast's progress
    (`answered 2/4`), which the shell erases, taken out."""
    return re.sub(r"answered \d+/\d+", "", text)


class ShellDriver:
    def __init__(
        self,
        env: dict[str, str],
        *args: str,
        command: list[str] | None = None,
        timeout: float = 20.0,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        """Start `monarch debug ARGS`, or `command` when given (a program that opens the shell)."""
        argv = command or [os.path.join(os.path.dirname(sys.executable), "monarch"), "debug", *args]
        shell_env = {"MONARCH_PDB_HISTORY": "", **env, "TERM": "xterm"}
        self.child = pexpect.spawn(
            argv[0],
            argv[1:],
            env=shell_env,
            encoding="utf-8",
            dimensions=(50, 220),
            timeout=timeout,
            preexec_fn=preexec_fn,
        )
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
                raise AssertionError(
                    f"never saw {pattern!r}; the shell printed:\n{text[self.seen - 2000 if self.seen > 2000 else 0 :]}"
                )

    def expect_absent(self, pattern: str, seconds: float) -> None:
        """Read what the shell prints for `seconds`, and fail if `pattern` shows up in it: a
        deadline on something that must not happen meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._read(deadline):
            pass
        match = re.compile(pattern, re.MULTILINE).search(self.text, self.seen)
        assert match is None, f"saw {match.group()!r} too early; the shell printed:\n{self.text[self.seen :]}"

    def wait_prompt(self, timeout: float | None = None) -> str:
        """Wait until the shell reads a line; returns the prompt it shows."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            at = self.raw.rfind(PROMPT_ON)
            if at >= 0 and self.raw.find(PROMPT_OFF, at) < 0 and (shown := self._prompt_at(at)):
                return shown
            if time.monotonic() > deadline or not self._read(deadline):
                raise AssertionError(f"no prompt; the shell printed:\n{self.text[-3000:]}")

    def command(self, line: str, timeout: float | None = None, shown: str | None = None) -> str:
        """Type a line, wait for the next prompt, and return what was printed in between, as the
        terminal shows it once done (a slow cast's progress erased).

        An event printed above the prompt also switches the prompt off and on, so the line
        counts as accepted at the first switch-off whose redrawn prompt line ends with it (or
        with `shown`, when the keys typed are not the text accepted, as with the arrow keys).
        """
        start = len(self.raw)
        self.child.sendline(line)
        deadline = time.monotonic() + (timeout or self.timeout)
        accepted = following = -1
        while True:
            if accepted < 0:
                accepted = self._accepted_at(start, line if shown is None else shown)
            if accepted >= 0:
                following = self.raw.find(PROMPT_ON, accepted)
                if following >= 0 and self._prompt_at(following):
                    break
            if time.monotonic() > deadline or not self._read(deadline):
                since = self.raw[start:]
                raise AssertionError(
                    f"no prompt after {line!r}; the shell printed:\n{self.text[-3000:]}\n"
                    f"as sent, from the line on (accepted at {accepted}):\n{since[:1500]!r}\n"
                    f"...\n{since[-1500:]!r}"
                )
        self.seen = len(self.text)
        return without_progress(plain(self.raw[accepted:following]))

    def _prompt_at(self, at: int) -> str:
        """The prompt drawn after the switch at `at`, once all of it has arrived ('' before)."""
        shown = plain(self.raw[at:]).strip()
        return shown if shown.startswith(("monarch_dbg>", "(Pdb)")) or shown.endswith((">", ")", "?")) else ""

    def _accepted_at(self, start: int, line: str) -> int:
        at = start
        while (off := self.raw.find(PROMPT_OFF, at)) >= 0:
            drawn = plain(self.raw[max(self.raw.rfind(PROMPT_ON, 0, off), 0) : off]).rstrip()
            if drawn.endswith(line.strip()):
                return off + len(PROMPT_OFF)
            at = off + len(PROMPT_OFF)
        return -1

    @property
    def prompt(self) -> str:
        return plain(self.raw[self.raw.rfind(PROMPT_ON) :]).strip()

    def command_until_exit(self, line: str) -> str:
        """Type a line that ends the shell; returns everything printed after it."""
        start = len(self.raw)
        self.child.sendline(line)
        deadline = time.monotonic() + self.timeout
        while self._read(deadline):
            if time.monotonic() > deadline:
                raise AssertionError(f"{line!r} did not end the shell; it printed:\n{self.text[-3000:]}")
        self.child.close()
        return plain(self.raw[start:])

    def close_terminal(self, timeout: float) -> int | None:
        """Close the terminal, as closing its window does: the kernel hangs the shell up (SIGHUP,
        and its reads end). Its exit status once it has left, None if it has not by the deadline.
        (A bare SIGHUP is not the same: one that lands as readline draws its prompt, before it
        waits for a key, is acted on only at the next key.)"""
        self.child.ptyproc.fileobj.close()
        wait_for_exit([self.child.pid], timeout)
        if self.child.isalive():
            return None
        return self.child.exitstatus if self.child.signalstatus is None else -self.child.signalstatus

    def kill(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
