"""`list`, `list --all` and `jobs` through the broker: rows made as each part is sent, and past
what the shell shows, their groups instead (`list_groups.py`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain
from typing import TYPE_CHECKING

from monarch_pdb import wire
from monarch_pdb.broker import table_rows
from monarch_pdb.broker.entries import STOP_STATES
from monarch_pdb.broker.inflight import row_parts
from monarch_pdb.broker.list_groups import group_parts, group_rows, group_sessions
from monarch_pdb.broker.routes import Routes

if TYPE_CHECKING:
    from monarch_pdb.broker.registry import Registry

SendParts = Callable[[bytes, Iterable[wire.Message]], None]
"""Send the parts of a long answer, each encoded as it is made (`Broker.send_parts`)."""


class Lists:
    def __init__(self, registry: Registry, send_parts: SendParts, max_message: int) -> None:
        self.registry = registry
        self.send_parts = send_parts
        self.part_size = min(wire.BATCH_BYTES, max_message // 2)

    def routes(self) -> Routes:
        return Routes(
            shell={wire.ListSessions: self.on_list, wire.ListAll: self.on_list_all, wire.ListJobs: self.on_jobs}
        )

    def on_list(self, shell: bytes, msg: wire.ListSessions) -> None:
        """`list`: its rows, or past `groups_above` sessions their groups, made straight
        from the sessions."""
        if msg.groups_above is not None:
            paused = self.registry.table.paused()
            if len(paused) > msg.groups_above:
                self.send_groups(shell, group_sessions(paused, STOP_STATES))
                return
        self.send_list(shell, table_rows.rows(self.registry.table), msg.groups_above)

    def on_list_all(self, shell: bytes, msg: wire.ListAll) -> None:
        self.send_list(shell, table_rows.all_rows(self.registry.table), msg.groups_above)

    def on_jobs(self, shell: bytes, msg: wire.ListJobs) -> None:
        self.send_parts(shell, [wire.JobList(rows=table_rows.job_rows(self.registry.table))])

    def send_groups(self, shell: bytes, groups: list[wire.SessionGroup]) -> None:
        self.send_parts(
            shell, (wire.SessionGroups(groups=part, more=more) for part, more in group_parts(groups, self.part_size))
        )

    def send_list(self, shell: bytes, rows: Iterable[wire.SessionRow], groups_above: int | None) -> None:
        """A list in parts of a batch each: 65,536 rows are more than 8 MB, and the rows are
        made as each part is sent. Past `groups_above` rows, their groups instead."""
        rows = iter(rows)
        if groups_above is not None:
            first: list[wire.SessionRow] = []
            for row in rows:
                first.append(row)
                if len(first) > groups_above:
                    self.send_groups(shell, group_rows(chain(first, rows)))
                    return
            rows = iter(first)
        self.send_parts(
            shell, (wire.SessionList(rows=part, more=more) for part, more in row_parts(rows, self.part_size))
        )
