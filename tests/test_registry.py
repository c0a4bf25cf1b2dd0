"""The broker's rules, as the registry keeps them: sessions and when their stops are news, who
holds a session, peers that reconnect or leave, and what is remembered of ranks that are gone."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys

import pytest

from monarch_pdb import wire
from monarch_pdb.broker import table_rows
from monarch_pdb.broker.entries import CannotServe, KeptOutput, Peer, Session
from monarch_pdb.broker.registry import Registry
from monarch_pdb.broker.table import Table

pytestmark = pytest.mark.timeout(10)

HERE = socket.gethostname()
STOP = wire.Prompt(
    sid=1,
    cmd=0,
    job="job",
    actor="train",
    rank=0,
    coords={"gpu": 0},
    host=HERE,
    pid=100,
    function="m.step",
    filename="step.py",
    lineno=3,
    output="> step.py(3)step()\n",
    prompt="(Pdb) ",
)


def agent(registry: Registry, identity: bytes, link: bytes = b"", ranks: tuple[int, ...] = ()) -> Peer:
    peer = Peer(
        identity=identity, role=wire.Role.RANK, name="job", host=HERE, pid=100, user="u", last_seen=0.0, link=link
    )
    registry.table.join(peer)
    registry.table.set_present(
        identity, [wire.PresentRank("job", "train", rank, {"gpu": rank}) for rank in ranks], added=False
    )
    return peer


def shell(registry: Registry, identity: bytes, host: str = HERE, pid: int = 1) -> Peer:
    peer = Peer(identity=identity, role="shell", name="shell", host=host, pid=pid, user="u", last_seen=0.0)
    registry.table.join(peer)
    return peer


def stop(registry: Registry, peer: bytes = b"agent", **fields) -> tuple[Session | None, bool]:
    return registry.table.prompt(peer, dataclasses.replace(STOP, **fields))


def paused_session(registry: Registry, rank: int = 0) -> Session:
    if registry.table.peer(b"agent") is None:
        agent(registry, b"agent")
    sess, _ = stop(registry, sid=rank + 1, rank=rank)
    return sess


def dead_pid() -> int:
    """The pid of a process of this host that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


# --- sessions and news ---------------------------------------------------------------------


def test_a_first_stop_is_news_and_the_same_prompt_said_again_is_nothing():
    registry = Registry()
    agent(registry, b"agent")
    sess, news = stop(registry)
    assert news and sess.paused and not sess.resumed
    assert stop(registry) == (None, False), "an agent says its prompt again after each handshake"


def test_a_stop_after_a_line_is_no_news_but_a_stop_after_a_top_level_continue_is():
    registry = Registry()
    sess = paused_session(registry)
    cmd = sess.resume(release=False)
    assert not sess.paused and sess.row().state == "running"
    assert stop(registry, cmd=cmd) == (sess, False)
    assert sess.paused and sess.resumed
    cmd = sess.resume(release=True)
    assert stop(registry, cmd=cmd - 1) == (None, False), "an older prompt is answered by the line sent since"
    assert stop(registry, cmd=cmd) == (sess, True)


def test_post_mortem_is_news_once():
    registry = Registry()
    sess = paused_session(registry)
    cmd = sess.resume(release=False)
    assert stop(registry, cmd=cmd, reason="post-mortem") == (sess, True)
    assert stop(registry, cmd=sess.resume(release=False), reason="post-mortem") == (sess, False)


def test_a_connection_past_its_session_limit_is_refused_and_keeps_what_it_has():
    registry = Registry(Table(sessions_per_connection=2))
    agent(registry, b"agent")
    stop(registry, sid=1, rank=0)
    stop(registry, sid=2, rank=1)
    with pytest.raises(
        CannotServe,
        match=r"^refused a session of train 2: this process already has 2 "
        r"\(MONARCH_PDB_MAX_SESSIONS_PER_CONNECTION\); it continues without stopping$",
    ):
        stop(registry, sid=3, rank=2)
    assert [row.rank for row in table_rows.rows(registry.table)] == [0, 1]


def test_a_rank_that_quit_is_listed_as_quit_until_it_stops_again():
    registry = Registry()
    agent(registry, b"agent", ranks=(0,))
    sess, _ = stop(registry)
    registry.table.end(sess, "quit")
    assert [row.state for row in table_rows.all_rows(registry.table)] == ["quit"]
    stop(registry, sid=2)
    assert [row.state for row in table_rows.all_rows(registry.table)] == ["breakpoint"]


def test_a_rank_whose_call_ended_is_finished_until_its_next_call_and_one_continued_runs():
    registry = Registry()
    agent(registry, b"agent", ranks=(0, 1))
    returned, _ = stop(registry, sid=1, rank=0)
    continued, _ = stop(registry, sid=2, rank=1)
    registry.table.end(returned, "returned")
    registry.table.end(continued, "continued")
    assert [row.state for row in table_rows.all_rows(registry.table)] == ["finished", "running"]
    registry.table.set_present(b"agent", [wire.PresentRank("job", "train", 0, {"gpu": 0})], added=True)
    assert [row.state for row in table_rows.all_rows(registry.table)] == ["running", "running"]


def test_a_rank_announced_as_finished_or_quit_is_listed_so_until_announced_running():
    registry = Registry()  # a broker that restarted: the process tells it how its ranks stand
    agent(registry, b"agent", ranks=())
    registry.table.set_present(
        b"agent",
        [
            wire.PresentRank("job", "train", 0, {}, state="finished"),
            wire.PresentRank("job", "train", 1, {}, state="quit"),
            wire.PresentRank("job", "train", 2, {}, state="breakpoint"),
        ],
        added=False,
    )
    assert [row.state for row in table_rows.all_rows(registry.table)] == ["finished", "quit", "running"]
    registry.table.set_present(b"agent", [wire.PresentRank("job", "train", 0, {})], added=True)
    assert [row.state for row in table_rows.all_rows(registry.table)] == ["running", "quit", "running"]


def test_the_ranks_of_a_process_gone_with_only_its_sessions_stay_listed_as_lost():
    registry = Registry()
    agent(registry, b"agent")
    stop(registry)
    registry.table.leave(b"agent", wire.Ending.LOST)
    assert [(row.rank, row.state) for row in table_rows.all_rows(registry.table)] == [(0, "lost")]


# --- output ---------------------------------------------------------------------------------


def test_a_rank_a_second_process_stops_as_stays_listed_beside_the_first_and_is_named_once():
    registry = Registry()
    agent(registry, b"first")
    peer = Peer(identity=b"second", role=wire.Role.RANK, name="job", host="host2", pid=200, user="u", last_seen=0.0)
    registry.table.join(peer)
    first, _ = stop(registry, b"first", rank=5, pid=os.getpid())  # a process that runs here
    second, _ = stop(registry, b"second", rank=5, host="host2", pid=200)
    assert [(r.host, r.pid) for r in table_rows.rows(registry.table)] == [(HERE, os.getpid()), ("host2", 200)]
    assert registry.table.take_twins() == [(first, second)] and registry.table.take_twins() == []
    assert registry.find("", "train", 5) is second
    again, _ = stop(registry, b"second", sid=2, rank=5, host="host2", pid=200)
    assert registry.table.take_twins() == [], "named once"
    registry.table.end(second)
    registry.table.end(again)
    assert registry.find("", "train", 5) is first, "the first stands for its rank again"


def test_a_rank_whose_process_is_gone_here_is_replaced_by_its_restart_without_a_word():
    registry = Registry()
    agent(registry, b"old")
    peer = Peer(identity=b"new", role=wire.Role.RANK, name="job", host=HERE, pid=101, user="u", last_seen=0.0)
    registry.table.join(peer)
    stop(registry, b"old", rank=5, pid=dead_pid())
    restarted, _ = stop(registry, b"new", rank=5, pid=101)
    assert registry.table.take_twins() == [] and registry.find("", "train", 5) is restarted


def test_a_slice_picks_ranks_and_other_threads_sessions_only_when_asked_or_named():
    registry = Registry()
    agent(registry, b"agent")
    stop(registry, rank=5)
    loader, _ = stop(registry, sid=2, rank=4242, instance="thread loader")
    assert [s.rank for s in registry.select("", "train", "ranks(:)")[0]] == [5]
    assert [s.rank for s in registry.select("", "train", "ranks(:, threads)")[0]] == [5, 4242]
    assert [s.rank for s in registry.select("", "train", "ranks(4242)")[0]] == [4242]
    registry.table.end(loader)
    assert registry.table.thread_sessions == 0


def test_a_replay_is_what_was_printed_since_the_last_input():
    log = KeptOutput(limit=100)
    log.add("> stop\n")
    log.mark_input()
    log.add("1\n")
    log.add("(Pdb) ")
    assert log.replay() == "1\n(Pdb) "
    assert log.since(1) == [wire.LogEntry(2, "1\n"), wire.LogEntry(3, "(Pdb) ")]


def test_output_is_kept_within_bounds_and_a_replay_says_what_was_not_kept():
    log = KeptOutput(limit=10)
    log.add("abcdef")
    log.add("ghijkl")
    assert log.size == 10 and log.since(0) == [wire.LogEntry(1, "cdef"), wire.LogEntry(2, "ghijkl")]
    assert log.replay() == "*** 2 earlier characters not kept (MONARCH_PDB_SESSION_HISTORY)\ncdefghijkl"
    log.mark_input()
    log.add("xyz")
    assert log.replay() == "xyz", "what was dropped before the input is no loss to a replay"


# --- who holds a session --------------------------------------------------------------------


def test_one_shell_holds_a_session_and_force_takes_it_naming_whom_from():
    registry = Registry()
    sess = paused_session(registry)
    first, second = shell(registry, b"first"), shell(registry, b"second", pid=2)
    registry.table.hold(b"first", sess)
    with pytest.raises(
        CannotServe,
        match=r"^train 0 is attached in another shell \(u@.+ pid 1\); "
        r"use 'attach --force' to take it over$",
    ):
        registry.table.hold(b"second", sess)
    assert registry.table.hold(b"second", sess, force=True) is first
    assert registry.table.held(b"first", sess.id) is None and registry.table.held(b"second", sess.id) is sess
    assert registry.table.hold(b"second", sess) is None, "holding it again takes it from nobody"


def test_detach_lets_go_only_of_what_the_shell_holds():
    registry = Registry()
    sess = paused_session(registry)
    shell(registry, b"first")
    shell(registry, b"second", pid=2)
    registry.table.hold(b"first", sess)
    registry.table.release(b"second", sess.id)
    assert registry.table.held(b"first", sess.id) is sess
    registry.table.release(b"first", sess.id)
    assert registry.table.hold(b"second", sess) is None


def test_a_shell_that_leaves_frees_what_it_held():
    registry = Registry()
    sess = paused_session(registry)
    shell(registry, b"first")
    shell(registry, b"second", pid=2)
    registry.table.hold(b"first", sess)
    gone = registry.table.leave(b"first", "lost")
    assert gone.freed == [sess] and not gone.ended
    assert registry.table.hold(b"second", sess) is None


def test_a_holder_whose_process_is_gone_from_this_host_holds_nothing():
    registry = Registry()
    sess = paused_session(registry)
    shell(registry, b"killed", pid=dead_pid())
    shell(registry, b"new", pid=2)
    registry.table.hold(b"killed", sess)
    assert registry.table.hold(b"new", sess) is None, "taken from nobody: no one to tell"
    assert registry.table.leave(b"killed", "lost").freed == [], "freed once, not again when its silence is noticed"


def test_a_holder_on_another_host_holds_on_whatever_its_pid_is_here():
    registry = Registry()
    sess = paused_session(registry)
    shell(registry, b"far", host="elsewhere", pid=dead_pid())
    shell(registry, b"new", pid=2)
    registry.table.hold(b"far", sess)
    with pytest.raises(CannotServe, match="is attached in another shell"):
        registry.table.hold(b"new", sess)


# --- peers that reconnect or leave ----------------------------------------------------------


def test_a_hello_said_again_on_a_known_connection_is_the_same_peer():
    registry = Registry()
    agent(registry, b"agent", link=b"one")
    assert registry.table.knows(b"agent", wire.Role.RANK, b"one")
    assert not registry.table.knows(b"agent", wire.Role.RANK, b"two") and not registry.table.knows(
        b"agent", "shell", b"one"
    )
    assert not registry.table.knows(b"other", wire.Role.RANK, b"one")


def test_an_agent_that_reconnects_on_a_new_socket_keeps_one_session_per_rank():
    registry = Registry()
    agent(registry, b"old", link=b"one")
    sess, _ = stop(registry, b"old")
    agent(registry, b"new", link=b"one")
    assert registry.table.peer(b"old") is None
    assert stop(registry, b"new") == (None, False), "the same session, which it says again"
    assert registry.table.session_of(b"new", 1) is sess and sess.peer == b"new"
    agent(registry, b"neighbour", link=b"two")
    stop(registry, b"neighbour", rank=1)
    assert [row.rank for row in table_rows.rows(registry.table)] == [0, 1], "another link of the process keeps its own"


def test_an_agent_that_leaves_ends_its_sessions_and_its_ranks_stay_listed_as_lost_or_finished():
    registry = Registry()
    agent(registry, b"lost", ranks=(0,))
    sess, _ = stop(registry, b"lost")
    agent(registry, b"done", ranks=(1,))
    gone = registry.table.leave(b"lost", "lost")
    assert gone.ended == [sess] and not gone.job_left, "another process of the job is left"
    assert registry.table.session_at(sess.id) is None and list(table_rows.rows(registry.table)) == []
    assert registry.table.leave(b"done", "returned").job_left
    assert [(row.rank, row.state) for row in table_rows.all_rows(registry.table)] == [(0, "lost"), (1, "finished")]
    assert registry.table.leave(b"done", "returned") is None


def test_an_agent_that_only_reconnected_leaves_no_departed_ranks():
    registry = Registry()
    agent(registry, b"agent", ranks=(0,))
    registry.table.leave(b"agent", "reconnected")
    assert list(table_rows.all_rows(registry.table)) == []


def test_departed_ranks_are_kept_within_bounds_the_latest_ones():
    registry = Registry(Table(departed_kept=3))
    for n in range(5):
        agent(registry, bytes([n]), ranks=(n,))
        registry.table.leave(bytes([n]), "lost")
    assert [row.rank for row in table_rows.all_rows(registry.table)] == [2, 3, 4]
    agent(registry, b"back", ranks=(3,))
    assert [(row.rank, row.state) for row in table_rows.all_rows(registry.table)] == [
        (2, "lost"),
        (3, "running"),
        (4, "lost"),
    ]


def test_silence_counts_only_for_brokers_and_only_from_when_the_broker_listens_again():
    registry = Registry()
    agent(registry, b"quiet")
    registry.table.join(
        Peer(identity=b"below", role=wire.Role.BROKER, name="broker@h", host="h", pid=1, user="", last_seen=0.0)
    )
    for identity in (b"quiet", b"below"):
        registry.table.heard(identity, now=10.0)
    assert registry.table.silent(now=13.5, limit=3.0, since=0.0) == [b"below"], "a rank may hold its GIL: no sign"
    assert registry.table.silent(now=13.5, limit=3.0, since=12.0) == [], "its messages waited unread"


# --- selectors ------------------------------------------------------------------------------


def test_a_selector_names_the_ranks_it_cannot_have_and_says_why_when_it_picks_none():
    registry = Registry()
    agent(registry, b"agent", ranks=(0, 1, 2))
    stop(registry, sid=1, rank=0)
    stop(registry, sid=2, rank=2, coords={"gpu": 2})
    chosen, absent = registry.select("", "train", "ranks(0,1,5)")
    assert [s.rank for s in chosen] == [0] and absent == [
        wire.Missing(1, "running"),
        wire.Missing(5, "no such rank is known"),
    ]
    with pytest.raises(CannotServe, match=r"^no dimension 'host' in train \(its dimensions: gpu\)$"):
        registry.select("", "train", "ranks(host=0)")
    with pytest.raises(CannotServe, match=r"matches no rank of train with a session \(those are ranks\[0,2\]\)$"):
        registry.select("", "train", "ranks(1)")
    assert [r.rank for r in registry.select("", "train", "ranks(1)", live=True)[0]] == [1]


def test_a_job_whose_processes_here_are_gone_gives_its_actor_name_up_to_the_live_one_at_once():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    registry = Registry()
    for identity, job, pid in ((b"old", "old", int(dead.stdout)), (b"new", "new", os.getpid())):
        registry.table.join(
            Peer(identity=identity, role=wire.Role.RANK, name=job, host=HERE, pid=pid, user="u", last_seen=0.0)
        )
        stop(registry, identity, job=job, pid=pid)
    assert [(s.job, s.rank) for s in registry.select("", "train", "ranks(:)")[0]] == [("new", 0)]
    assert [s.job for s in registry.table.paused()] == ["new"]
    assert set(registry.table.take_found_gone()) == {b"old"} and registry.table.take_found_gone() == []
    registry.table.peers[b"old"].host = "elsewhere"  # a process of another host may be alive: both count
    with pytest.raises(CannotServe, match=r"^actor train exists in 2 jobs \(new, old\); name it as job:train$"):
        registry.select("", "train", "ranks(:)")


def test_a_slice_that_picks_none_of_an_actors_thread_sessions_names_the_selector_that_does():
    registry = Registry()
    agent(registry, b"agent")
    stop(registry, sid=1, rank=4001, instance="thread loader")
    stop(registry, sid=2, rank=4002, instance="thread saver")
    with pytest.raises(
        CannotServe,
        match=r"^ranks\(:\) matches no rank of train with a session: those are other "
        r"threads' \(ranks\[4001,4002\]\); ranks\(:, threads\) picks them$",
    ):
        registry.select("", "train", "ranks(:)")
    assert [s.rank for s in registry.select("", "train", "ranks(:, threads)")[0]] == [4001, 4002]


# --- a broker below ----------------------------------------------------------------------------


def branch(registry: Registry, identity: bytes = b"below", host: str = "host1") -> Peer:
    peer = Peer(
        identity=identity, role=wire.Role.BROKER, name="broker@" + host, host=host, pid=7, user="u", last_seen=0.0
    )
    registry.table.join(peer)
    return peer


def row(rank: int, state: wire.RankState = wire.RankState.BREAKPOINT, lineno: int = 3, host: str = "host1"):
    return wire.SessionRow(
        "job", "train", rank, {"gpu": rank}, host, 200 + rank, "m.step", "step.py", lineno, state, ""
    )


def told(registry: Registry, rank: int, news: bool = False, **fields) -> Session:
    return registry.table.mirror(
        b"below", wire.BranchSession(id=1000 + rank, row=row(rank, **fields), prompt="(Pdb) ", news=news)
    )


def test_sessions_below_are_listed_where_they_stand_and_paused_only_while_stopped():
    registry = Registry()
    branch(registry)
    first = told(registry, 0, news=True)
    assert first.paused and not first.resumed and first.host == "host1"
    assert told(registry, 0, lineno=4) is first and first.lineno == 4 and first.resumed
    told(registry, 0, state=wire.RankState.RUNNING)
    assert not first.paused and list(table_rows.rows(registry.table)) == []
    told(registry, 1, news=True)
    assert [r.rank for r in table_rows.rows(registry.table)] == [1] and registry.find("", "train", 1).peer == b"below"


def test_ranks_below_without_a_session_are_live_listed_and_named_when_a_selector_wants_them():
    registry = Registry()
    branch(registry)
    told(registry, 0, news=True)
    registry.table.set_below(
        b"below",
        [row(1, wire.RankState.RUNNING), row(2, wire.RankState.FINISHED)],
        [wire.JobRow("job", 3, 0, 0, ["host1"])],
        added=False,
    )
    assert [(r.rank, r.state) for r in table_rows.all_rows(registry.table)] == [
        (0, "breakpoint"),
        (1, "running"),
        (2, "finished"),
    ]
    assert [(r.rank, r.peer) for r in registry.live_ranks("", "train")] == [(0, b"below"), (1, b"below")]
    chosen, absent = registry.pick("job", "train", [0, 1, 2, 3])
    assert [s.rank for s in chosen] == [0]
    assert absent == [wire.Missing(1, "running"), wire.Missing(2, "finished"), wire.Missing(3, "no such rank is known")]
    assert table_rows.job_rows(registry.table) == [wire.JobRow("job", 3, 1, 1, ["host1"])]


def test_a_broker_below_that_is_gone_leaves_every_rank_of_it_lost():
    registry = Registry()
    branch(registry)
    told(registry, 0, news=True)
    registry.table.set_below(b"below", [row(1, wire.RankState.RUNNING)], [], added=False)
    gone = registry.table.leave(b"below", wire.Ending.RETURNED)
    assert [s.rank for s in gone.ended] == [0] and not gone.job_left
    assert [(r.rank, r.state) for r in table_rows.all_rows(registry.table)] == [(0, "lost"), (1, "lost")]
    assert registry.table.sessions == {}


def test_a_selector_never_refuses_a_parent_that_asks_for_ranks_it_knew():
    registry = Registry()
    assert registry.pick("job", "nobody", [0]) == ([], [wire.Missing(0, "no such rank is known")])


def test_a_broker_known_to_be_silent_is_not_found_silent_again_at_every_tick():
    registry = Registry()
    below = branch(registry)
    assert registry.table.silent(now=13.5, limit=3.0, since=0.0) == [b"below"]
    below.silent = True
    assert registry.table.silent(now=14.0, limit=3.0, since=0.0) == [], "told once"
