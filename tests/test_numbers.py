"""Numeric summaries of casts: what counts as a number, and a thousand answers on one screen."""

from __future__ import annotations

import math

import pytest

from monarch_pdb import wire
from monarch_pdb.client.commands import answers
from monarch_pdb.client.commands.numbers import number, summarize


@pytest.mark.parametrize(
    "printed, value",
    [
        ("3\n", 3.0),
        ("-2.5e3", -2500.0),
        (".5", 0.5),
        ("tensor(0.5000)", 0.5),
        ("tensor(nan, device='cuda:0')", math.nan),
        ("tensor(1.2500, dtype=torch.float16)", 1.25),
        ("tensor(-inf)", -math.inf),
        ("array(0.25)", 0.25),
        ("np.float64(0.125)", 0.125),
        ("np.int64(7)", 7.0),
        ("inf", math.inf),
    ],
)
def test_numbers_and_zero_dimensional_tensors_are_read(printed, value):
    got = number(printed)
    assert got is not None and (got == value or (math.isnan(got) and math.isnan(value)))


@pytest.mark.parametrize(
    "printed",
    [
        "'3'",
        "[1]",
        "tensor([1., 2.])",
        "3)",
        "(3",
        "True",
        "*** NameError: name 'x' is not defined",
        "",
        "1 2",
        "array([0.5])",
    ],
)
def test_other_answers_are_not_numbers(printed):
    assert number(printed) is None


def test_a_nan_and_an_outlier_are_named_and_a_thousand_ranks_fit_on_one_screen():
    groups = [wire.CastGroup(f"{1.0 + rank / 100000:.5f}\n", "", [rank]) for rank in range(1024)]
    groups[5].output, groups[700].output = "tensor(nan)\n", "9.5\n"
    result = wire.CastResult(ref=1, actor="trainer", groups=groups, missing=[])
    text = answers.grouped(result)
    assert len(text.splitlines()) <= 50
    assert "trainer ranks[5] (1)\ntensor(nan)\n" in text and "trainer ranks[700] (1)\n9.5\n" in text
    summary = text.splitlines()[-1]
    assert summary.startswith("numbers: count 1024, min 1 (rank 0), max 9.5 (rank 700), mean 1.0")
    assert summary.endswith("NaN/Inf 1 ranks[5], beyond 3 sd 1 ranks[700]")
    assert "... 1007 more ranks with other values" in text, "16 most common values, and the outlier"
    assert answers.document(result)["numbers"]["outliers"] == [700]


def test_no_summary_when_the_numbers_are_all_equal_or_fewer_than_the_other_answers():
    assert summarize([wire.CastGroup("4\n", "", [0, 1, 2])]) is None
    assert summarize([wire.CastGroup("4\n", "", [0]), wire.CastGroup("'x'\n", "", [1])]) is None
    assert (
        summarize(
            [
                wire.CastGroup("4\n", "", [0]),
                wire.CastGroup("5\n", "", [1]),
                wire.CastGroup("*** NameError: name 'loss' is not defined\n", "", [2, 3]),
            ]
        )
        is None
    )


def test_ranks_whose_answer_is_no_number_are_named_and_shown_beside_the_numbers():
    groups = [wire.CastGroup(f"{1.0 + rank / 100000:.5f}\n", "", [rank]) for rank in range(1024)]
    groups[5].output = "*** no frame of train_step on the rank's stack\n"
    result = wire.CastResult(ref=1, actor="trainer", groups=groups, missing=[])
    text = answers.grouped(result)
    assert "trainer ranks[5] (1)\n*** no frame of train_step on the rank's stack\n" in text
    assert text.splitlines()[-1] == (
        "numbers: count 1023, min 1 (rank 0), max 1.01023 (rank 1023), mean 1.00512, "
        "NaN/Inf 0, beyond 3 sd 0, no number 1 ranks[5]"
    )
    assert answers.document(result)["numbers"]["other"] == [5]
