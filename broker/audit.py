"""The audit log (`monarch-pdb broker --audit FILE`): one line per command sent to ranks, and
who sent it."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO

from monarch_pdb import ranks

if TYPE_CHECKING:
    from monarch_pdb.broker.registry import Registry


class Audit:
    def __init__(self, registry: Registry, file: TextIO | None) -> None:
        self.registry = registry
        self.file = file

    def record(
        self, identity: bytes, job: str, actor: str, ranks_sent: Iterable[int], line: str, below: str = ""
    ) -> None:
        """One line per command sent to ranks (and the selector that picks more below, where it
        is evaluated there), and who sent it; nothing without a file."""
        if self.file is None:
            return
        shell = self.registry.table.peer(identity)
        who = shell.describe() if shell is not None else "unknown shell"
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        there = f" and {below} below" if below else ""
        self.file.write(
            f"{when} {who} job={job} actor={actor} ranks={ranks.format_ranks(ranks_sent)}{there} command={line!r}\n"
        )
        self.file.flush()
