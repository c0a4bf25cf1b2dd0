"""What a broker costs while its ranks sit idle, beside its floor, measured in one run.

RANKS connections, each one rank's link as the wire sees it (its routing id, libzmq's ZMTP
heartbeats as a rank's link asks them, one `Hello`), held by this process, to three listeners in
turn:
- the floor: a bare pyzmq ROUTER that only reads, so only libzmq answers the heartbeats (and
  sends its own, as the broker's ROUTER does);
- the broker as ranks once drove it: the connections send a Python `Heartbeat` a second each
  instead of libzmq's, which the broker answers (what every rank's link did before liveness
  moved into libzmq);
- the broker now: the connections say nothing after their hello.
Each listener's CPU (user + system, all its threads) over SECONDS is read from /proc.

    python idle.py router   (the floor's listener: prints its port, reads until killed)
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

import zmq
from floors import die_with_parent

from monarch_pdb import discovery, wire
from monarch_pdb.link import routing_id, zmtp_heartbeats
from monarch_pdb.settings import load as load_settings

RANKS = 1024
SECONDS = 10.0
BEAT = 1.0
SETTLE = 2.0
"""Seconds after the last connection is made before the CPU is read."""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def router() -> None:
    """The floor's listener: a ROUTER that reads whatever comes and answers nothing."""
    die_with_parent(int(sys.argv[2]))
    sock = zmq.Context().socket(zmq.ROUTER)
    zmtp_heartbeats(sock, BEAT)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    print(port, flush=True)
    while True:
        sock.recv_multipart()


def hold(address: str, key: bytes, beating: bool, pid: int) -> float:
    """Connect RANKS idle ranks to `address`; the listener's (`pid`) CPU, % of a core, while they
    sit idle (sending a Python heartbeat a second each when `beating`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * RANKS)), hard))
    context = zmq.Context()
    context.max_sockets = RANKS + 16
    codec = wire.Codec(key)
    socks = []
    try:
        for n in range(RANKS):
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.ROUTING_ID, routing_id(os.urandom(8)))
            if not beating:
                zmtp_heartbeats(sock, BEAT)
            sock.connect(address)
            sock.send_multipart(
                codec.encode(
                    wire.Hello(role=wire.Role.RANK, job="idle", host="bench", pid=n, user="bench", link=os.urandom(8))
                )
            )
            socks.append(sock)
        poller = zmq.Poller()
        for sock in socks:
            poller.register(sock, zmq.POLLIN)
        start = time.monotonic() + SETTLE
        used = None
        next_beat = time.monotonic()
        while True:
            now = time.monotonic()
            if used is None and now >= start:
                used, start = cpu_seconds(pid), now
            if used is not None and now >= start + SECONDS:
                return 100 * (cpu_seconds(pid) - used) / (now - start)
            if beating and now >= next_beat:
                beat = codec.encode(wire.Heartbeat())
                for sock in socks:
                    sock.send_multipart(beat)
                next_beat = now + BEAT
            for sock, _ in poller.poll(100):
                while sock.poll(0):
                    sock.recv_multipart()
    finally:
        for sock in socks:
            sock.close()
        context.term()


def measure(say) -> dict[str, float]:
    """% of a core each listener spends with RANKS idle ranks connected."""
    here = os.path.dirname(os.path.abspath(__file__))
    floor = subprocess.Popen(
        [sys.executable, os.path.join(here, "idle.py"), "router", str(os.getpid())], stdout=subprocess.PIPE, text=True
    )
    try:
        port = floor.stdout.readline().strip()
        say(f"idle: {RANKS} ranks at a bare ROUTER (the floor)")
        result = {"floor": hold(f"tcp://127.0.0.1:{port}", b"k" * 64, False, floor.pid)}
    finally:
        floor.kill()
        floor.wait()
    for name, beating in (("python_heartbeats", True), ("broker", False)):
        with tempfile.TemporaryDirectory(prefix="monarch-pdb-idle-") as workdir:
            env = dict(
                os.environ,
                MONARCH_PDB_RUNTIME_DIR=workdir,
                MONARCH_DEBUG_SERVER_PORT="0",
                MONARCH_DEBUG_SERVER_HOST="127.0.0.1",
                MONARCH_PDB_HEARTBEAT=str(BEAT),
            )
            broker = subprocess.Popen([sys.executable, "-m", "monarch_pdb.broker"], env=env, stderr=subprocess.DEVNULL)
            try:
                settings = load_settings(env)
                conn = None
                deadline = time.monotonic() + 30
                while conn is None and time.monotonic() < deadline:
                    conn = discovery.locate(settings)
                    time.sleep(0.05)
                assert conn is not None, "the broker did not start"
                say(f"idle: {RANKS} ranks at the broker" + (", each beating in Python" if beating else ""))
                result[name] = hold(conn.router, conn.key, beating, broker.pid)
            finally:
                broker.terminate()
                broker.wait()
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["router"]:
        router()
    else:
        print(measure(lambda text: print(text, file=sys.stderr)))
