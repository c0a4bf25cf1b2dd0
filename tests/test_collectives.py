"""`collectives`' folding of the ranks' snapshots, as peek brings them: what the shell prints
when the job's Flight Recorder is off, and for ranks with no process group. A real torchrun job
with the recorder on is in test_engines_torchrun.py."""

from __future__ import annotations

import json

import pytest
from monarch_pdb.client import collectives

from monarch_pdb import wire
from monarch_pdb.rank.process_groups import NO_TORCH
from monarch_pdb.ranks import RankSet


def answer(ranks: list[int], snapshot: dict) -> wire.CastGroup:
    return wire.CastGroup(repr(json.dumps(snapshot)), "", RankSet.of(ranks))


def world(entered: int) -> dict:
    return {"name": "0", "desc": "world", "size": 4, "entered": entered}


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
    assert collectives.text(collectives.fold(result)).splitlines() == [
        "train: group 0 (world, 4 ranks): ranks[3] (1) never entered #1043, which ranks[0-2] (3) entered",
        "  ranks[0-2] (3): entered #1043; at train.py:17 main",
        "  ranks[3] (1): entered #1042; at train.py:41 next_batch",
        collectives.RECORDER_OFF,
    ]


@pytest.mark.timeout(10)
def test_ranks_in_step_and_ranks_without_torch_are_each_one_line():
    result = wire.PeekResult(
        ref=1,
        actor="train",
        groups=[
            answer([0, 1], {"at": "", "groups": [world(7)], "recorded": False}),
            answer([2, 3], {"at": "", "error": NO_TORCH}),
            wire.CastGroup("*** NameError: name 'torch' is not defined", "", RankSet.of([4])),
        ],
        missing=[wire.Missing(5, "no answer in time")],
    )
    report = collectives.fold(result)
    assert collectives.text(report).splitlines() == [
        "train: group 0 (world, 4 ranks): every rank entered #7",
        "  ranks[0,1] (2): entered #7",
        f"train ranks[2,3] (2): {NO_TORCH}",
        "train ranks[4] (1): NameError: name 'torch' is not defined",
        collectives.RECORDER_OFF,
        "no answer from train rank 5: no answer in time",
    ]
    assert collectives.document(report)["groups"][0]["disagreement"] is None


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
    assert collectives.text(collectives.fold(result)).splitlines() == [
        "train: group 0 (world, 4 ranks): every rank entered #3",
        "  ranks[0-3] (4): #3 all_reduce [[8]], scheduled 0.3-0.4 s ago, not completed; at train.py:25 main",
    ]
