"""Events reach every shell in order and without gaps, and read as folded lines."""

from __future__ import annotations

import threading

import pytest
from programs import EXAMPLES, Program, settings_for, wait_for_sessions

from monarch_pdb import wire
from monarch_pdb.client.connection import ShellConnection
from monarch_pdb.client.events import describe_events


@pytest.mark.timeout(60)
def test_every_stop_is_delivered_once_in_order_and_can_be_asked_for_again(env):
    program = Program(env, EXAMPLES / "debugging.py")
    got: list[wire.Event] = []
    try:
        wait_for_sessions(env, 1)
        conn = ShellConnection.open(settings_for(env), on_events=got.extend)
        try:
            wait_for_sessions(env, 16)
            conn.request(wire.Continue(), wire.Continued)
            wait_for_sessions(env, 4, state="post-mortem")
            conn.request(wire.Continue(), wire.Continued)
            program.finish()
        finally:
            conn.close()
        seqs = [e.seq for e in got]
        assert seqs == sorted(set(seqs)), "no event twice, none out of order"
        assert seqs == list(range(seqs[0], seqs[-1] + 1)), "no gap"

        late: list[wire.Event] = []
        caught_up = threading.Event()

        def collect_late(events: list[wire.Event]) -> None:
            late.extend(events)
            if late[-1].seq >= seqs[-1]:
                caught_up.set()

        conn = ShellConnection.open(settings_for(env), on_events=collect_late)
        try:
            conn.link._seq = 0  # as if its subscription had started before the first event
            assert caught_up.wait(10), "the next tick reveals the gap and the shell catches up"
        finally:
            conn.close()
        assert late[-len(got):] == got
        assert sorted(e.rank for e in got if e.kind == "post-mortem") == [2, 6, 10, 14]
        assert sorted(e.rank for e in got if e.kind == "ended") == list(range(16))
    finally:
        program.stop()


def event(kind: str, rank: int, where: str = "debugging.py:11", detail: str = "") -> wire.Event:
    return wire.Event(seq=rank, kind=kind, job="j", actor="debugee", rank=rank, where=where, detail=detail)


@pytest.mark.timeout(10)
def test_events_fold_into_one_line_per_actor_and_kind():
    stops = [event("breakpoint", r, f"debugging.py:{11 + 4 * (r % 4)}") for r in range(16)]
    assert describe_events(stops) == ["debugee ranks[0-15] (16) stopped at debugging.py:11,15,19,23"]
    mortem = [event("post-mortem", r, "debugging.py:5", "ValueError: bad rank") for r in (2, 6)]
    ended = [event("ended", 3, detail="returned"), event("ended", 4, detail="quit"), event("lost", 9)]
    assert describe_events(mortem + ended) == [
        "debugee ranks[2,6] (2) entered post-mortem at debugging.py:5: ValueError: bad rank",
        "debugee 3 finished",
        "debugee 4 finished (quit)",
        "debugee 9 was lost (its process stopped answering)",
    ]
