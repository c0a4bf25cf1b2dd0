"""Where the shell's results go: text for a person, one JSON document per command for a
program, and optionally a transcript file for a bug report.

Every text for a person passes here, so that what a rank sent (what it printed, and the names
of its actor, job, host, files and functions in a table, a stack or an event) is shown as
`escapes.visible` makes it: a control character in it cannot clear or retitle the terminal.
JSON keeps the text as sent.

A transcript is itself a script: commands are plain lines, and everything else (answers,
events, time stamps) is a `#` comment, so `monarch-pdb debug --script TRANSCRIPT` replays it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from monarch_pdb.client.commands.answer import made
from monarch_pdb.client.escapes import visible, without_colours


def stamp() -> str:
    now = time.time()
    return time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"


@dataclass
class Transcript:
    file: IO[str]

    @classmethod
    def open(cls, path: str) -> Transcript:
        transcript = cls(open(path, "w", encoding="utf-8", errors="surrogateescape"))  # bytes typed, kept as typed
        transcript.file.write(f"# monarch-pdb transcript, started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
        return transcript

    def command(self, line: str) -> None:
        self.file.write(f"# {stamp()}\n{line}\n")
        self.file.flush()

    def note(self, kind: str, text: str) -> None:
        """What was shown, as `# ` lines, without the colours a terminal showed it in."""
        text = without_colours(text)
        lines = text.rstrip("\n").split("\n") if text.strip() else []
        self.file.write("".join(f"# {kind}: {line}\n" for line in lines))
        self.file.flush()

    def close(self) -> None:
        self.file.close()


@dataclass
class Reporter:
    """Prints a command's result (`text` or `doc`), its failure, and events; keeps the record.

    `failure` is the last error since `start`, so a script knows whether its line worked.
    """

    write_out: Callable[[str], None]
    write_err: Callable[[str], None]
    as_json: bool = False
    transcript: Transcript | None = None
    failure: str = ""
    page: Callable[[str], bool] | None = None
    """Shows a result through a pager when it is too tall, or says it did not (at a terminal only)."""
    script_line: str = ""
    """In a script, where the line being run comes from and its text (`-c:2: list`): each failure
    is then one line on stderr that names it, and nothing else."""

    def start(self, line: str) -> None:
        self.failure = ""
        if self.transcript is not None and line.strip():
            self.transcript.command(line)

    def result(self, text: str | Callable[[], str], doc: Any, colours: bool = False) -> None:
        """`text` and `doc` may each be a function that makes it, so that what is not shown
        is not made: 131,072 rows of `list` as JSON rows, or as a table. `colours`: the text
        is coloured (the mesh's cells, pdb's source), and its colour sequences are kept."""
        shown = visible(made(text), colours) if not self.as_json or self.transcript is not None else ""
        if self.as_json:
            self.write_out(json.dumps(made(doc), sort_keys=True) + "\n")
        elif shown:
            shown = shown if shown.endswith("\n") else shown + "\n"
            if self.page is None or not self.page(shown):
                self.write_out(shown)
        if self.transcript is not None:
            self.transcript.note("out", shown)

    def stream(self, text: str, colours: bool = False) -> None:
        """Part of a result that arrives in pieces (what an attached rank prints), its colour
        sequences kept with `colours`."""
        text = visible(text, colours)
        if not self.as_json:
            self.write_out(text)
        if self.transcript is not None:
            self.transcript.note("out", text)

    def failed(self, text: str) -> None:
        """The result was printed, but the command did not fully work (a rank did not answer)."""
        self.failure = text
        if self.script_line:
            self.write_err(f"monarch-pdb: {self.script_line}: {visible(text)}\n")

    def error(self, text: str, prefix: str = "Error processing command: ") -> None:
        self.failure = text
        if self.as_json:
            self.write_out(json.dumps({"error": text}) + "\n")
        if self.script_line:
            self.write_err(f"monarch-pdb: {self.script_line}: {visible(text)}\n")
        elif not self.as_json:
            self.write_err(f"{prefix}{visible(text)}\n")
        if self.transcript is not None:
            self.transcript.note("error", text)

    def background(self, kind: str, lines: list[str]) -> list[str]:
        """What arrived by itself (events, followed output), as the shell shows it above the
        prompt; the transcript notes it."""
        shown = [visible(line) for line in lines]
        if self.transcript is not None:
            self.transcript.note(f"{stamp()} {kind}", "\n".join(shown))
        return shown
