"""The wire protocol refuses what it must, and the broker survives whatever reaches its port."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import re
import socket
import subprocess
import sys
import time

import msgpack
import pytest
import zmq
from programs import EXAMPLES, Program, settings_for, start_broker, stop_broker, wait_for_sessions
from shell_driver import ShellDriver

from monarch_pdb import discovery, wire

KEY = b"k" * 32
DEBUG = [os.path.join(os.path.dirname(sys.executable), "monarch-pdb"), "debug"]
NOW = time.time()


def roundtrip(msg: wire.Message, sender: wire.Codec | None = None) -> wire.Message:
    [decoded] = wire.Codec(KEY).decode((sender or wire.Codec(KEY)).encode(msg))
    return decoded


@pytest.mark.timeout(10)
def test_every_message_type_round_trips_signed():
    samples = [wire.Hello(role="agent", name="job", host="h", pid=1), wire.Heartbeat(),
               wire.Input(sid=1, cmd=2, line="p x", release=True),
               wire.Cast(ref=1, actor="a", selector="ranks(:)", line="p 1", timeout=1.5)]
    for msg in samples:
        assert roundtrip(msg) == msg
    assert set(wire.REGISTRY) >= {"hello", "prompt", "input", "cast", "cast_result", "event"}


def signed(packed: bytes, key: bytes = KEY) -> list[bytes]:
    return [hmac.new(key, packed, hashlib.sha256).digest(), packed]


def frames_with(body: dict, key: bytes = KEY) -> list[bytes]:
    return signed(msgpack.packb(body), key)


@pytest.mark.timeout(10)
def test_many_messages_travel_in_few_signed_batches_in_order():
    sender, receiver = wire.Codec(KEY), wire.Codec(KEY)
    inputs = [wire.Input(sid=n, cmd=1, line="p rank") for n in range(1000)]
    big = wire.Output(sid=0, text="x" * 3000)
    bodies = sender.encode_many([*inputs[:500], big, *inputs[500:]], limit=4096)
    assert 10 < len(bodies) < 30
    assert all(len(packed) <= 4096 + 100 for _, packed in bodies)
    decoded = [msg for frames in bodies for msg in receiver.decode(frames)]
    assert decoded == [*inputs[:500], big, *inputs[500:]]


def batch_of(*items: bytes) -> list[bytes]:
    return frames_with({"v": 1, "t": "batch", "s": b"s", "n": 1, "ts": NOW, "items": list(items)})


HEARTBEAT_ITEM = msgpack.packb({"t": "heartbeat"})


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        (batch_of(HEARTBEAT_ITEM, msgpack.packb({"t": "input", "sid": "1", "cmd": 1, "line": "x"})), "wrong field type"),
        (batch_of(HEARTBEAT_ITEM, msgpack.packb({"t": "batch", "items": [HEARTBEAT_ITEM]})), "unknown type"),
        (batch_of(HEARTBEAT_ITEM, b"\xc1"), "undecodable"),
        (batch_of(HEARTBEAT_ITEM, msgpack.packb([1])), "wrong protocol"),
        (frames_with({"v": 1, "t": "batch", "s": b"s", "n": 1, "ts": NOW, "items": [{"t": "heartbeat"}]}),
         "wrong field type"),
        (frames_with({"v": 1, "t": "batch", "s": b"s", "n": 1, "ts": NOW}), "wrong field type"),
    ],
)
def test_a_batch_with_one_bad_item_is_refused_whole(frames, reason):
    codec = wire.Codec(KEY)
    with pytest.raises(wire.Refused, match=reason):
        codec.decode(frames)
    assert codec.refused == {reason: 1}


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([b"only one"], "too few frames"),
        ([b"x" * 32, b"\x00" * (wire.MAX_BODY + 1)], "too large"),
        ([b"x" * 32, msgpack.packb({"v": 1})], "bad signature"),
        (frames_with({"v": 1, "t": "hello"}, key=b"wrong"), "bad signature"),
        (signed(b"\xc1"), "undecodable"),
        (signed(msgpack.packb([1, 2])), "wrong protocol"),
        (frames_with({"v": 99, "t": "heartbeat", "s": b"s", "n": 1, "ts": NOW}), "wrong protocol"),
        (frames_with({"v": 1, "t": "nosuch", "s": b"s", "n": 1, "ts": NOW}), "unknown type"),
        (frames_with({"v": 1, "t": "heartbeat"}), "no sender"),
        (frames_with({"v": 1, "t": "heartbeat", "s": b"s", "n": 1, "ts": NOW - 3600}), "too old"),
        (frames_with({"v": 1, "t": "heartbeat", "s": b"s", "n": 1, "ts": NOW + 3600}), "too old"),
        (frames_with({"v": 1, "t": "input", "s": b"s", "n": 1, "ts": NOW, "sid": "1", "cmd": 1, "line": "x"}), "wrong field type"),
        (frames_with({"v": 1, "t": "input", "s": b"s", "n": 1, "ts": NOW, "sid": True, "cmd": 1, "line": "x"}), "wrong field type"),
        (frames_with({"v": 1, "t": "input", "s": b"s", "n": 1, "ts": NOW, "cmd": 1, "line": "x"}), "missing field"),
    ],
)
def test_bad_messages_are_refused_and_counted(frames, reason):
    codec = wire.Codec(KEY)
    with pytest.raises(wire.Refused, match=reason):
        codec.decode(frames)
    assert codec.refused[reason] == 1


@pytest.mark.timeout(10)
def test_a_replayed_message_is_refused():
    sender, receiver = wire.Codec(KEY), wire.Codec(KEY)
    frames = sender.encode(wire.Heartbeat())
    receiver.decode(frames)
    with pytest.raises(wire.Refused, match="replayed"):
        receiver.decode(frames)


@pytest.mark.timeout(10)
def test_long_output_is_clipped_with_a_note():
    text = wire.clip("x" * (wire.MAX_OUTPUT + 10))
    assert text.startswith("x" * wire.MAX_OUTPUT) and "10 more characters not shown" in text


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
    for frames in ([b"one"], [os.urandom(32), os.urandom(200)], frames_with({"v": 1, "t": "list"}, key=conn.key),
                   wire.Codec(b"wrong key").encode(wire.ListSessions())):
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


@pytest.mark.timeout(30)
def test_an_idle_broker_exits_by_itself_and_removes_its_file(env):
    proc = subprocess.run([sys.executable, "-m", "monarch_pdb.broker", "--idle-exit", "0.5"], env=env,
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0 and "idle for 0.5 s, exiting" in proc.stderr
    assert discovery.read_connection_file(settings_for(env)) is None


@pytest.mark.timeout(30)
def test_the_connection_file_is_private(env, broker):
    settings = settings_for(env)
    assert os.stat(settings.runtime_dir).st_mode & 0o777 == 0o700
    assert os.stat(discovery.connection_file(settings)).st_mode & 0o777 == 0o600


@pytest.mark.timeout(30)
def test_a_second_standalone_broker_on_the_same_port_says_so(env, broker):
    second = subprocess.run([sys.executable, "-m", "monarch_pdb.broker"], env=env, capture_output=True,
                            text=True, timeout=20)
    assert second.returncode == 1 and "another broker already serves port 0" in second.stderr


@pytest.mark.timeout(30)
def test_a_shell_with_the_wrong_secret_is_told_at_once(env, broker):
    """Told, not timed out: the shell would wait two minutes for a broker that says nothing,
    and this run may take only a fraction of that."""
    wrong = dict(env, MONARCH_PDB_SECRET="not-the-secret", MONARCH_PDB_CONNECT_TIMEOUT="120")
    done = subprocess.run([*DEBUG, "-c", "list"], env=wrong, capture_output=True, text=True, timeout=20)
    assert done.returncode == 2
    assert done.stderr.startswith("monarch-pdb: authentication failed: the broker refuses our messages")
    assert "not-the-secret" not in done.stderr + done.stdout


@pytest.mark.timeout(30)
def test_a_secret_readable_by_others_is_refused_with_the_fix(env, broker, tmp_path):
    settings = settings_for(env)
    os.chmod(discovery.connection_file(settings), 0o644)
    done = subprocess.run([*DEBUG, "-c", "list"], env=env, capture_output=True, text=True, timeout=20)
    path = discovery.connection_file(settings)
    assert done.returncode == 2
    assert done.stderr.strip() == f"monarch-pdb: {path} may be read by other users, so it cannot hold a secret; run: chmod 600 {path}"
    os.chmod(path, 0o600)
    secret_file = tmp_path / "secret"
    secret_file.write_text(discovery.read_connection_file(settings).secret + "\n")
    os.chmod(secret_file, 0o640)
    done = subprocess.run([*DEBUG, "-c", "list"], env=dict(env, MONARCH_PDB_SECRET_FILE=str(secret_file)),
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 2 and f"run: chmod 600 {secret_file}" in done.stderr
    os.chmod(secret_file, 0o600)
    done = subprocess.run([*DEBUG, "-c", "list"], env=dict(env, MONARCH_PDB_SECRET_FILE=str(secret_file)),
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and done.stdout.strip() == "No active breakpoints."


@pytest.mark.timeout(60)
def test_the_audit_log_names_every_command_sent_to_ranks(env, tmp_path):
    audit = tmp_path / "audit.log"
    broker, _ = start_broker(env, "--audit", str(audit))
    program = Program(env, EXAMPLES / "debugging.py")
    try:
        wait_for_sessions(env, 16)
        done = subprocess.run([*DEBUG, "-c", "cast debugee ranks(host=1) p rank", "-c", "attach debugee 2",
                               "-c", "!x = 1", "-c", "detach", "-c", "continue"], env=env,
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    finally:
        program.stop()
        stop_broker(broker)
    lines = audit.read_text().splitlines()
    who = r"\S+ \S+@\S+ pid \d+ job=debugging-\d+ actor=debugee"
    assert len(lines) == 3
    assert re.fullmatch(rf"{who} ranks=4-7 command='p rank'", lines[0])
    assert re.fullmatch(rf"{who} ranks=2 command='!x = 1'", lines[1])
    assert re.fullmatch(rf"{who} ranks=0-15 command='continue \(top level\)'", lines[2])


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
            dealer.send_multipart(wire.Codec(b"wrong").encode(wire.Hello(role="shell", name="x", host="h", pid=1)))
            dealer.close(linger=0)
    finally:
        ctx.term()
    done = subprocess.run([*DEBUG, "-c", "list"], env=env, capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and done.stdout.strip() == "No active breakpoints."
    assert broker.poll() is None
    fds = len(os.listdir(f"/proc/{broker.pid}/fd"))
    assert fds < 100, f"the broker holds {fds} descriptors after the connections closed"


@pytest.mark.timeout(60)
def test_a_rank_that_prints_100_mb_is_cut_with_a_note(env, tmp_path):
    script = tmp_path / "big.py"
    script.write_text("x = 1\nbreakpoint()\nprint('done')\n")
    program = Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", RANK="0"), script, cwd=tmp_path)
    try:
        wait_for_sessions(env, 1)
        done = subprocess.run([*DEBUG, "--json", "-c", "cast big ranks(0) p 'x' * 10**8", "-c", "cast big ranks(0) p x"],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        big, small = (json.loads(line) for line in done.stdout.splitlines())
        [group] = big["groups"]
        assert len(group["output"]) < 2 * wire.MAX_OUTPUT
        assert group["output"].rstrip().endswith("more characters not shown")
        assert small["groups"][0]["output"] == "1\n", "the rank goes on answering"
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_curve_encrypts_every_connection_and_refuses_plaintext(env, tmp_path):
    broker, first = start_broker(env, "--curve")
    assert "encrypted with CURVE" in first
    script = tmp_path / "secretive.py"
    script.write_text("token = 'classified-value-123'\nbreakpoint()\n")
    program = Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", RANK="0"), script, cwd=tmp_path)
    try:
        [row] = wait_for_sessions(env, 1)
        done = subprocess.run([*DEBUG, "-c", "cast secretive ranks(0) p token"], env=env, capture_output=True,
                              text=True, timeout=30)
        assert done.stdout == "secretive ranks[0] (1)\n'classified-value-123'\n", done.stderr
        conn = discovery.read_connection_file(settings_for(env))
        assert conn.curve
        ctx = zmq.Context()
        plain = ctx.socket(zmq.DEALER)
        plain.connect(conn.router)
        plain.send_multipart(wire.Codec(conn.key).encode(wire.Hello(role="shell", name="x", host="h", pid=1)))
        assert plain.poll(1500) == 0, "a peer without CURVE gets nothing back"
        plain.close(linger=0)
        ctx.term()
    finally:
        program.stop()
        stop_broker(broker)


@pytest.mark.timeout(30)
def test_a_process_that_reconnects_on_a_new_socket_keeps_one_session_per_rank(env, broker):
    """The same link saying hello on a new socket takes over its sessions; another link of the
    same process (a load generator's agents) keeps its own."""
    conn = discovery.read_connection_file(settings_for(env))
    ctx = zmq.Context()
    prompt = wire.Prompt(sid=1, cmd=0, job="job", actor="a", rank=0, coords={}, host="h", pid=4242,
                         function="m.f", filename="f.py", lineno=3, output="> f.py(3)f()\n", prompt="(Pdb) ")
    try:
        for link, rank in ((b"link-one", 0), (b"link-one", 0), (b"link-two", 1)):
            sock, codec = ctx.socket(zmq.DEALER), wire.Codec(conn.key)
            sock.connect(conn.router)
            sock.send_multipart(codec.encode(wire.Hello(role="agent", name="job", host="h", pid=4242, link=link)))
            assert sock.poll(5000), "welcomed"
            sock.recv_multipart()
            sock.send_multipart(codec.encode(dataclasses.replace(prompt, rank=rank)))
        done = subprocess.run([*DEBUG, "--json", "-c", "list"], env=env, capture_output=True, text=True, timeout=20)
        assert [(r["actor"], r["rank"]) for r in json.loads(done.stdout)] == [("a", 0), ("a", 1)]
    finally:
        ctx.destroy(linger=0)
