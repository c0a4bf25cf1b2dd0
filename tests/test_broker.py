"""The broker as a process: it exits when idle, one serves a port, a rank that floods it is cut
short, a process that reconnects is one process, and a peer that sends what its role may not is
refused."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import zmq
from programs import BrokerLog, Program, settings_for, start_broker, wait_for_all_rows, wait_for_sessions

from monarch_pdb import discovery, wire
from monarch_pdb.client.connection import BrokerConnection
from monarch_pdb.ranks import RankSet

DEBUG = [os.path.join(os.path.dirname(sys.executable), "monarch-pdb"), "debug"]


STOP = wire.Prompt(
    sid=1,
    cmd=0,
    job="job",
    actor="a",
    rank=0,
    coords={},
    host="h",
    pid=4242,
    function="m.f",
    filename="f.py",
    lineno=3,
    output="> f.py(3)f()\n",
    prompt="(Pdb) ",
)
"""A rank's first stop, as its agent sends it."""


@pytest.mark.timeout(30)
def test_an_idle_broker_exits_by_itself_and_removes_its_file(env):
    proc = subprocess.run(
        [sys.executable, "-m", "monarch_pdb.broker", "--idle-exit", "0.5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 0 and "idle for 0.5 s, exiting" in proc.stderr
    assert discovery.read_connection_file(settings_for(env)) is None


@pytest.mark.timeout(30)
def test_a_second_standalone_broker_on_the_same_port_says_so(env, broker):
    second = subprocess.run(
        [sys.executable, "-m", "monarch_pdb.broker"], env=env, capture_output=True, text=True, timeout=20
    )
    assert second.returncode == 1 and "another broker already serves port 0" in second.stderr


@pytest.mark.timeout(60)
def test_a_rank_that_prints_100_mb_is_cut_with_a_note(env, tmp_path):
    script = tmp_path / "big.py"
    script.write_text("x = 1\nbreakpoint()\nprint('done')\n")
    program = Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", RANK="0"), script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 1)
        done = subprocess.run(
            [*DEBUG, "--json", "-c", "cast big ranks(0) p 'x' * 10**8", "-c", "cast big ranks(0) p x"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        big, small = (json.loads(line) for line in done.stdout.splitlines())
        [group] = big["groups"]
        assert len(group["output"]) < 2 * wire.MAX_OUTPUT
        assert group["output"].rstrip().endswith("more characters not shown")
        assert small["groups"][0]["output"] == "1\n", "the rank goes on answering"
    finally:
        program.stop()


@pytest.mark.timeout(30)
def test_a_process_that_reconnects_on_a_new_socket_keeps_one_session_per_rank(env, broker):
    """The same link saying hello on a new socket takes over its sessions; another link of the
    same process (a load generator's agents) keeps its own."""
    conn = discovery.read_connection_file(settings_for(env))
    ctx = zmq.Context()
    prompt = STOP
    try:
        for link, rank in ((b"link-one", 0), (b"link-one", 0), (b"link-two", 1)):
            sock, codec = ctx.socket(zmq.DEALER), wire.Codec(conn.key)
            sock.connect(conn.router)
            sock.send_multipart(codec.encode(wire.Hello(role=wire.Role.RANK, job="job", host="h", pid=4242, link=link)))
            assert sock.poll(5000), "welcomed"
            sock.recv_multipart()
            sock.send_multipart(codec.encode(dataclasses.replace(prompt, rank=rank)))
        # Listed from here: these sockets send no heartbeats, and a shell started on a busy
        # machine could come after the broker declared them lost.
        rows = wait_for_all_rows(env, lambda rows: any(r.rank == 1 for r in rows), ask=wire.ListSessions())
        assert [(r.actor, r.rank) for r in rows] == [("a", 0), ("a", 1)]
    finally:
        ctx.destroy(linger=0)


@pytest.mark.timeout(60)
def test_a_process_that_opens_and_closes_many_connections_keeps_no_descriptor_of_them(env, broker):
    """An editor's adapter or a notebook opens a connection per session or command, for as
    long as it runs: each must give back what it took."""

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    def open_and_close() -> None:
        conn = BrokerConnection.open(settings_for(env))
        conn.close()
        conn.link.join(10)

    open_and_close()
    before = descriptors()
    for _ in range(20):
        open_and_close()
    assert descriptors() <= before + 2, "twenty connections opened and closed, their descriptors kept"


class RawPeer:
    """A peer of the broker as the agent's and the shell's links are on the wire: a DEALER
    that says hello and is welcomed, then sends and receives signed messages."""

    def __init__(self, ctx: zmq.Context, conn: discovery.BrokerAddress, hello: wire.Hello) -> None:
        self.sock, self.codec = ctx.socket(zmq.DEALER), wire.Codec(conn.key)
        self.sock.connect(conn.router)
        self.say(hello)
        assert isinstance(self.until(wire.Welcome)[-1], wire.Welcome)

    def say(self, msg: wire.Message) -> None:
        self.sock.send_multipart(self.codec.encode(msg))

    def until(self, kind: type, timeout: float = 10.0) -> list[wire.Message]:
        """What the broker sends, up to and with the first message of `kind`."""
        heard: list[wire.Message] = []
        while not heard or not isinstance(heard[-1], kind):
            assert self.sock.poll(int(timeout * 1000)), f"no {kind.__name__} within {timeout} s; heard {heard}"
            heard += self.codec.decode(self.sock.recv_multipart())
            heard = heard[: next((n + 1 for n, msg in enumerate(heard) if isinstance(msg, kind)), len(heard))]
        return heard


@pytest.mark.timeout(60)
def test_a_message_from_a_role_that_may_not_send_it_does_nothing_and_is_named_once_in_the_log(env):
    """A shell's prompt opens no session and a rank's cast sends no line; each is named once in
    the broker's log. The same messages from the roles that send them still work."""
    proc, _ = start_broker(env)
    said = BrokerLog(proc)
    conn = discovery.read_connection_file(settings_for(env))
    ctx = zmq.Context()
    stop = STOP
    try:
        rank = RawPeer(ctx, conn, wire.Hello(role=wire.Role.RANK, job="job", host="h", pid=4242, link=b"rank"))
        shell = RawPeer(ctx, conn, wire.Hello(role="shell", client=wire.Client.SHELL, host="h", pid=4243))
        shell.say(stop)
        shell.say(wire.ListSessions())
        assert shell.until(wire.SessionList)[-1].rows == [], "a shell's prompt opened a session"
        said.wait_for("a Prompt from a shell, which may not send it")

        rank.say(stop)
        rank.say(wire.Heartbeat())
        rank.until(wire.Heartbeat)  # the broker has taken the rank's prompt
        rank.say(wire.Cast(ref=1, actor="a", selector="ranks(0)", line="p 'from a rank'", timeout=5))
        rank.say(wire.Heartbeat())
        heard = rank.until(wire.Heartbeat)
        assert not [msg for msg in heard if not isinstance(msg, wire.Heartbeat)], f"a rank's cast was answered: {heard}"

        shell.say(wire.Cast(ref=2, actor="a", selector="ranks(0)", line="p 1", timeout=10))
        line = rank.until(wire.Input)[-1]
        assert line.line == "p 1", "a shell's cast sends its line to the rank"
        rank.say(dataclasses.replace(stop, cmd=line.cmd, output="1\n"))
        result = shell.until(wire.CastResult)[-1]
        assert result.groups == [wire.CastGroup("1\n", "", RankSet.of([0]))] and result.missing == []
    finally:
        ctx.destroy(linger=0)
    logged = said.stop()
    assert logged.count("a Prompt from a shell") == 1, logged
    assert logged.count("a Cast from a rank process") == 1, logged
