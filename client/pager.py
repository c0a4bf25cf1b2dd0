"""Results taller than the terminal go through a pager, as git's do, so nothing scrolls away.

The pager is a shell command (`$PAGER`, else `less -FRX`: leave at once when the text fits,
keep colours, leave the text on the screen); "" or "cat" means none, and a command that is not
installed is skipped. The shell uses it only at a terminal, never for a script or --json.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import TextIO

OFF = ("", "cat")


def screen_lines(text: str, columns: int) -> int:
    """Lines `text` takes on a terminal `columns` wide, long lines wrapped."""
    return sum(max(1, math.ceil(len(line) / columns)) for line in text.splitlines())


@dataclass
class Pager:
    command: str
    terminal: TextIO

    def runnable(self) -> bool:
        if self.command.strip() in OFF:
            return False
        try:
            program = shlex.split(self.command)[0]
        except (ValueError, IndexError):
            return False
        return shutil.which(program) is not None

    def page(self, text: str) -> bool:
        """Show `text` through the pager if it would not fit on the screen with the prompt
        below it; False when it was not shown (it fits, or there is no pager), for the caller
        to write."""
        try:
            size = os.get_terminal_size(self.terminal.fileno())
        except (OSError, ValueError):
            return False
        if screen_lines(text, max(1, size.columns)) < size.lines or not self.runnable():
            return False
        self.terminal.flush()
        pager = subprocess.Popen(self.command, shell=True, stdin=subprocess.PIPE)
        try:
            pager.stdin.write(text.encode(self.terminal.encoding or "utf-8", errors="replace"))
        except (BrokenPipeError, KeyboardInterrupt):
            pass  # the reader quit the pager before the end, or pressed Ctrl-C: it ends in its own time
        finally:
            try:
                pager.stdin.close()
            except BrokenPipeError:
                pass
        while True:
            try:
                pager.wait()
                return True
            except KeyboardInterrupt:
                continue  # Ctrl-C belongs to the pager (less stops a search with it)
