"""A live broker keeps serving its paused ranks and its shells whatever else reaches its port:
garbage, floods, fuzzed and replayed messages, connections by the thousand."""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import subprocess
import sys

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from programs import EXAMPLES, Program, settings_for, start_broker, stop_broker, wait_for_sessions
from shell_driver import ShellDriver

from monarch_pdb import discovery, wire
from monarch_pdb.client.connection import BrokerConnection

DEBUG = [os.path.join(os.path.dirname(sys.executable), "monarch-pdb"), "debug"]
INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
FIELD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    INTS,
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.lists(INTS, max_size=3),
    st.dictionaries(st.text(max_size=5), INTS, max_size=3),
)
BODIES = st.fixed_dictionaries(
    {
        "v": st.sampled_from([wire.PROTOCOL, wire.PROTOCOL, wire.PROTOCOL + 1, str(wire.PROTOCOL)]),
        "t": st.sampled_from([*wire.message_types(), wire.BATCH, "nosuch", 7]),
        "s": st.binary(min_size=8, max_size=8),
        "n": st.integers(min_value=1, max_value=2**40),
    },
    optional={
        "ts": st.floats(allow_nan=False),
        "sid": FIELD_VALUES,
        "session": FIELD_VALUES,
        "line": FIELD_VALUES,
        "actor": FIELD_VALUES,
        "rank": FIELD_VALUES,
        "selector": FIELD_VALUES,
        "role": FIELD_VALUES,
        "rows": FIELD_VALUES,
        "cmd": FIELD_VALUES,
        "output": FIELD_VALUES,
        "items": st.lists(
            st.one_of(
                st.binary(max_size=30),
                st.builds(
                    lambda t, sid: msgpack.packb({"t": t, "sid": sid, "cmd": 1, "line": "p 1"}),
                    st.sampled_from([*wire.message_types(), wire.BATCH]),
                    FIELD_VALUES,
                ),
            ),
            max_size=4,
        ),
    },
)


@pytest.fixture
def live(env):
    """The broker, a 16-rank example paused in it, and a raw socket to throw things at it."""
    broker, _ = start_broker(env)
    program = Program(env, EXAMPLES / "debugging.py")
    ctx = zmq.Context()
    try:
        wait_for_sessions(env, 16)
        conn = discovery.read_connection_file(settings_for(env))
        shell = BrokerConnection.open(settings_for(env))
        yield broker, conn, ctx, shell
        shell.close()
    finally:
        ctx.destroy(linger=0)
        program.stop()
        if broker.poll() is None:
            stop_broker(broker)


def throw(ctx: zmq.Context, router: str, batches: list[list[bytes]], key: bytes | None = None) -> None:
    """Send every batch from one new peer; with the key, return once the broker has read them
    all (it answers a peer's messages in order, so its Welcome to a Hello sent last says so)."""
    sock = ctx.socket(zmq.DEALER)
    sock.connect(router)
    for frames in batches:
        sock.send_multipart(frames)
    if key is not None:
        codec = wire.Codec(key)
        sock.send_multipart(codec.encode(wire.Hello(role="shell", client=wire.Client.SHELL, host="h", pid=1)))
        welcomed = False
        while not welcomed:
            assert sock.poll(60_000), "the broker stopped answering"
            frames = sock.recv_multipart()
            welcomed = frames != wire.AUTH_FAILED and isinstance(codec.decode(frames)[0], wire.Welcome)
    sock.close(linger=2000)


def still_answers(shell: BrokerConnection) -> None:
    result = shell.cast("debugee", "ranks(::5)", "p rank", timeout=10)
    assert [(g.output, list(g.ranks)) for g in result.groups] == [
        (f"{r}\n", [r]) for r in (0, 5, 10, 15)
    ] and not result.missing


@pytest.mark.timeout(240)
def test_fuzzed_messages_never_disturb_real_sessions(live):
    broker, conn, ctx, shell = live
    signer = wire.Codec(conn.key)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        st.lists(
            st.one_of(
                st.lists(st.binary(max_size=300), min_size=1, max_size=4),
                BODIES.map(lambda body: signed(conn.key, msgpack.packb(body, use_bin_type=True))),
                st.binary(max_size=200).map(lambda raw: signed(conn.key, raw)),
            ),
            min_size=1,
            max_size=20,
        )
    )
    def batch(frames_list):
        throw(ctx, conn.router, frames_list)
        still_answers(shell)

    batch()
    replayed = signer.encode(
        wire.Cast(ref=1, actor="debugee", selector="ranks(0)", line="!import os; os._exit(3)", timeout=1.0)
    )
    throw(ctx, conn.router, [replayed, replayed])
    still_answers(shell)
    assert len(shell.wait_for_rows(lambda rows: True, 1)) == 16, "no session made, none lost"
    assert broker.poll() is None


def signed(key: bytes, packed: bytes) -> list[bytes]:
    return [hmac.new(key, packed, hashlib.sha256).digest(), packed]


@pytest.mark.timeout(120)
def test_large_frames_and_a_flood_leave_memory_bounded_and_one_summary(live):
    broker, conn, ctx, shell = live
    rss_before = rss_kib(broker.pid)
    big = os.urandom(8 * 1024 * 1024)
    throw(ctx, conn.router, [[os.urandom(32), big]] * 4, key=conn.key)
    throw(ctx, conn.router, [[os.urandom(32), big + b"x" * 8192]])
    throw(ctx, conn.router, [[os.urandom(32), os.urandom(100)]] * 20000, key=conn.key)
    still_answers(shell)
    assert rss_kib(broker.pid) - rss_before < 64 * 1024, "the broker keeps no copy of what it refused"
    log = stop_broker(broker)
    summaries = [line for line in log.splitlines() if "bad messages so far" in line]
    assert 1 <= len(summaries) <= 3, f"{len(summaries)} summary lines for 20,004 bad messages"
    # The frame over the size limit is cut off by the socket itself: the broker never reads it.
    assert summaries[-1] == (
        "monarch-pdb broker: dropped 20004 bad messages so far (20004 bad signature); latest: bad signature"
    ), "the last one counts them all"
    assert conn.secret not in log


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.mark.timeout(60)
def test_the_broker_survives_garbage_and_keeps_serving(env, broker):
    conn = discovery.read_connection_file(settings_for(env))
    host, port = conn.router.rsplit(":", 1)
    for junk in (os.urandom(4096), b"\x00" * 100, b"GET / HTTP/1.1\r\n\r\n"):
        with socket.create_connection((host.removeprefix("tcp://"), int(port))) as raw:
            raw.sendall(junk)
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(conn.router)
    for frames in (
        [b"one"],
        [os.urandom(32), os.urandom(200)],
        signed(conn.key, msgpack.packb({"v": wire.PROTOCOL, "t": "list"})),
        wire.Codec(b"wrong key").encode(wire.ListSessions()),
    ):
        dealer.send_multipart(frames)
    dealer.close(linger=1000)
    ctx.term()
    shell = ShellDriver(env)
    try:
        shell.wait_prompt()
        assert shell.command("list").strip() == "No active breakpoints."
    finally:
        shell.kill()
    assert broker.poll() is None


@pytest.mark.timeout(120)
def test_thousands_of_connections_coming_and_going_leave_the_broker_serving(env, broker):
    conn = discovery.read_connection_file(settings_for(env))
    host, port = conn.router.removeprefix("tcp://").rsplit(":", 1)
    for n in range(2000):
        with socket.create_connection((host, int(port))) as raw:
            if n % 2:
                raw.sendall(os.urandom(64))
    ctx = zmq.Context()
    try:
        for _ in range(200):
            dealer = ctx.socket(zmq.DEALER)
            dealer.connect(conn.router)
            dealer.send_multipart(
                wire.Codec(b"wrong").encode(wire.Hello(role="shell", client=wire.Client.SHELL, host="h", pid=1))
            )
            dealer.close(linger=0)
    finally:
        ctx.term()
    done = subprocess.run([*DEBUG, "-c", "list"], env=env, capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and done.stdout.strip() == "No active breakpoints."
    assert broker.poll() is None
    fds = len(os.listdir(f"/proc/{broker.pid}/fd"))
    assert fds < 100, f"the broker holds {fds} descriptors after the connections closed"
