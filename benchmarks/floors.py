"""Raw pyzmq floors: the same hops and message sizes as the debugger, with nothing else.

A debugger round trip can never beat ZeroMQ moving its bytes between the same processes, so
each product number is judged against a floor measured in the same run on the same machine.
Every socket of a floor lives in its own process, as in the product (shell, broker, ranks),
and messages are two frames of exactly the size the product sends: a shell's `Send` going
out, a rank's `Prompt` (the largest leg) coming back. A floor's processes stay up for the
whole run, so its batches can alternate with the product's and share their background load.

This file is also the floors' peer program: `python floors.py echo|relay ...`.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time

import zmq
from timing import timed

from monarch_pdb import wire

READY = b"ready"
EXAMPLE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "debugging.py")
"""The path the 16-rank example's prompts carry, so the floor's answer is exactly as long."""
RELAY_WORKER = b"worker"
START_TIMEOUT = 30.0


def pdb_exchange() -> tuple[list[bytes], list[bytes]]:
    """Signed frames the size of one attached `p rank`: the request, and the answer."""
    codec = wire.Codec(b"k" * 64)
    request = codec.encode(wire.Send(session=1, line="p rank"))
    answer = codec.encode(
        wire.Prompt(
            sid=1,
            cmd=1,
            job="debugging-1234",
            actor="debugee",
            rank=5,
            coords={"host": 1, "gpu": 1},
            host="bench-host",
            pid=12345,
            function="debugging._debugee_actor_internal",
            filename=EXAMPLE_FILE,
            lineno=15,
            output="5\n",
            prompt="(Pdb) ",
        )
    )
    return request, answer


def message_sizes() -> dict[str, int]:
    request, answer = pdb_exchange()
    return {"request_bytes": sum(map(len, request)), "answer_bytes": sum(map(len, answer))}


class _Floor:
    """Peer processes that live as long as the `with` block and always end with it, also on
    error; the measuring socket lives in this process."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.request = pdb_exchange()[0]
        self._peers: list[subprocess.Popen] = []

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for peer in self._peers:
            peer.kill()
        for peer in self._peers:
            peer.wait()
            peer.stdout.close()
        self.context.destroy(linger=0)

    def _start(self) -> None:
        raise NotImplementedError

    def _peer(self, *args: str) -> subprocess.Popen:
        """A peer in a session of its own: a terminal's Ctrl-C is for the runner, which ends it."""
        peer = subprocess.Popen(
            [sys.executable, __file__, str(os.getpid()), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._peers.append(peer)
        return peer


class Relay(_Floor):
    """Floor A: client DEALER -> relay ROUTER -> worker DEALER, and back."""

    def _start(self) -> None:
        worker = _said(self._peer("echo", RELAY_WORKER.decode()), "the relay's worker did not start")
        address = _said(self._peer("relay", worker), "the relay did not start")
        self.client = self.context.socket(zmq.DEALER)
        self.client.connect(address)

    def round_trips(self, warmup: int, repeat: int) -> list[int]:
        request, client = self.request, self.client
        return timed(lambda: (client.send_multipart(request), client.recv_multipart()), warmup, repeat)


class FanOut(_Floor):
    """Floor B: one ROUTER sends a request to each of `peers` DEALER processes and gathers
    every answer. With `per_peer` > 1 each peer answers that many requests, as one process
    emulating many ranks does: the same message count as a cast to peers * per_peer ranks.
    With `sockets_per_peer` > 1 each process holds that many connections, as that many rank
    processes would."""

    def __init__(self, peers: int, per_peer: int = 1, sockets_per_peer: int = 1) -> None:
        super().__init__()
        self.peers = peers
        self.per_peer = per_peer
        self.sockets_per_peer = sockets_per_peer

    def _start(self) -> None:
        self.router = self.context.socket(zmq.ROUTER)
        # A ROUTER drops what exceeds a peer's high-water mark; per_peer may be thousands.
        self.router.setsockopt(zmq.SNDHWM, 0)
        self.router.setsockopt(zmq.RCVHWM, 0)
        address = f"tcp://127.0.0.1:{self.router.bind_to_random_port('tcp://127.0.0.1')}"
        for n in range(self.peers):
            self._peer("echo", f"rank-{n}", address, str(self.sockets_per_peer))
        self.identities = []
        deadline = time.monotonic() + START_TIMEOUT
        sockets = self.peers * self.sockets_per_peer
        while len(self.identities) < sockets:
            if not self.router.poll(max(0.0, deadline - time.monotonic()) * 1000):
                raise RuntimeError(f"only {len(self.identities)} of {sockets} fan-out sockets started")
            self.identities.append(self.router.recv_multipart()[0])

    def round_trips(self, warmup: int, repeat: int) -> list[int]:
        request, router = self.request, self.router
        identities = self.identities * self.per_peer

        def once() -> None:
            for identity in identities:
                router.send_multipart([identity, *request])
            for _ in identities:
                router.recv_multipart()

        return timed(once, warmup, repeat)


def _said(peer: subprocess.Popen, failure: str) -> str:
    """The one line a peer prints once it is ready, or an error if it dies or takes too long."""
    line = peer.stdout.readline() if select.select([peer.stdout], [], [], START_TIMEOUT)[0] else ""
    if not line:
        raise RuntimeError(failure)
    return line.strip()


# --- the peer processes --------------------------------------------------------------------

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Be killed with the runner even if it is killed itself and cannot end us."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:
        sys.exit(0)  # it died before the signal was armed


def echo(identity: bytes, address: str | None, sockets: int = 1) -> None:
    """Ranks: `sockets` DEALERs (one process standing in for that many rank processes), each
    answering every message with a prompt-sized reply. With no address the one socket binds
    one (printed) for the relay to connect to, so each peer has one line to say."""
    _, answer = pdb_exchange()
    context = zmq.Context()
    socks = []
    for n in range(sockets):
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, identity if sockets == 1 else identity + b"-%d" % n)
        if address is None:
            print(f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}", flush=True)
        else:
            sock.connect(address)
        sock.send(READY)
        socks.append(sock)
    if sockets == 1:  # a blocking read without a poll keeps the relay floor as low as it can be
        while True:
            sock.recv_multipart()
            sock.send_multipart(answer)
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    while True:
        for sock, _ in poller.poll():
            sock.recv_multipart()
            sock.send_multipart(answer)


def relay(worker: str) -> None:
    """A broker: one ROUTER passing the client's messages to the worker and the answers back;
    prints its address once the worker is there."""
    router = zmq.Context().socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    router.connect(worker)
    router.recv_multipart()  # the worker's hello
    print(f"tcp://127.0.0.1:{port}", flush=True)
    client = b""
    while True:
        frames = router.recv_multipart()
        if frames[0] == RELAY_WORKER:
            router.send_multipart([client, *frames[1:]])
        else:
            client = frames[0]
            router.send_multipart([RELAY_WORKER, *frames[1:]])


if __name__ == "__main__":
    parent, role, *args = sys.argv[1:]
    die_with_parent(int(parent))
    if role == "echo":
        echo(args[0].encode(), args[1] if len(args) > 1 else None, int(args[2]) if len(args) > 2 else 1)
    else:
        relay(args[0])
