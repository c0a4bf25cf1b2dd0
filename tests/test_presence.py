"""The agent's presence: which ranks of a process the broker is told of, and when.

In process, with the clock passed in as the link's thread passes it; end to end, `list --all`,
`stacks` and `interrupt` (test_stacks.py, test_launchers.py) rest on these rules.
"""

from __future__ import annotations

import os
import socket

import pytest

from monarch_pdb import wire
from monarch_pdb.rank import presence as presence_module
from monarch_pdb.rank.identity import Identity
from monarch_pdb.rank.presence import OWN_RECHECK, PRESENT_EVERY, Presence
from monarch_pdb.rank.rank_threads import RankThreads

pytestmark = pytest.mark.timeout(10)

JOB = "job-1"
T0 = 100.0


class Wakes:
    """Stands in for the link's `post`: counts how often the link's thread is woken."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def new_presence() -> tuple[Presence, RankThreads, Wakes]:
    threads, wakes = RankThreads(), Wakes()
    return Presence(threads, wakes), threads, wakes


def host(presence: Presence, *ranks: int) -> None:
    for rank in ranks:
        presence.host(JOB, "trainer", rank, {"gpu": rank})


def hosted(*ranks: int, added: bool) -> wire.Present:
    return wire.Present(ranks=[wire.PresentRank(JOB, "trainer", rank, {"gpu": rank}) for rank in ranks], added=added)


def own(actor: str, rank: int, instance: str = "") -> wire.PresentRank:
    return wire.PresentRank(JOB, actor, rank, {"host": 0}, instance)


def runs(threads: RankThreads, actor: str, rank: int, instance: str = "") -> None:
    """The process's newest call is now `actor`'s `rank` (as a Ray worker's next task is)."""
    threads.started(Identity(JOB, actor, rank, {"host": 0}, instance=instance))


def test_ranks_a_runtime_names_are_announced_all_at_first_then_only_the_new_ones() -> None:
    presence, _, wakes = new_presence()
    host(presence, 0, 1)
    assert wakes.count == 2
    assert presence.delay(T0) == 0.0
    assert presence.tick(T0) == hosted(0, 1, added=False)
    assert presence.delay(T0) is None and presence.tick(T0 + 60) is None
    host(presence, 2)
    assert presence.tick(T0 + PRESENT_EVERY) == hosted(2, added=True)


def test_ranks_named_at_once_share_one_announcement_per_quarter_second() -> None:
    presence, _, _ = new_presence()
    host(presence, 0)
    assert presence.tick(T0) == hosted(0, added=False)
    host(presence, 1)
    assert presence.delay(T0 + 0.1) == pytest.approx(PRESENT_EVERY - 0.1)
    assert presence.tick(T0 + 0.1) is None
    host(presence, 2, 3)
    assert presence.tick(T0 + PRESENT_EVERY) == hosted(1, 2, 3, added=True)


def test_a_rank_named_again_is_not_announced_again() -> None:
    presence, _, wakes = new_presence()
    host(presence, 0)
    presence.tick(T0)
    host(presence, 0)
    assert wakes.count == 1
    assert presence.delay(T0 + 60) is None and presence.tick(T0 + 60) is None


def test_after_a_reconnect_the_broker_is_told_every_rank_again() -> None:
    presence, _, _ = new_presence()
    host(presence, 0, 1)
    presence.tick(T0)
    host(presence, 2)
    presence.tick(T0 + PRESENT_EVERY)
    presence.welcomed()
    assert presence.tick(T0 + 2 * PRESENT_EVERY) == hosted(0, 1, 2, added=False)
    host(presence, 3)
    assert presence.tick(T0 + 3 * PRESENT_EVERY) == hosted(3, added=True)


def test_a_process_that_runs_no_rank_is_announced_to_no_broker() -> None:
    presence, _, _ = new_presence()
    presence.welcomed()
    assert presence.delay(T0) is None and presence.tick(T0) is None


def test_a_process_that_is_its_own_rank_is_announced_at_once_as_its_call_names_it() -> None:
    presence, threads, wakes = new_presence()
    runs(threads, "train", 3)
    presence.host_self()
    assert wakes.count == 1 and presence.own()
    assert presence.delay(T0) == 0.0
    assert presence.tick(T0) == wire.Present(ranks=[own("train", 3)])
    assert presence.tick(T0) is None
    presence.welcomed()
    assert presence.delay(T0) == 0.0
    assert presence.tick(T0) == wire.Present(ranks=[own("train", 3)])


def test_a_process_renamed_by_its_program_is_announced_again_at_once() -> None:
    presence, threads, wakes = new_presence()
    runs(threads, "train", 3)
    presence.host_self()
    presence.tick(T0)
    runs(threads, "trainer", 7)
    presence.renamed()
    assert wakes.count == 2
    assert presence.tick(T0 + 0.01) == wire.Present(ranks=[own("trainer", 7)])


def test_renaming_a_process_whose_ranks_a_runtime_names_announces_nothing() -> None:
    presence, _, wakes = new_presence()
    host(presence, 0)
    presence.tick(T0)
    presence.renamed()
    assert wakes.count == 1
    assert presence.delay(T0 + 60) is None


@pytest.fixture
def ray_loaded(monkeypatch):
    """The process runs under an engine that renames it without a word (Ray)."""
    monkeypatch.setattr(presence_module, "renamed_without_a_word", lambda: True)


def test_an_idle_process_no_engine_renames_never_wakes_its_link() -> None:
    presence, threads, _ = new_presence()
    runs(threads, "worker", 3)
    presence.host_self()
    assert presence.tick(T0) == wire.Present(ranks=[own("worker", 3)])
    assert presence.delay(T0) is None, "no look at its identity: nothing can change it unseen"
    assert presence.tick(T0 + 60) is None


@pytest.mark.usefixtures("ray_loaded")
def test_a_process_renamed_by_its_engine_is_noticed_within_a_recheck() -> None:
    presence, threads, _ = new_presence()
    runs(threads, "worker", 3)
    presence.host_self()
    presence.tick(T0)
    runs(threads, "Counter", 3, "actor 1f")
    assert presence.delay(T0) == OWN_RECHECK, "the link, which sends no heartbeat, wakes for the next look"
    assert presence.tick(T0 + OWN_RECHECK / 2) is None
    assert presence.tick(T0 + OWN_RECHECK) == wire.Present(ranks=[own("Counter", 3, "actor 1f")])
    assert presence.tick(T0 + 2 * OWN_RECHECK) is None


@pytest.mark.usefixtures("ray_loaded")
def test_a_process_is_announced_as_its_paused_session_names_it_while_one_is_open() -> None:
    presence, threads, _ = new_presence()
    runs(threads, "worker", 3)
    presence.host_self()
    presence.tick(T0)
    presence.paused_as(own("train_step", 3, "task 9"))
    assert presence.delay(T0) == 0.0
    assert presence.tick(T0) == wire.Present(ranks=[own("train_step", 3, "task 9")])
    presence.paused_as(own("train_step", 3, "task 9"))
    assert presence.delay(T0) == OWN_RECHECK, "nothing is due but the next look at its identity"
    assert presence.tick(T0 + OWN_RECHECK) is None
    presence.sessions_closed()
    assert presence.tick(T0 + 2 * OWN_RECHECK) == wire.Present(ranks=[own("worker", 3)])


def test_a_paused_session_does_not_rename_ranks_a_runtime_names() -> None:
    presence, _, _ = new_presence()
    host(presence, 0)
    presence.tick(T0)
    presence.paused_as(own("train_step", 0))
    assert presence.delay(T0 + 60) is None


def test_a_runtime_naming_ranks_replaces_the_process_own_rank() -> None:
    presence, threads, _ = new_presence()
    runs(threads, "worker", 3)
    presence.host_self()
    presence.tick(T0)
    host(presence, 0)
    assert not presence.own()
    assert presence.tick(T0 + PRESENT_EVERY) == hosted(0, added=False)
    presence.host_self()
    assert not presence.own()


def test_a_rank_whose_call_ended_is_announced_again_when_its_next_call_starts() -> None:
    presence, _, _ = new_presence()
    host(presence, 0, 1)
    presence.tick(T0)
    presence.call_ended((JOB, "trainer", 1), wire.RankState.FINISHED)
    presence.call_ended((JOB, "trainer", 9), wire.RankState.FINISHED)
    assert presence.delay(T0 + 60) is None
    host(presence, 1, 9)
    assert presence.tick(T0 + 60) == hosted(9, 1, added=True)
    host(presence, 1)
    assert presence.tick(T0 + 120) is None


def test_a_broker_that_welcomes_us_again_learns_which_ranks_finished_or_quit() -> None:
    presence, _, _ = new_presence()
    host(presence, 0, 1, 2)
    presence.tick(T0)
    presence.call_ended((JOB, "trainer", 0), wire.RankState.FINISHED)
    presence.call_ended((JOB, "trainer", 1), wire.RankState.QUIT)
    presence.welcomed()
    states = [(r.rank, r.state) for r in presence.tick(T0 + 60).ranks]
    assert states == [(0, "finished"), (1, "quit"), (2, "")]


def test_an_interrupted_rank_stops_as_the_rank_a_runtime_named_else_as_the_process() -> None:
    presence, threads, _ = new_presence()
    runs(threads, "worker", 3, "task 9")
    host(presence, 0)
    found = presence.identities("trainer", [0, 5])
    where = {"hostname": socket.gethostname(), "pid": os.getpid()}
    assert found == {
        0: Identity(JOB, "trainer", 0, {"gpu": 0}, **where),
        5: Identity(JOB, "worker", 3, {"host": 0}, instance="task 9", **where),
    }
