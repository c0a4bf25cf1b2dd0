"""The editor's runtime without DAP: the guide's 16 ranks, a real broker, and what the runtime
tells its owner (typed happenings), with no JSON in sight."""

from __future__ import annotations

import os
import queue
import time

import pytest
from programs import stop_line
from test_dap import loops  # noqa: F401 (the fixture of two looping ranks)

from monarch_pdb import settings as settings_module
from monarch_pdb import wire
from monarch_pdb.client.connection import readable
from monarch_pdb.client.editor import runtime as rt

BREAK_LINES = {0: 11, 1: 15, 2: 19, 3: 23}


class Driven:
    """The runtime with the adapter's loop played by `until`: the broker's events and replies
    handed to `heard` on the test's thread, each happening kept in order."""

    def __init__(self, env: dict[str, str]) -> None:
        self.happenings: list[rt.Happening] = []
        self.inbox: queue.SimpleQueue[list[wire.Event]] = queue.SimpleQueue()
        self.wake_r, self.wake_w = os.pipe()
        self.settings = settings_module.load(env)
        self.runtime = rt.Runtime(self.happenings.append, self.hand_over, self.settings)

    def hand_over(self, events: list[wire.Event]) -> None:
        self.inbox.put(events)
        os.write(self.wake_w, b"!")

    def attach(self, **options) -> None:
        self.runtime.connect(self.settings, rt.Options(**options))
        self.runtime.configure()

    def until(self, found, timeout: float = 60.0):
        """Hand the broker's news to the runtime until `found()` is true; its value."""
        deadline = time.monotonic() + timeout
        while True:
            while not self.inbox.empty():
                self.runtime.heard(self.inbox.get())
            while (reply := self.runtime.conn.next_reply(0)) is not None:
                self.runtime.heard(reply)
            result = found()
            left = deadline - time.monotonic()
            if result or left <= 0:
                assert result, f"not within {timeout} s; the runtime told {self.happenings}"
                return result
            if self.wake_r in readable([self.wake_r, self.runtime.conn.signal_fd], left):
                os.read(self.wake_r, 4096)

    def taken(self, kind: type, **match) -> list:
        """The happenings of `kind` with `match`, removed from those kept."""
        taken = [
            h
            for h in self.happenings
            if isinstance(h, kind) and all(getattr(h, name) == value for name, value in match.items())
        ]
        self.happenings[:] = [h for h in self.happenings if not any(h is t for t in taken)]
        return taken

    def wait(self, kind: type, count: int = 1, timeout: float = 60.0, **match) -> list:
        seen: list = []
        self.until(lambda: len(seen) >= count or seen.extend(self.taken(kind, **match)) or len(seen) >= count, timeout)
        return seen

    def by_rank(self) -> dict[int, rt.Thread]:
        return {t.rank: t for t in self.runtime.threads.values()}

    def line(self, thread: rt.Thread) -> int:
        return self.runtime.inspect(thread, wire.Query.STACK, mine=True).items[0].line

    def close(self) -> None:
        self.runtime.close()
        os.close(self.wake_r)
        os.close(self.wake_w)


@pytest.fixture
def driven(env):
    driving = Driven(env)
    yield driving
    driving.close()


@pytest.mark.timeout(120)
def test_paused_ranks_are_held_threads_told_stopped_at_entry_and_a_step_moves_only_its_rank(example, driven):
    driven.attach()
    stops = driven.wait(rt.Stopped, 16, reason="entry")
    by_rank = driven.by_rank()
    assert sorted(by_rank) == list(range(16)) and {s.thread.rank for s in stops} == set(range(16))
    assert all(t.session for t in by_rank.values()), "every thread's session is held, as a shell holds one"
    before = {rank: driven.line(thread) for rank, thread in by_rank.items()}
    assert before[5] == stop_line(BREAK_LINES[1])

    driven.runtime.step(by_rank[4], "next")
    assert driven.taken(rt.Ran) == [rt.Ran(by_rank[4], told=False)], "the editor's own step is not news to it"
    stop = driven.wait(rt.Stopped, reason="step")[0]
    assert stop.thread is by_rank[4] and stop.own
    after = {rank: driven.line(thread) for rank, thread in by_rank.items()}
    assert after == {**before, 4: before[4] + 1}


@pytest.mark.timeout(120)
def test_a_console_line_that_did_not_run_the_rank_tells_nothing_and_one_that_did_is_its_stop(example, driven):
    driven.attach()
    driven.wait(rt.Stopped, 16, reason="entry")
    thread = driven.by_rank()[9]
    thread.stop = driven.runtime.inspect(thread, wire.Query.STACK).stop
    assert driven.runtime.pdb_line(thread, "p rank") == "9"
    assert not driven.taken(rt.Stopped) and not driven.taken(rt.PrintedByRank), "its answer is the line's result only"
    line = driven.line(thread)
    driven.runtime.pdb_line(thread, "n")
    assert [(s.thread, s.reason, s.own) for s in driven.taken(rt.Stopped)] == [(thread, "step", True)]
    assert driven.line(thread) == line + 1


@pytest.mark.timeout(120)
def test_continue_all_runs_every_thread_and_the_broker_news_is_told_once_each(example, driven):
    driven.attach()
    driven.wait(rt.Stopped, 16, reason="entry")
    by_rank = driven.by_rank()
    driven.runtime.continue_all()
    assert sorted(r.thread.rank for r in driven.taken(rt.Ran)) == list(range(16))
    raising = [rank for rank in range(16) if rank % 4 == 2]
    stops = driven.wait(rt.Stopped, len(raising), reason="exception")
    exited = driven.wait(rt.ThreadExited, 16 - len(raising))
    assert sorted(s.thread.rank for s in stops) == raising
    assert sorted(e.thread.rank for e in exited) == [rank for rank in range(16) if rank not in raising]
    assert sorted(driven.by_rank()) == raising and not driven.taken(rt.Ran), "no rank was told running twice"
    assert driven.runtime.inspect(by_rank[2], wire.Query.EXCEPTION).items[0].name == "ValueError"


@pytest.mark.timeout(60)
def test_a_selector_the_shell_would_refuse_is_refused_with_its_reason(env):
    with pytest.raises(rt.Refused, match="^ranks: "):
        rt.Debuggee.parse("trainer ranks(0:")
    assert rt.Debuggee.parse("trainer ranks(0:8)") == rt.Debuggee("", "trainer", "ranks(0:8)")


@pytest.mark.timeout(120)
def test_stop_all_interrupts_the_actors_other_running_rank_when_one_raises(loops, driven, tmp_path):
    loops()
    driven.attach(stop_all=True)
    assert driven.runtime.stop_on_uncaught(True) == ""
    (tmp_path / "stop-0").touch()
    raised = driven.wait(rt.Stopped, reason="exception")[0]
    paused = driven.wait(rt.Stopped, reason="pause")[0]
    assert (raised.thread.rank, paused.thread.rank) == (0, 1)
    assert driven.taken(rt.Changed), "a view of the ranks is told they changed"
    assert [group.state for group in sorted(driven.runtime.groups(), key=lambda g: g.ranks)] == [
        wire.RankState.POST_MORTEM,
        wire.RankState.INTERRUPTED,
    ]
