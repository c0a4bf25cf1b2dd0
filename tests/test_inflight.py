"""Casts and stack requests in flight: when each is done, what its result says, and the order
in which a session runs the lines of several shells' casts."""

from __future__ import annotations

import dataclasses

import pytest

from monarch_pdb import wire
from monarch_pdb.broker import table_rows
from monarch_pdb.broker.casts import CastInFlight, Casts
from monarch_pdb.broker.entries import Peer, Session
from monarch_pdb.broker.inflight import InFlight, row_parts, row_weight
from monarch_pdb.broker.registry import Registry
from monarch_pdb.broker.stacks import StacksInFlight
from monarch_pdb.broker.upstream import UPSTREAM
from monarch_pdb.ranks import RankSet

pytestmark = pytest.mark.timeout(10)

STOP = wire.Prompt(
    sid=1,
    cmd=0,
    job="job",
    actor="train",
    rank=0,
    coords={},
    host="h",
    pid=100,
    function="m.step",
    filename="step.py",
    lineno=3,
    output="> step.py(3)step()\n",
    prompt="(Pdb) ",
)
MAIN = [wire.ThreadStack("MainThread", [wire.Frame("train.py", 9, "<module>"), wire.Frame("train.py", 3, "step")])]
OTHER = [wire.ThreadStack("MainThread", [wire.Frame("train.py", 9, "<module>"), wire.Frame("train.py", 5, "save")])]
M = wire.Missing


def G(output: str, outcome: str, ranks: list[int]) -> wire.CastGroup:
    return wire.CastGroup(output, outcome, RankSet.of(ranks))


def S(threads: list[wire.ThreadStack], ranks: list[int]) -> wire.StackGroup:
    return wire.StackGroup(threads, RankSet.of(ranks))


def paused(count: int) -> tuple[Registry, list[Session]]:
    registry = Registry()
    registry.table.join(
        Peer(identity=b"agent", role=wire.Role.RANK, name="job", host="h", pid=100, user="u", last_seen=0.0)
    )
    return registry, [
        registry.table.prompt(b"agent", dataclasses.replace(STOP, sid=n + 1, rank=n))[0] for n in range(count)
    ]


def cast_of(sessions: list[Session], deadline: float = 10.0) -> CastInFlight:
    return CastInFlight(shell=b"shell", ref=7, actor="train", deadline=deadline, total=len(sessions))


def answer(registry: Registry, casts: Casts, sess: Session, output: str) -> CastInFlight | None:
    """The session runs the line it was sent and stops again, having printed `output`."""
    cmd = sess.resume(release=False)
    registry.table.prompt(b"agent", dataclasses.replace(STOP, sid=sess.sid, rank=sess.rank, cmd=cmd))
    sess.log.add(output)
    return casts.stopped(sess)


# --- casts ----------------------------------------------------------------------------------


def test_a_cast_is_settled_once_every_session_answered_identical_answers_grouped_most_common_first():
    registry, sessions = paused(3)
    casts = Casts(part_size=1 << 20)
    cast = cast_of(sessions)
    assert casts.start(cast, "p rank % 2", sessions) == sessions
    for sess, output in zip(sessions, ["0\n", "1\n", "0\n"]):
        assert casts.settle(cast) == [], "not before every answer is in"
        answer(registry, casts, sess, output)
    [result] = casts.settle(cast)
    assert result == wire.CastResult(ref=7, actor="train", groups=[G("0\n", "", [0, 2]), G("1\n", "", [1])], missing=[])
    assert casts.settle(cast) == [] and cast.id not in casts, "and never again"


def test_an_expired_cast_names_the_ranks_still_running():
    registry, sessions = paused(2)
    casts = Casts(part_size=1 << 20)
    cast = cast_of(sessions, deadline=5.0)
    casts.start(cast, "!import time; time.sleep(60)", sessions)
    answer(registry, casts, sessions[0], "done\n")
    assert casts.overdue(4.9) == [] and casts.overdue(5.0) == [cast]
    [result] = casts.settle(cast, expired=True)
    assert result.groups == [G("done\n", "", [0])] and result.missing == [M(1, "still running")]


def test_a_running_session_is_named_running_and_a_busy_one_takes_the_next_cast_when_it_stops():
    registry, sessions = paused(2)
    casts = Casts(part_size=1 << 20)
    first = cast_of(sessions)
    casts.start(first, "n", sessions[:1])
    sessions[1].resume(release=False)
    second = cast_of(sessions)
    assert casts.start(second, "p 2", sessions) == [], "one is busy with the first cast, one runs"
    assert second.missing == [M(1, "running")] and second.answered == 0
    answer(registry, casts, sessions[0], "> next\n")
    assert casts.next_line(sessions[0]) == "p 2" and casts.busy[sessions[0].id] == second.id
    assert casts.next_line(sessions[0]) is None


def test_a_waiting_line_of_a_cast_that_is_over_is_dropped():
    registry, sessions = paused(1)
    casts = Casts(part_size=1 << 20)
    casts.start(cast_of(sessions), "n", sessions)
    later = cast_of(sessions, deadline=1.0)
    casts.start(later, "p 2", sessions)
    casts.settle(later, expired=True)
    answer(registry, casts, sessions[0], "> next\n")
    assert casts.next_line(sessions[0]) is None


def test_a_session_still_running_the_line_of_an_expired_cast_is_named_running_by_the_next():
    _, sessions = paused(1)
    casts = Casts(part_size=1 << 20)
    stuck = cast_of(sessions, deadline=1.0)
    for sess in casts.start(stuck, "!import time; time.sleep(60)", sessions):
        sess.resume(release=False)
    casts.settle(stuck, expired=True)
    later = cast_of(sessions)
    assert casts.start(later, "p 1", sessions) == [] and later.missing == [M(0, "running")]


def test_a_session_that_ends_answers_its_cast_and_gives_up_those_waiting_for_it():
    registry, sessions = paused(2)
    casts = Casts(part_size=1 << 20)
    running, waiting = cast_of(sessions), cast_of(sessions)
    casts.start(running, "c", sessions)
    casts.start(waiting, "p 1", sessions)
    sessions[0].log.add("bye\n")
    assert casts.ended(sessions[0], "returned") == [running, waiting]
    assert casts.ended(sessions[1], "lost") == [running, waiting]
    [result] = casts.settle(running)
    assert result.groups == [G("bye\n", "finished", [0])] and result.missing == [M(1, "lost")]
    [result] = casts.settle(waiting)
    assert result.missing == [M(0, "its session ended before the command ran"), M(1, "lost")]


def test_progress_is_due_once_per_interval():
    _, sessions = paused(1)
    casts = Casts(part_size=1 << 20)
    cast = cast_of(sessions)
    casts.start(cast, "n", sessions)
    assert casts.progress_due(1.0, every=0.25, upstream_every=1.0) == [cast]
    assert casts.progress_due(1.2, every=0.25, upstream_every=1.0) == []
    assert casts.progress_due(1.25, every=0.25, upstream_every=1.0) == [cast]


def test_a_broker_above_is_told_the_progress_of_its_cast_less_often_and_only_when_it_changed():
    _, sessions = paused(2)
    casts = Casts(part_size=1 << 20)
    cast = dataclasses.replace(cast_of(sessions), shell=UPSTREAM)
    casts.start(cast, "n", sessions)
    assert casts.progress_due(1.0, every=0.25, upstream_every=1.0) == [cast], "its first word, 0 answered"
    assert casts.progress_due(1.5, every=0.25, upstream_every=1.0) == []
    assert casts.progress_due(2.0, every=0.25, upstream_every=1.0) == [], "nothing changed: no word"
    sessions[0].log.add("1\n")
    casts.stopped(sessions[0])
    assert casts.progress_due(2.5, every=0.25, upstream_every=1.0) == [], "a change waits for the interval"
    assert casts.progress_due(3.0, every=0.25, upstream_every=1.0) == [cast] and cast.answered == 1


def test_a_broker_above_with_many_brokers_below_is_told_of_progress_as_seldom_as_it_asked():
    _, sessions = paused(2)
    casts = Casts(part_size=1 << 20)
    cast = dataclasses.replace(cast_of(sessions), shell=UPSTREAM, progress_every=4.0)
    casts.start(cast, "n", sessions)
    assert casts.progress_due(1.0, every=0.25, upstream_every=1.0) == [cast], "its first word, 0 answered"
    sessions[0].log.add("1\n")
    casts.stopped(sessions[0])
    assert casts.progress_due(2.0, every=0.25, upstream_every=1.0) == [], "a change waits for what it asked"
    assert casts.progress_due(4.9, every=0.25, upstream_every=1.0) == []
    assert casts.progress_due(5.0, every=0.25, upstream_every=1.0) == [cast] and cast.answered == 1


def test_a_large_result_comes_in_parts_and_only_the_last_names_the_missing():
    _, sessions = paused(4)
    cast = cast_of(sessions)
    cast.missing.append(M(9, "lost"))
    for n in range(4):
        cast.pending[n] = n
        cast.answer(n, str(n) * 100, "")
    parts = cast.result(part_size=250)
    assert [len(part.groups) for part in parts] == [2, 2]
    assert [(part.more, part.missing) for part in parts] == [(True, []), (False, [M(9, "lost")])]


def test_the_rows_of_a_long_list_are_made_one_part_at_a_time():
    registry, _ = paused(6)
    made: list[int] = []

    def listed():
        for row in table_rows.rows(registry.table):
            made.append(row.rank)
            yield row

    parts = row_parts(listed(), part_size=2 * row_weight(next(table_rows.rows(registry.table))))
    first, more = next(parts)
    assert [row.rank for row in first] == [0, 1] and more
    assert made == [0, 1, 2], "no row past the one that starts the next part"
    assert [([row.rank for row in part], more) for part, more in parts] == [([2, 3], True), ([4, 5], False)]


# --- stack requests -------------------------------------------------------------------------


def stacks_request(**waiting: list[int]) -> tuple[InFlight[StacksInFlight], StacksInFlight]:
    table: InFlight[StacksInFlight] = InFlight(part_size=1 << 20)
    request = table.open(StacksInFlight(shell=b"shell", ref=3, actor="train", deadline=10.0))
    request.waiting = {peer.encode(): ranks for peer, ranks in waiting.items()}
    return table, request


def test_identical_stacks_from_several_processes_share_one_entry():
    table, request = stacks_request(a=[0, 1], b=[2])
    request.report(b"a", [S(MAIN, [0]), S(OTHER, [1])])
    assert table.settle(request) == []
    request.report(b"b", [S(MAIN, [2])])
    [result] = table.settle(request)
    assert result == wire.StacksResult(ref=3, actor="train", groups=[S(MAIN, [0, 2]), S(OTHER, [1])], missing=[])


def test_only_the_ranks_asked_of_a_process_count_and_those_it_sent_no_stack_for_are_named():
    table, request = stacks_request(a=[0, 1])
    request.report(b"a", [S(MAIN, [0, 7])])
    [result] = table.settle(request)
    assert result.groups == [S(MAIN, [0])] and result.missing == [M(1, "its process sent no stack for it")]


def test_a_lost_process_and_a_silent_one_have_their_ranks_named():
    table, request = stacks_request(a=[0], b=[1])
    request.lost(b"a")
    assert table.overdue(9.0) == [] and table.overdue(10.0) == [request]
    [result] = table.settle(request, expired=True)
    assert result.groups == [] and result.missing == [M(0, "lost"), M(1, "no answer in time")]


# --- brokers below ----------------------------------------------------------------------------


def test_a_broker_below_answers_for_its_ranks_grouped_and_merged_with_ours():
    registry, [own] = paused(1)
    casts = Casts(part_size=1 << 20)
    cast = cast_of([own])
    cast.total = 5
    casts.start(cast, "p rank", [own])
    cast.owe(b"below", "host1", RankSet.of([1, 2, 3, 4]))
    answer(registry, casts, own, "same\n")
    assert not cast.done and cast.answered == 1
    cast.answered_below[b"below"] = 3
    assert cast.answered == 4
    cast.merge(b"below", [G("same\n", "", [2, 1, 9]), G("other\n", "", [3])], [M(4, "running")], more=False)
    [result] = casts.settle(cast)
    assert result.groups == [G("same\n", "", [0, 1, 2]), G("other\n", "", [3])]
    assert result.missing == [M(4, "running")]


def test_a_broker_below_that_answers_in_parts_owes_the_rest_until_its_last_part():
    casts = Casts(part_size=1 << 20)
    cast = casts.open(CastInFlight(shell=b"shell", ref=7, actor="train", deadline=10.0, total=3))
    cast.owe(b"below", "host1", RankSet.of([0, 1, 2]))
    cast.merge(b"below", [G("a\n", "", [0])], [], more=True)
    assert casts.settle(cast) == [] and cast.answered == 1
    cast.merge(b"below", [G("b\n", "", [1])], [], more=False)
    [result] = casts.settle(cast)
    assert result.missing == [M(2, "no answer from the broker on host1")]


def test_a_lost_broker_below_and_a_silent_one_have_their_ranks_named_with_their_hosts():
    casts = Casts(part_size=1 << 20)
    cast = casts.open(CastInFlight(shell=b"shell", ref=7, actor="train", deadline=10.0, total=2))
    cast.owe(b"lost", "host1", RankSet.of([0]))
    cast.owe(b"slow", "host2", RankSet.of([1]))
    cast.lost(b"lost", "lost with the broker on host1")
    assert casts.settle(cast) == []
    [result] = casts.settle(cast, expired=True)
    assert result.missing == [M(0, "lost with the broker on host1"), M(1, "no answer in time from the broker on host2")]


def test_stacks_from_a_broker_below_come_merged_in_parts_with_the_ranks_it_has_none_for():
    table, request = stacks_request(a=[0], below=[1, 2, 3])
    request.report(b"a", [S(MAIN, [0])])
    request.report(b"below", [S(MAIN, [1])], [], more=True)
    assert table.settle(request) == []
    request.report(b"below", [S(OTHER, [2])], [M(3, "lost")], more=False)
    [result] = table.settle(request)
    assert result.groups == [S(MAIN, [0, 1]), S(OTHER, [2])]
    assert result.missing == [M(3, "lost")]


def test_brokers_below_that_pick_with_the_selector_send_whatever_they_picked_and_a_lost_one_has_its_ranks_named():
    table, request = stacks_request(a=[0])
    request.picked_there = lambda branch: {b"one": [1, 2], b"two": [3, 4]}[branch]
    request.pick_there(b"one")
    request.pick_there(b"two")
    request.report(b"a", [S(MAIN, [0])])
    request.report(b"one", [S(MAIN, [1, 2])], [], more=True)
    request.report(b"two", [S(OTHER, [3])], [], more=True)
    request.lost(b"two", "lost with the broker on host2")
    assert table.settle(request) == [], "the broker below that sent a part owes the rest"
    request.report(b"one", [], [M(5, "lost")])
    [result] = table.settle(request)
    assert result.groups == [S(MAIN, [0, 1, 2]), S(OTHER, [3])]
    assert result.missing == [M(4, "lost with the broker on host2"), M(5, "lost")]
