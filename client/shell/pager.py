"""Results taller than the terminal go through a pager, as git's do, so nothing scrolls away.

The pager is a shell command (`$PAGER`, else `less -FRX`: leave at once when the text fits,
keep colours, leave the text on the screen); "" or "cat" means none, and a command that is not
installed is skipped. The shell uses it only at a terminal, never for a script or --json. A
pager that ends without reading what it was given (it could not start, or `false`) does not
swallow it: the text is printed directly, with a line saying why.
"""

from __future__ import annotations

import math
import os
import select
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import TextIO

OFF = ("", "cat")
LOOK_AGAIN = 0.1
"""Seconds between looks at a pager that reads nothing yet, to see whether it has ended."""


def screen_lines(text: str, columns: int) -> int:
    """Lines `text` takes on a terminal `columns` wide, long lines wrapped."""
    return sum(max(1, math.ceil(len(line) / columns)) for line in text.splitlines())


def checked(command: str) -> str:
    """The value of `set pager`: a command installed here, or none; ValueError otherwise."""
    if command.strip() in OFF:
        return command
    try:
        program = shlex.split(command)[0]
    except ValueError as error:
        raise ValueError(f"cannot read {command!r} as a command: {error}") from None
    if shutil.which(program) is None:
        raise ValueError(f"{program!r} is not a command here (cat: no pager)")
    return command


def drained(fd: int) -> int:
    """How many bytes were still waiting in the pipe `fd` reads, nobody writing to it any more."""
    os.set_blocking(fd, False)
    left = 0
    try:
        while chunk := os.read(fd, 65536):
            left += len(chunk)
    except BlockingIOError:
        pass
    return left


@dataclass
class Pager:
    command: str
    terminal: TextIO

    def runnable(self) -> bool:
        try:
            return checked(self.command).strip() not in OFF
        except ValueError:
            return False

    def page(self, text: str) -> bool:
        """Show `text` through the pager if it would not fit on the screen with the prompt
        below it; False when it was not shown (it fits, there is no pager, or the pager read
        none of it), for the caller to write."""
        try:
            size = os.get_terminal_size(self.terminal.fileno())
        except (OSError, ValueError):
            return False
        if screen_lines(text, max(1, size.columns)) < size.lines or not self.runnable():
            return False
        self.terminal.flush()
        data = memoryview(text.encode(self.terminal.encoding or "utf-8", errors="replace"))
        # We keep the pipe's reading end too: what the pager left unread stays there to count.
        read_end, write_end = os.pipe()
        try:
            pager = subprocess.Popen(self.command, shell=True, stdin=read_end)
        except OSError as error:
            os.close(read_end)
            os.close(write_end)
            return self.not_shown(f"could not start: {error.strerror}")
        sent = self.feed(pager, write_end, data)
        while True:
            try:
                pager.wait()
                break
            except KeyboardInterrupt:
                continue  # Ctrl-C belongs to the pager (less stops a search with it)
        unread = drained(read_end) + len(data) - sent
        os.close(read_end)
        if unread < len(data):
            return True
        return self.not_shown(f"ended without reading it (exit status {pager.returncode})")

    def feed(self, pager: subprocess.Popen, write_end: int, data: memoryview) -> int:
        """Write `data` to the pager until all of it is written or the pager ends (the reader
        quit it before the end, or it never read); the bytes written."""
        os.set_blocking(write_end, False)
        writable = select.poll()
        writable.register(write_end, select.POLLOUT)
        sent = 0
        try:
            while sent < len(data) and pager.poll() is None:
                try:
                    sent += os.write(write_end, data[sent:])
                except BlockingIOError:
                    writable.poll(LOOK_AGAIN * 1000)
        except KeyboardInterrupt:
            pass  # the reader pressed Ctrl-C: the pager has what it has, and ends in its own time
        finally:
            os.close(write_end)
        return sent

    def not_shown(self, why: str) -> bool:
        self.terminal.write(f"monarch-pdb: the pager {self.command!r} {why}; here it is:\n")
        return False
