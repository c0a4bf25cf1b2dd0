"""`list` past a screenful, as the broker groups it: what each group gathers from its rows, and
in what order."""

from __future__ import annotations

import dataclasses

import pytest

from monarch_pdb import wire
from monarch_pdb.broker import table_rows
from monarch_pdb.broker.entries import STOP_STATES, Peer
from monarch_pdb.broker.list_groups import group_parts, group_rows, group_sessions
from monarch_pdb.broker.registry import Registry

pytestmark = pytest.mark.timeout(10)

PAUSED, RUNNING = wire.RankState.BREAKPOINT, wire.RankState.RUNNING


def row(
    rank: int,
    coords: dict[str, int],
    host: str,
    lineno: int = 7,
    state: wire.RankState = PAUSED,
    job: str = "job",
    actor: str = "train",
) -> wire.SessionRow:
    return wire.SessionRow(job, actor, rank, coords, host, 100, "m.step", "m.py", lineno, state, "")


def test_rows_group_by_job_actor_function_line_and_state_in_the_order_each_group_first_comes():
    rows = [
        row(4, {"gpu": 4}, "node2", lineno=9),
        row(0, {"gpu": 0}, "node1"),
        row(1, {"gpu": 1}, "node1"),
        row(5, {"gpu": 5}, "node2", lineno=9),
        row(2, {"gpu": 2}, "node1", state=RUNNING),
        row(3, {"gpu": 3}, "node1", job="other"),
        row(6, {"gpu": 6}, "node3", actor="eval"),
    ]
    groups = group_rows(rows)
    assert [(g.job, g.actor, g.lineno, g.state, g.ranks, g.count) for g in groups] == [
        ("job", "train", 9, PAUSED, "4,5", 2),
        ("job", "train", 7, PAUSED, "0,1", 2),
        ("job", "train", 7, RUNNING, "2", 1),
        ("other", "train", 7, PAUSED, "3", 1),
        ("job", "eval", 7, PAUSED, "6", 1),
    ]


def test_ranks_a_shell_or_an_editor_holds_are_a_group_of_their_own_that_says_who_holds_them():
    rows = [row(r, {"gpu": r}, "node1") for r in range(4)]
    rows[1] = dataclasses.replace(rows[1], attached=wire.Client.EDITOR)
    rows[3] = dataclasses.replace(rows[3], attached=wire.Client.SHELL)
    assert [(g.ranks, g.attached) for g in group_rows(rows)] == [("0,2", ""), ("1", "editor"), ("3", "shell")]


def test_a_group_has_its_ranks_each_coordinate_and_each_host_once_in_the_order_first_seen():
    rows = [row(r, {"host": r // 8, "gpu": r % 8}, f"node{r // 8 + 1:03d}") for r in (*range(8, 64), *range(8))]
    rows.append(row(99, {"host": 12, "gpu": 3, "slot": 1}, "node013"))
    rows.append(row(64, {"host": 8, "gpu": 0}, "node009"))
    [group] = group_rows(rows)
    assert group.ranks == "0-64,99" and group.count == 66
    assert group.coords == {"host": "0-8,12", "gpu": "0-7", "slot": "1"}
    assert list(group.coords) == ["host", "gpu", "slot"], "dimensions in the order first seen"
    assert group.hosts == [f"node{h:03d}" for h in (*range(2, 9), 1, 13, 9)]


def test_no_rows_are_no_groups_and_many_groups_come_in_parts_that_keep_their_order():
    assert group_rows([]) == []
    groups = group_rows(row(r, {"gpu": r}, "node1", lineno=r) for r in range(100))
    parts = list(group_parts(groups, part_size=1000))
    assert len(parts) > 1 and [more for _, more in parts] == [True] * (len(parts) - 1) + [False]
    assert [g for part, _ in parts for g in part] == groups


def test_groups_made_straight_from_the_sessions_are_those_made_from_their_rows():
    registry = Registry()
    stop = wire.Prompt(
        sid=1,
        cmd=0,
        job="job",
        actor="train",
        rank=0,
        coords={},
        host="h",
        pid=100,
        function="m.step",
        filename="m.py",
        lineno=7,
        output="",
        prompt="(Pdb) ",
    )
    for n, (identity, host) in enumerate([(b"a", "node2"), (b"b", "node1"), (b"c", "node3")]):
        registry.table.join(
            Peer(identity=identity, role=wire.Role.RANK, name="job", host=host, pid=100 + n, user="u", last_seen=0.0)
        )
    for rank in (*range(40, 64), *range(0, 40), 99, 70):
        identity, host = (b"a", "node2") if rank < 32 else (b"b", "node1") if rank < 64 else (b"c", "node3")
        coords = {"host": rank // 8, "gpu": rank % 8} if rank != 99 else {"host": 12, "gpu": 3, "slot": 1}
        registry.table.prompt(
            identity,
            dataclasses.replace(
                stop,
                sid=rank + 1,
                rank=rank,
                coords=coords,
                host=host,
                lineno=9 if rank % 5 == 0 else 7,
                actor="eval" if rank == 70 else "train",
                reason=wire.Stop.POST_MORTEM if rank == 3 else wire.Stop.BREAKPOINT,
            ),
        )
    registry.table.join(
        Peer(identity=b"e", role="shell", name=wire.Client.EDITOR, host="h", pid=1, user="u", last_seen=0.0)
    )
    for sess in list(registry.table.sessions.values())[:3]:
        registry.table.hold(b"e", sess)
    assert group_sessions(registry.table.paused(), STOP_STATES) == group_rows(table_rows.rows(registry.table))
    assert any(g.attached == wire.Client.EDITOR for g in group_rows(table_rows.rows(registry.table)))
    assert group_sessions([], STOP_STATES) == []
