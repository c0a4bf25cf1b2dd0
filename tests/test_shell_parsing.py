"""The shell's own parsing never fails with anything but its one-line CommandError."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from monarch_pdb.client.shell import CommandError, whole_number, parse_target

WORDS = st.sampled_from(["debugee", "job:debugee", ":", "ranks(", "ranks(1,,2)", "ranks(:)", "ranks(host=1)", "p x",
                         "!", "?", ")", "(", " ", "\t", "0", "-1", "ranks(1)", "c", "\x00", "é"])


@pytest.mark.timeout(60)
@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=60), st.lists(WORDS, max_size=8).map(" ".join)))
def test_parse_target_accepts_or_explains_in_one_line(text):
    try:
        job, actor, selection, rest = parse_target(text, "usage")
    except CommandError as error:
        assert "\n" not in str(error) and str(error)
        return
    assert actor == text.strip().partition(" ")[0].rpartition(":")[2]
    assert selection is not None or rest == ""


@pytest.mark.timeout(60)
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
@example("²")
@example("٣")
def test_ranks_and_counts_are_only_ascii_whole_numbers(text):
    plain = text.isascii() and text.isdigit()
    try:
        assert whole_number(text, "rank") == int(text) and plain
    except CommandError as error:
        assert not plain and "\n" not in str(error)
