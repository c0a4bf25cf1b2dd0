"""`collectives`' folding of the ranks' snapshots, as peek brings them: what the shell prints
when the job's Flight Recorder is off, for ranks with no process group, and for members of a
group that did not answer (and `hang`'s story of them). Real torchrun jobs are in
test_engines_torchrun.py."""

from __future__ import annotations

import json

import pytest

from monarch_pdb import wire
from monarch_pdb.broker.peeks import HOLDS_THE_GIL
from monarch_pdb.client.commands import collectives_report, hang_report
from monarch_pdb.rank.process_groups import NO_TORCH
from monarch_pdb.ranks import RankSet, parse_selector


def answer(ranks: list[int], snapshot: dict) -> wire.CastGroup:
    return wire.CastGroup(json.dumps(snapshot), "", RankSet.of(ranks))


def world(entered: int) -> dict:
    return {"name": "0", "desc": "world", "size": 4, "ranks": "0-3", "entered": entered}


@pytest.mark.timeout(10)
def test_without_the_flight_recorder_sequence_numbers_name_who_is_behind_and_how_to_know_more():
    result = wire.PeekResult(
        ref=1,
        actor="train",
        groups=[
            answer([0, 1, 2], {"at": "train.py:17 main", "groups": [world(1043)], "recorded": False}),
            answer([3], {"at": "train.py:41 next_batch", "groups": [world(1042)], "recorded": False}),
        ],
        missing=[],
    )
    assert collectives_report.text(collectives_report.fold(result)).splitlines() == [
        "train: group 0 (world, 4 ranks): ranks[3] (1) never entered #1043, which ranks[0-2] (3) entered",
        "  ranks[0-2] (3): entered #1043; at train.py:17 main",
        "  ranks[3] (1): entered #1042; at train.py:41 next_batch",
        collectives_report.RECORDER_OFF,
    ]


@pytest.mark.timeout(10)
def test_ranks_in_step_and_ranks_without_torch_are_each_one_line():
    result = wire.PeekResult(
        ref=1,
        actor="train",
        groups=[
            answer([0, 1], {"at": "", "groups": [dict(world(7), size=2, ranks="0,1")], "recorded": False}),
            answer([2, 3], {"at": "", "error": NO_TORCH}),
            wire.CastGroup("*** NameError: name 'torch' is not defined", "", RankSet.of([4])),
        ],
        missing=[wire.Missing(5, "no answer in time")],
    )
    report = collectives_report.fold(result)
    assert collectives_report.text(report).splitlines() == [
        "train: group 0 (world, 2 ranks): every rank entered #7",
        "  ranks[0,1] (2): entered #7",
        f"train ranks[2,3] (2): {NO_TORCH}",
        "train ranks[4] (1): NameError: name 'torch' is not defined",
        collectives_report.RECORDER_OFF,
        "no answer from train rank 5: no answer in time",
    ]
    assert collectives_report.document(report)["groups"][0]["disagreement"] is None


@pytest.mark.timeout(10)
def test_ranks_waiting_in_one_collective_fold_into_one_line_however_long_ago_each_entered_it():
    def waiting(age: float) -> dict:
        last = {"seq": 3, "op": "all_reduce", "sizes": [[8]], "state": "scheduled", "age": age}
        return {"at": "train.py:25 main", "groups": [dict(world(3), last=last)], "recorded": True}

    result = wire.PeekResult(
        ref=1,
        actor="train",
        groups=[answer([0, 2], waiting(0.4)), answer([1], waiting(0.3)), answer([3], waiting(0.3))],
        missing=[],
    )
    assert collectives_report.text(collectives_report.fold(result)).splitlines() == [
        "train: group 0 (world, 4 ranks): every rank entered #3",
        "  ranks[0-3] (4): #3 all_reduce [[8]], scheduled 0.3-0.4 s ago, not completed; at train.py:25 main",
    ]


def in_all_reduce(ranks: list[int]) -> wire.CastGroup:
    last = {"seq": 4, "op": "all_reduce", "sizes": [[8]], "state": "scheduled", "age": 2.0}
    return answer(ranks, {"at": "train.py:25 main", "groups": [dict(world(4), last=last)], "recorded": True})


def stacks_at(places: dict[int, tuple[int, str]]) -> wire.StacksResult:
    """Each rank's stack: one frame of train.py, at (line, function)."""
    groups = [
        wire.StackGroup([wire.ThreadStack("MainThread", [wire.Frame("train.py", line, function)])], RankSet.of([rank]))
        for rank, (line, function) in places.items()
    ]
    return wire.StacksResult(ref=1, actor="train", groups=groups, missing=[])


@pytest.mark.timeout(10)
def test_members_that_did_not_answer_are_named_with_why_and_every_rank_entered_is_never_said_of_them():
    """Rank 2 holds the GIL (the broker names it), rank 3 is not known to the broker (it names
    nothing): ranks 0-1 agree on #4, and that is all that can be said."""
    result = wire.PeekResult(
        ref=1, actor="train", groups=[in_all_reduce([0, 1])], missing=[wire.Missing(2, HOLDS_THE_GIL)]
    )
    report = collectives_report.fold(result)
    lines = collectives_report.text(report).splitlines()
    assert lines == [
        f"train: group 0 (world, 4 ranks): ranks[0,1] (2) entered #4; ranks[2] (1) did not answer: {HOLDS_THE_GIL}; "
        f"ranks[3] (1) did not answer: {collectives_report.NOT_KNOWN}",
        "  ranks[0,1] (2): #4 all_reduce [[8]], scheduled 2 s ago, not completed; at train.py:25 main",
    ], "each member named once, in its group"
    group = collectives_report.document(report)["groups"][0]
    assert group["every_rank_entered"] is None and group["disagreement"] is None
    assert group["did_not_answer"] == [
        {"ranks": [2], "count": 1, "reason": HOLDS_THE_GIL},
        {"ranks": [3], "count": 1, "reason": collectives_report.NOT_KNOWN},
    ]

    stacks = stacks_at({0: (25, "main"), 1: (25, "main"), 2: (41, "next_batch")})
    story = hang_report.fold("train", [stacks, stacks], 0.5, result)
    told = hang_report.text(story)
    assert "every rank entered" not in told, told
    assert f"== collectives:\n{lines[0]}\n" in told, told
    assert (
        f"== least progressed: train ranks[2,3] (2) at train.py:41 next_batch: did not answer in group 0: "
        f"{HOLDS_THE_GIL}; {collectives_report.NOT_KNOWN}\n"
    ) in told, told
    doc = hang_report.document(story)
    assert doc["collectives"]["groups"][0]["verdict"] == lines[0].partition("4 ranks): ")[2], "JSON and text agree"
    assert doc["least_progressed"]["ranks"] == [2, 3]


@pytest.mark.timeout(10)
def test_only_when_every_member_answered_is_every_rank_said_to_have_entered():
    every = wire.PeekResult(ref=1, actor="train", groups=[in_all_reduce([0, 1, 2, 3])], missing=[])
    assert collectives_report.text(collectives_report.fold(every)).startswith(
        "train: group 0 (world, 4 ranks): every rank entered #4\n"
    )
    assert collectives_report.document(collectives_report.fold(every))["groups"][0]["every_rank_entered"] == 4

    some = wire.PeekResult(ref=1, actor="train", groups=[in_all_reduce([0, 1])], missing=[])
    asked = collectives_report.fold(some, parse_selector("ranks(0,1)"))
    assert collectives_report.text(asked).startswith(
        "train: group 0 (world, 4 ranks): ranks[0,1] (2) entered #4; ranks[2,3] (2) not asked\n"
    ), "ranks the selection left out did not fail to answer"
    assert collectives_report.document(asked)["groups"][0]["not_asked"] == [2, 3]


@pytest.mark.timeout(10)
def test_members_torch_numbers_otherwise_than_the_job_are_counted_when_they_cannot_be_named():
    result = wire.PeekResult(ref=1, actor="train", groups=[in_all_reduce([10, 11])], missing=[])
    assert collectives_report.text(collectives_report.fold(result)).startswith(
        "train: group 0 (world, 4 ranks): ranks[10,11] (2) entered #4; "
        f"2 did not answer ({collectives_report.OTHERWISE_NUMBERED})\n"
    )
