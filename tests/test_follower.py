"""The shell's follower of ranks' output: every chunk once, in each session's order, with what
it missed fetched from the broker's log.

In process, fed the messages the link hands it; end to end, test_session_output.py shows the
same output reaching a shell.
"""

from __future__ import annotations

import pytest

from monarch_pdb import wire
from monarch_pdb.client.follow import Follower

pytestmark = pytest.mark.timeout(10)

JOB, ACTOR = "job-1", "trainer"


class Shown:
    """Stands in for the shell's printing: (actor, rank, text) as delivered."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, int, str]] = []

    def __call__(self, actor: str, rank: int, text: str) -> None:
        self.lines.append((actor, rank, text))

    def texts(self) -> list[str]:
        return [text for _, _, text in self.lines]


def following(*sessions: tuple[int, int, int]) -> tuple[Follower, Shown]:
    """A follower of ACTOR's ranks, started from the broker's (session, rank, last seq) triples."""
    follower, shown = Follower(), Shown()
    follower.start(wire.Following(job=JOB, actor=ACTOR, sessions=[wire.FollowedSession(*s) for s in sessions]), shown)
    return follower, shown


def printed(session: int, seq: int, text: str, rank: int = 0, actor: str = ACTOR, job: str = JOB) -> wire.Printed:
    return wire.Printed(session=session, seq=seq, job=job, actor=actor, rank=rank, text=text)


def log(session: int, *rows: tuple[int, str]) -> wire.OutputLog:
    return wire.OutputLog(session=session, rows=[wire.LogEntry(*row) for row in rows])


def test_chunks_in_sequence_are_delivered_as_they_arrive() -> None:
    follower, shown = following((7, 0, 0), (8, 1, 0))
    follower.printed(printed(7, 1, "a"))
    follower.printed(printed(8, 1, "x", rank=1))
    follower.printed(printed(7, 2, "b"))
    assert shown.lines == [(ACTOR, 0, "a"), (ACTOR, 1, "x"), (ACTOR, 0, "b")]
    assert not follower.has_requests() and follower.requests() == []


def test_what_came_before_following_began_is_not_delivered() -> None:
    follower, shown = following((7, 0, 4))
    follower.printed(printed(7, 4, "old"))
    follower.printed(printed(7, 5, "new"))
    assert shown.texts() == ["new"]


def test_a_chunk_received_twice_is_delivered_once() -> None:
    follower, shown = following((7, 0, 0))
    follower.printed(printed(7, 1, "a"))
    follower.printed(printed(7, 1, "a"))
    assert shown.texts() == ["a"]


def test_a_chunk_that_skips_ahead_waits_for_the_missing_ones_from_the_log() -> None:
    follower, shown = following((7, 0, 0))
    follower.printed(printed(7, 1, "a"))
    follower.printed(printed(7, 3, "c"))
    follower.printed(printed(7, 4, "d"))
    assert shown.texts() == ["a"]
    assert follower.has_requests()
    assert follower.requests() == [wire.OutputSince(session=7, since=1)]
    follower.caught_up(log(7, (2, "b"), (3, "c")))
    assert shown.texts() == ["a", "b", "c", "d"]


def test_a_gap_is_asked_about_once_until_its_answer_arrives() -> None:
    follower, shown = following((7, 0, 0))
    follower.printed(printed(7, 2, "b"))
    assert follower.requests() == [wire.OutputSince(session=7, since=0)]
    follower.printed(printed(7, 4, "d"))
    assert not follower.has_requests() and follower.requests() == []
    follower.caught_up(log(7, (1, "a"), (2, "b"), (3, "c")))
    assert shown.texts() == ["a", "b", "c", "d"]


def test_an_answer_that_leaves_a_gap_asks_again_from_where_it_stopped() -> None:
    follower, shown = following((7, 0, 0))
    follower.printed(printed(7, 4, "d"))
    follower.requests()
    follower.caught_up(log(7, (1, "a"), (3, "c")))
    assert shown.texts() == ["a"]
    assert follower.requests() == [wire.OutputSince(session=7, since=1)]


def test_once_the_subscription_is_live_every_followed_session_is_fetched_once() -> None:
    follower, shown = following((7, 0, 5), (8, 1, 0))
    assert follower.requests() == []
    follower.live()
    asked = follower.requests()
    assert sorted(asked, key=lambda m: m.session) == [
        wire.OutputSince(session=7, since=5),
        wire.OutputSince(session=8, since=0),
    ]
    follower.caught_up(log(7, (6, "f")))
    follower.caught_up(log(8))
    assert shown.lines == [(ACTOR, 0, "f")]
    follower.live()
    assert follower.requests() == []


def test_output_of_ranks_not_followed_is_ignored() -> None:
    follower, shown = following((7, 0, 0))
    follower.printed(printed(9, 1, "other rank", rank=2))
    follower.printed(printed(7, 1, "other actor", actor="evaluator"))
    follower.printed(printed(7, 1, "other job", job="job-2"))
    assert shown.lines == [] and follower.requests() == []


def test_a_session_a_followed_rank_opens_later_is_delivered_from_its_first_chunk() -> None:
    follower, shown = following((7, 0, 3))
    follower.printed(printed(12, 1, "next call", rank=0))
    assert shown.lines == [(ACTOR, 0, "next call")]
    follower.printed(printed(13, 2, "late", rank=0))
    assert follower.requests() == [wire.OutputSince(session=13, since=0)]


def test_nothing_is_delivered_once_following_stops() -> None:
    follower, shown = following((7, 0, 0))
    follower.printed(printed(7, 2, "b"))
    follower.requests()
    follower.stop()
    follower.printed(printed(7, 3, "c"))
    follower.caught_up(log(7, (1, "a"), (2, "b")))
    follower.live()
    assert shown.lines == [] and follower.requests() == []


def test_following_again_starts_from_the_new_numbers_and_forgets_held_chunks() -> None:
    follower, shown = following((7, 0, 0))
    follower.printed(printed(7, 3, "held"))
    follower.start(wire.Following(job=JOB, actor=ACTOR, sessions=[wire.FollowedSession(7, 0, 5)]), shown)
    assert follower.requests() == []
    follower.printed(printed(7, 6, "f"))
    assert shown.texts() == ["f"]
