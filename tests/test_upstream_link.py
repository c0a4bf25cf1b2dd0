"""A root broker and a host broker below it. The link between them stays one registration
while the parent seems silent to the host: through a storm of stops longer than the silence
limit, and through a parent that stalls past it; either way no rank's stop is announced twice
at the root. Ranks running a line of the root's cast are told up by the cast's result. A rank
given the root's address and the secret file starts its host's broker below the root."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from programs import (
    BrokerLog,
    Program,
    free_port,
    settings_for,
    start_broker,
    stop_broker,
    wait_for_all_rows,
    wait_for_sessions,
)

from monarch_pdb import wire
from monarch_pdb.client.connection import BrokerConnection

RANKS = textwrap.dedent("""
    import sys
    import threading
    import time

    import monarch_pdb


    def rank_main(rank, apart):
        time.sleep(rank * apart)
        with monarch_pdb.endpoint_call("storm", rank, {"rank": rank}):
            breakpoint()


    monarch_pdb.install()
    count, apart = int(sys.argv[1]), float(sys.argv[2])
    threads = [threading.Thread(target=rank_main, args=(r, apart)) for r in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
""")
SILENCE = "0.5"
"""Seconds the host broker waits to hear from its parent before it says hello again."""
STALL = 2.0
"""How long the stalled parent stays stopped: longer than the host's silence limit."""


class Tree:
    """A root broker, and a host broker below it whose ranks the test runs; every stop the
    root announces is kept."""

    def __init__(self, env: dict[str, str], tmp_path: Path) -> None:
        shared = {"MONARCH_PDB_SECRET": secrets.token_hex(32), "MONARCH_PDB_HEARTBEAT": "0.2"}
        self.root_env = dict(env, MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "root"), **shared)
        self.host_env = dict(env, MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "host"), **shared)
        self.tmp_path = tmp_path
        self.root, first = start_broker(self.root_env)
        port = self.root_port = re.search(r"tcp://127\.0\.0\.1:(\d+)", first).group(1)
        self.host, _ = start_broker(
            dict(self.host_env, MONARCH_PDB_CONNECT_TIMEOUT=SILENCE), "--upstream", f"127.0.0.1:{port}"
        )
        self.host_log = BrokerLog(self.host)
        self.events: list[wire.Event] = []
        self.programs: list[Program] = []
        self.host_gone = threading.Event()
        self.conn = BrokerConnection.open(settings_for(self.root_env), on_events=self.seen)

    def seen(self, batch: list[wire.Event]) -> None:
        self.events.extend(batch)
        if any(e.kind == wire.EventKind.BROKER_LOST for e in batch):
            self.host_gone.set()

    def ranks(self, count: int, apart: float) -> Program:
        """`count` ranks under the host, stopping `apart` seconds after one another; they are
        stopped with the tree."""
        script = self.tmp_path / "ranks.py"
        script.write_text(RANKS)
        self.programs.append(Program(self.host_env, script, str(count), str(apart), cwd=self.tmp_path))
        return self.programs[-1]

    def end_host(self) -> tuple[list[int], str]:
        """Stop the host broker; the ranks the root announced stopped, once the root has said
        the host is gone (after every event before it), and what the host logged."""
        log = self.host_log.stop()
        assert self.host_gone.wait(10), self.events
        return sorted(r for e in self.events if e.kind == wire.EventKind.BREAKPOINT for r in e.rank_list()), log

    def close(self) -> None:
        for program in self.programs:
            program.stop()
        self.conn.close()
        if self.host.poll() is None:
            self.host_log.stop()
        if self.root.poll() is None:
            stop_broker(self.root)


@contextmanager
def tree(env: dict[str, str], tmp_path: Path) -> Iterator[Tree]:
    built = Tree(env, tmp_path)
    try:
        yield built
    finally:
        built.close()


@pytest.mark.timeout(60)
def test_a_storm_longer_than_the_parents_silence_limit_announces_each_stop_once(env, tmp_path):
    with tree(env, tmp_path) as t:
        t.ranks(40, apart=0.05)  # a stop every 50 ms for two seconds, each told upward
        wait_for_sessions(t.root_env, 40)
        stops, log = t.end_host()
        assert stops == list(range(40)), stops
        assert log.count("registered with the broker above") == 1, log


@pytest.mark.timeout(60)
def test_a_parent_that_stalls_past_the_silence_limit_keeps_its_branch_and_hears_no_stop_again(env, tmp_path):
    with tree(env, tmp_path) as t:
        t.ranks(4, apart=0.0)
        wait_for_sessions(t.root_env, 4)
        os.kill(t.root.pid, signal.SIGSTOP)
        try:
            with pytest.raises(subprocess.TimeoutExpired):
                t.host.wait(STALL)  # the host lives on while its parent is stopped
        finally:
            os.kill(t.root.pid, signal.SIGCONT)
        result = t.conn.cast("storm", "ranks(:)", "p rank", timeout=10)
        assert [(g.output, list(g.ranks)) for g in result.groups] == [(f"{r}\n", [r]) for r in range(4)]
        stops, log = t.end_host()
        assert stops == [0, 1, 2, 3], stops
        assert log.count("registered with the broker above") == 1, log


@pytest.mark.timeout(60)
def test_a_shell_attached_through_a_parent_that_stalls_past_the_silence_limit_stays_attached(env, tmp_path, shell):
    with tree(env, tmp_path) as t:
        t.ranks(2, apart=0.0)
        wait_for_sessions(t.root_env, 2)
        env.update(t.root_env)
        sh = shell()
        assert "Attached to debug session for storm 0" in sh.command("attach storm 0")
        os.kill(t.root.pid, signal.SIGSTOP)
        try:
            sh.child.sendline("p rank")
            t.host_log.wait_for(f"the broker above at 127.0.0.1:{t.root_port} does not answer")
        finally:
            os.kill(t.root.pid, signal.SIGCONT)
        answer = sh.expect(r"^0$|took over|Detach")
        assert answer.group() == "0", f"the line typed during the stall is answered:\n{sh.text}"
        assert sh.wait_prompt() == "(Pdb)"
        t.host_log.wait_for(f"the broker above at 127.0.0.1:{t.root_port} answers again")
        assert sh.command("p rank + 1").strip() == "1"
        assert "Detached from debug session for storm 0" in sh.command("detach")


@pytest.mark.timeout(60)
def test_ranks_still_running_a_roots_cast_when_its_time_is_up_are_listed_as_running_there(env, tmp_path):
    with tree(env, tmp_path) as t:
        t.ranks(2, apart=0.0)
        wait_for_sessions(t.root_env, 2)
        result = t.conn.cast("storm", "ranks(:)", "p __import__('time').sleep(4)", timeout=2)
        assert [(m.rank, m.reason) for m in result.missing] == [(0, "still running"), (1, "still running")]
        assert t.conn.request(wire.ListSessions(), wire.SessionList).rows == []
        wait_for_all_rows(
            t.root_env,
            lambda rows: (
                [(r.rank, r.state) for r in rows] == [(0, wire.RankState.BREAKPOINT), (1, wire.RankState.BREAKPOINT)]
            ),
        )  # stopped again, where they were


@pytest.mark.timeout(60)
def test_a_rank_with_an_upstream_starts_its_hosts_broker_which_registers_with_the_root(env, tmp_path):
    secret = tmp_path / "secret"
    secret.touch(0o600)
    secret.write_text(secrets.token_hex(32))
    root_env = dict(env, MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "root"), MONARCH_PDB_SECRET_FILE=str(secret))
    root, first = start_broker(root_env)
    port = re.search(r"tcp://127\.0\.0\.1:(\d+)", first).group(1)
    rank_env = dict(
        env,
        MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "host"),
        MONARCH_PDB_SECRET_FILE=str(secret),
        MONARCH_PDB_UPSTREAM=f"127.0.0.1:{port}",
        MONARCH_DEBUG_SERVER_PORT=str(free_port()),
    )
    script = tmp_path / "rank.py"
    script.write_text(
        "import monarch_pdb\n\nmonarch_pdb.install()\nwith monarch_pdb.endpoint_call('solo', 7, {}):\n    breakpoint()\n"
        "print('solo done')\n"
    )
    program = Program(rank_env, script, cwd=tmp_path)
    try:
        assert [r.rank for r in wait_for_sessions(root_env, 1)] == [7]
        conn = BrokerConnection.open(settings_for(root_env))
        try:
            assert conn.request(wire.Continue(), wire.Continued).released == [wire.Released("solo", [7])]
        finally:
            conn.close()
        code, output = program.finish()
        assert code == 0 and "solo done" in output, output
    finally:
        program.stop()
        stop_broker(root)


@pytest.mark.timeout(60)
def test_a_port_named_for_a_broker_stays_its_own_while_it_restarts(env):
    port = free_port()
    named = dict(env, MONARCH_DEBUG_SERVER_PORT=str(port))
    for _ in range(2):
        claim = subprocess.run(
            [sys.executable, "-c", f"import socket; socket.socket().bind(('127.0.0.1', {port}))"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "Address already in use" in claim.stderr, "no other program may take it meanwhile"
        broker, first = start_broker(named)
        assert f"listening on tcp://127.0.0.1:{port} " in first, first
        stop_broker(broker)


@pytest.mark.timeout(60)
def test_a_broker_whose_upstream_is_itself_serves_as_the_root(env, tmp_path):
    port = free_port()  # the job's environment names the root, and the root runs in it too
    root_env = dict(
        env,
        MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "root"),
        MONARCH_PDB_SECRET=secrets.token_hex(32),
        MONARCH_DEBUG_SERVER_PORT=str(port),
        MONARCH_PDB_UPSTREAM=f"127.0.0.1:{port}",
    )
    root, _ = start_broker(root_env)
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    program = Program(root_env, script, "2", "0", cwd=tmp_path)
    try:
        wait_for_sessions(root_env, 2)
        conn = BrokerConnection.open(settings_for(root_env))
        try:
            result = conn.cast("storm", "ranks(:)", "p rank", timeout=10)
            assert [(g.output, list(g.ranks)) for g in result.groups] == [("0\n", [0]), ("1\n", [1])]
            assert [r.rank for r in conn.request(wire.ListSessions(), wire.SessionList).rows] == [0, 1]
        finally:
            conn.close()
    finally:
        program.stop()
        log = stop_broker(root)
    assert f"the broker above (127.0.0.1:{port}) is this broker itself" in log, log
    assert "a broker below joined" not in log, log
