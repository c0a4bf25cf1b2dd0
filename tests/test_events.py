"""Events reach every shell in order and without gaps, and read as folded lines."""

from __future__ import annotations

import re
import textwrap
import threading

import pytest
from programs import EXAMPLES, Program, settings_for, wait_for_sessions

from monarch_pdb import wire
from monarch_pdb.broker.events import EventLog
from monarch_pdb.client.commands.event_lines import describe_events
from monarch_pdb.client.connection import BrokerConnection


@pytest.mark.timeout(60)
def test_every_stop_is_delivered_once_in_order_and_can_be_asked_for_again(env):
    program = Program(env, EXAMPLES / "debugging.py")
    got: list[wire.Event] = []
    try:
        wait_for_sessions(env, 1)
        conn = BrokerConnection.open(settings_for(env), on_events=got.extend)
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

        conn = BrokerConnection.open(settings_for(env), on_events=collect_late)
        try:
            conn.link._seq = 0  # as if its subscription had started before the first event
            assert caught_up.wait(10), "the next tick reveals the gap and the shell catches up"
        finally:
            conn.close()
        assert late[-len(got) :] == got
        assert sorted(r for e in got if e.kind == "post-mortem" for r in e.rank_list()) == [2, 6, 10, 14]
        assert sorted(r for e in got if e.kind == "ended" for r in e.rank_list()) == list(range(16))
    finally:
        program.stop()


def event(kind: str, rank: int, where: str = "debugging.py:11", detail: str = "") -> wire.Event:
    return wire.Event(
        seq=rank, kind=kind, job="j", actor="debugee", ranks=str(rank), count=1, where=where, detail=detail
    )


@pytest.mark.timeout(60)
def test_ranks_whose_call_finished_are_listed_as_finished_as_the_event_says(env, example, shell):
    sh = shell()
    sh.command("continue")
    sh.expect(r"debugee ranks\[0,1,3-5,7-9,11-13,15\] \(12\) finished$")
    rows = wait_for_sessions(env, 4, state="post-mortem")
    assert sorted(r.rank for r in rows) == [2, 6, 10, 14]
    states = re.findall(r"^\| debugee +\| (\d+) .*\| (\S+) +\|$", sh.command("list --all"), re.M)
    assert states == [(str(r), "post-mortem" if r % 4 == 2 else "finished") for r in range(16)]


@pytest.mark.timeout(10)
def test_events_fold_into_one_line_per_actor_and_kind():
    stops = [event("breakpoint", r, f"debugging.py:{11 + 4 * (r % 4)}") for r in range(16)]
    assert describe_events(stops) == ["debugee ranks[0-15] (16) stopped at debugging.py:11,15,19,23"]
    mortem = [event("post-mortem", r, "debugging.py:5", "ValueError: bad rank") for r in (2, 6)]
    ended = [
        event("ended", 3, detail="returned"),
        event("ended", 4, detail="quit"),
        event("lost", 9),
        event("ended", 7, detail="continued"),
        event("ended", 8, detail="continued"),
    ]
    assert describe_events(mortem + ended) == [
        "debugee ranks[2,6] (2) entered post-mortem at debugging.py:5: ValueError: bad rank",
        "debugee 3 finished",
        "debugee 4 finished (quit)",
        "debugee 9 was lost (its process or its connection is gone)",
        "debugee ranks[7,8] (2) are running again (continued)",
    ], "a rank continued out of the debugger runs on: it did not finish"
    paused_and_running = [event("lost", r, detail="lost") for r in (0, 1)] + [
        event("lost", r, "", "lost") for r in (2, 3)
    ]
    assert describe_events(paused_and_running) == [
        "debugee ranks[0-3] (4) were lost (their processes or connections are gone)"
    ]


@pytest.mark.timeout(10)
def test_a_pass_of_the_broker_folds_what_happened_to_many_ranks_into_one_event_each_rank_in_order():
    log = EventLog()
    for rank in range(256):
        log.add(wire.EventKind.BREAKPOINT, "j", "debugee", rank, "debugging.py:11")
    log.add(wire.EventKind.ENDED, "j", "debugee", 5, detail="returned")
    log.add(wire.EventKind.BREAKPOINT, "j", "debugee", 5, "debugging.py:11")
    log.add(wire.EventKind.BREAKPOINT, "j", "debugee", 300, "debugging.py:11")
    log.add_broker(wire.EventKind.BROKER_LOST, "host1", 4096, "stopped answering")
    log.add(wire.EventKind.BREAKPOINT, "j", "debugee", 301, "debugging.py:11")
    events = log.take()
    assert [(e.seq, e.kind, e.ranks, e.count) for e in events] == [
        (1, "breakpoint", "0-255", 256),
        (2, "ended", "5", 1),
        (3, "breakpoint", "5,300", 2),
        (4, "broker-lost", "", 4096),
        (5, "breakpoint", "301", 1),
    ], "rank 5 stops again after it ended, and nothing is told before the broker's loss that came after it"
    assert log.take() == []
    assert [row.seq for row in log.since(3)] == [4, 5]
    assert describe_events(events[:3]) == [
        "debugee ranks[0-255,300] (257) stopped at debugging.py:11",
        "debugee 5 finished",
    ]


@pytest.mark.timeout(10)
def test_the_attached_ranks_own_stops_are_left_to_its_prompt():
    stops = [
        wire.Event(seq=1, kind="breakpoint", job="j", actor="debugee", ranks="0-3", count=4, where="debugging.py:11")
    ]
    assert describe_events(stops, attached=("j", "debugee", 2)) == [
        "debugee ranks[0,1,3] (3) stopped at debugging.py:11"
    ]
    alone = [
        wire.Event(seq=2, kind="breakpoint", job="j", actor="debugee", ranks="2", count=1, where="debugging.py:11")
    ]
    assert describe_events(alone, attached=("j", "debugee", 2)) == []


TRICKLE = textwrap.dedent("""
    import threading
    import time

    import monarch_pdb


    def rank_main(rank):
        with monarch_pdb.endpoint_call("many", rank, {"gpu": rank}):
            time.sleep(0.5 + rank * 0.05)  # a stop every 50 ms: the shell's fold stays open a second
            value = rank
            breakpoint()
            return value


    monarch_pdb.install()
    for rank in range(40):
        threading.Thread(target=rank_main, args=(rank,), daemon=True).start()
    threading.Event().wait()
""")


@pytest.mark.timeout(90)
def test_what_a_shell_heard_before_a_command_was_typed_is_shown_before_its_answer(env, tmp_path, broker, shell):
    script = tmp_path / "trickle.py"
    script.write_text(TRICKLE)
    sh = shell()
    program = Program(env, script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 1)
        sh.command("cast many ranks(0) p value")
        screen = sh.text  # the stop is shown above the prompt before the command, or first in its output
        # (above the prompt it is printed over the erased prompt, which the plain text keeps before it)
        stop = re.search(r"^(monarch_dbg> )?many (0|ranks\[0[],-].*) stopped at trickle\.py:\d+$", screen, re.M)
        assert stop and stop.start() < screen.rindex("many ranks[0] (1)\n0\n"), screen[-2000:]
    finally:
        program.stop()


@pytest.mark.timeout(120)
def test_wait_tells_every_stop_it_counted_before_it_says_they_all_stopped(env, tmp_path, broker, shell):
    script = tmp_path / "trickle.py"
    script.write_text(TRICKLE)
    sh = shell()
    program = Program(env, script, cwd=tmp_path)
    try:
        out = sh.command("wait many 40 --timeout 60", timeout=70)
        told, said, after = out.partition("40 ranks of many stopped\n")
        assert said and "stopped at" not in after, out
        counts = re.findall(r"^many (?:\d+|ranks\[[^]]*\] \((\d+)\)) stopped at trickle\.py:\d+$", told, re.M)
        assert sum(int(n) if n else 1 for n in counts) == 40, out
    finally:
        program.stop()
