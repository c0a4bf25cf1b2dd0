"""Finding the broker: the per-user connection file, and starting an embedded broker.

A broker writes its address and secret to `<runtime dir>/broker-<port>.json` (directory 0700,
file 0600), keyed by the port it was asked for, and holds an exclusive lock on
`broker-<port>.lock` for as long as it runs. A file whose lock nobody holds is stale. Agents
and shells on the same host read the file; ranks on other hosts are given the secret in
MONARCH_PDB_SECRET and connect to MONARCH_DEBUG_SERVER_HOST:PORT directly.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import secrets
import socket
import sys
import time
from dataclasses import asdict, dataclass
from typing import cast

import zmq

from monarch_pdb.settings import Settings

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", ""}
GREETING_WAIT = 1.0
"""Seconds to wait for what listens on the broker's port to greet as ZeroMQ does."""
ZMTP_FIRST_BYTE = b"\xff"
"""A ZeroMQ socket sends its greeting (whose first byte this is) as soon as a peer connects."""


@dataclass(frozen=True)
class BrokerAddress:
    """Where a broker listens and the key its messages are signed with."""

    router: str
    pub: str
    secret: str
    pid: int
    curve: bool = False

    @property
    def key(self) -> bytes:
        return self.secret.encode()


class NotFound(Exception):
    """No broker is known; the text says where we looked."""


class Insecure(Exception):
    """A file or directory that cannot hold this user's secret (others could read it, or it
    cannot be made at all); the text says how to fix it."""


def read_private(path: str) -> str:
    """The text of a file only its owner may read, as ssh insists for keys."""
    info = os.stat(path)
    if info.st_mode & 0o077:
        raise Insecure(f"{path} may be read by other users, so it cannot hold a secret; run: chmod 600 {path}")
    if info.st_uid != os.getuid():
        raise Insecure(f"{path} belongs to another user; it cannot hold this user's secret")
    with open(path, encoding="utf-8") as f:
        return f.read()


def secret_of(settings: Settings) -> str | None:
    """MONARCH_PDB_SECRET, else the contents of MONARCH_PDB_SECRET_FILE, else None."""
    if settings.secret is not None or settings.secret_file is None:
        return settings.secret
    try:
        return read_private(settings.secret_file).strip() or None
    except FileNotFoundError:
        raise Insecure(f"MONARCH_PDB_SECRET_FILE names {settings.secret_file}, which does not exist") from None


def secret_source(settings: Settings) -> str:
    """Where the secret we sign with comes from, as secret_of and locate choose it, so that a
    refusal names the setting to fix."""
    if settings.secret is not None:
        return "MONARCH_PDB_SECRET"
    if settings.secret_file is not None:
        return f"MONARCH_PDB_SECRET_FILE, {settings.secret_file}"
    return f"the connection file, {connection_file(settings)}"


def bare_host(host: str) -> str:
    """A host as the socket calls take it: an IPv6 address without the brackets a URL needs."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def endpoint(host: str, port: int | str) -> str:
    """The ZeroMQ endpoint of a host and port; an IPv6 address goes in brackets."""
    host = bare_host(host)
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def allow_ipv6(sock: zmq.Socket, host: str = "") -> None:
    """Let a TCP socket bind, connect to and resolve IPv6 addresses as well as IPv4 ones; one
    that binds an IPv4 address (`host`) stays IPv4, so its address reads as it was given."""
    try:
        if isinstance(ipaddress.ip_address(bare_host(host)), ipaddress.IPv4Address):
            return
    except ValueError:
        pass
    sock.setsockopt(zmq.IPV6, 1)


def is_local(host: str) -> bool:
    """Whether `host` is this host: a loopback name or address (`::1` with or without brackets),
    or its name."""
    host = bare_host(host)
    return host in LOOPBACK_NAMES or host in (socket.gethostname(), socket.getfqdn())


def reaches_itself(address: str, router: str) -> bool:
    """Whether HOST:PORT names the broker listening on `router` (its ZeroMQ endpoint): its
    port, at the address it listens on or, listening on every address, at one of this host's
    (one this process can bind)."""
    host, _, port = address.rpartition(":")
    bound, _, bound_port = router.removeprefix("tcp://").rpartition(":")
    if port != bound_port:
        return False
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(bare_host(host), None, type=socket.SOCK_STREAM)}
    except OSError:
        return False
    if bound.strip("[]") not in ("0.0.0.0", "::", "*"):
        return bound.strip("[]") in addresses
    return any(_bindable(cast(str, ip)) for ip in addresses)


def _bindable(ip: str) -> bool:
    try:
        with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as probe:
            probe.bind((ip, 0))
        return True
    except OSError:
        return False


def bind_host(host: str) -> str:
    """ZeroMQ binds addresses, not names."""
    return "127.0.0.1" if host in ("localhost", "") else bare_host(host)


def connection_file(settings: Settings) -> str:
    return os.path.join(settings.runtime_dir, f"broker-{settings.port}.json")


def log_file(settings: Settings) -> str:
    return os.path.join(settings.runtime_dir, f"broker-{settings.port}.log")


def lock_file(settings: Settings) -> str:
    return os.path.join(settings.runtime_dir, f"broker-{settings.port}.lock")


def ensure_runtime_dir(settings: Settings) -> None:
    """The per-user directory, created 0700; one that belongs to someone else, or that cannot
    hold a file (full, read-only), is refused."""
    fix = "set MONARCH_PDB_RUNTIME_DIR to a directory of yours"
    try:
        os.makedirs(settings.runtime_dir, mode=0o700, exist_ok=True)
        if os.stat(settings.runtime_dir).st_uid != os.getuid():
            raise Insecure(f"{settings.runtime_dir} belongs to another user; {fix}")
        os.chmod(settings.runtime_dir, 0o700)
        _try_writing(settings.runtime_dir)
    except OSError as error:
        raise Insecure(unusable(settings, error)) from None


def unusable(settings: Settings, error: OSError) -> str:
    """One line naming the runtime directory and why it cannot be used."""
    return (
        f"cannot use {settings.runtime_dir} as the runtime directory: {error.strerror}; "
        "set MONARCH_PDB_RUNTIME_DIR to a directory of yours"
    )


def _try_writing(directory: str) -> None:
    """Write and remove a small file: a full or read-only directory fails here, at once, rather
    than when the broker writes its connection file."""
    probe = os.path.join(directory, f".probe-{os.getpid()}")
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"monarch-pdb")
    finally:
        os.close(fd)
        os.unlink(probe)


def unwritable(settings: Settings) -> str:
    """When no broker answers: why no broker of this host can keep its files in the runtime
    directory (it cannot be made or written, or is another user's), else ""."""
    try:
        ensure_runtime_dir(settings)
    except Insecure as problem:
        return str(problem)
    return ""


def does_not_resolve(host: str) -> str:
    """Why `host` names no address, in words; "" when it does."""
    try:
        socket.getaddrinfo(bare_host(host), None, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        return f"the name {bare_host(host)} does not resolve: {error.strerror}"
    return ""


@dataclass(frozen=True)
class Unanswered:
    """What is at the broker's address when no broker answers."""

    why: str
    fix: str = ""
    """What the user must change; empty where it may mend itself (a broker that starts later)."""


def unanswered(settings: Settings) -> Unanswered | None:
    """When no broker answers: what is at the broker's address (its name does not resolve,
    nothing listens there, another program does, or a ZeroMQ program whose secret we lack), else
    None (something that speaks ZeroMQ, with a secret to try). This host's broker, where it is the
    one named, is not looked at: it may only be slow."""
    if settings.port == 0 or (broker_running(settings) and (is_local(settings.host) or local_broker(settings))):
        return None
    host, where = bind_host(settings.host), f"{settings.host}:{settings.port}"
    unresolved = does_not_resolve(host)
    if unresolved:
        return Unanswered(unresolved, "Check MONARCH_DEBUG_SERVER_HOST (or --host).")
    try:
        probe = socket.create_connection((host, settings.port), timeout=GREETING_WAIT)
    except ConnectionRefusedError:
        return Unanswered(f"nothing listens at {where}")
    except OSError:
        return None
    with probe:
        try:
            greeting = probe.recv(1)
        except OSError:
            greeting = b""
    if greeting != ZMTP_FIRST_BYTE:
        return Unanswered(
            f"another program listens on port {settings.port}: it does not speak ZeroMQ, so it is not a debug broker",
            "Stop that program, or give the broker and the ranks another port (MONARCH_DEBUG_SERVER_PORT).",
        )
    try:
        secret = secret_of(settings)
    except Insecure:
        return None
    if secret is None and local_broker(settings) is None:
        return Unanswered(
            f"a ZeroMQ program listens at {where}, but there is no secret to sign with: no broker's "
            f"file for it at {connection_file(settings)}",
            "Give this process the broker's secret (MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE).",
        )
    return None


def broker_running(settings: Settings) -> bool:
    """True when some process holds this port's broker lock."""
    try:
        fd = os.open(lock_file(settings), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def take_broker_lock(settings: Settings) -> int | None:
    """The lock's descriptor, held until the process exits; None if another broker has it."""
    ensure_runtime_dir(settings)
    fd = os.open(lock_file(settings), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def write_connection(settings: Settings, conn: BrokerAddress) -> None:
    path = connection_file(settings)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(conn), f)
        os.replace(tmp, path)
    except OSError as error:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise Insecure(unusable(settings, error)) from None


def remove_connection(settings: Settings, conn: BrokerAddress) -> None:
    """Remove the file only if it is still ours (a newer broker may have replaced it)."""
    if read_connection_file(settings) == conn:
        try:
            os.unlink(connection_file(settings))
        except FileNotFoundError:
            pass


def read_connection_file(settings: Settings) -> BrokerAddress | None:
    """The connection file's contents; Insecure if others could read it, None if unusable."""
    try:
        data = json.loads(read_private(connection_file(settings)))
        return BrokerAddress(
            router=data["router"],
            pub=data["pub"],
            secret=data["secret"],
            pid=int(data["pid"]),
            curve=bool(data.get("curve", False)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def local_broker(settings: Settings) -> BrokerAddress | None:
    """This host's broker on the port, from its file, where one runs and the host named is where
    it listens. A host named otherwise is another broker, whatever runs here on the same port,
    and the file's secret is not for it."""
    if not broker_running(settings):
        return None
    conn = read_connection_file(settings)
    if conn is None:
        return None
    here = is_local(settings.host) or reaches_itself(f"{bare_host(settings.host)}:{settings.port}", conn.router)
    return conn if here else None


def new_secret() -> str:
    return secrets.token_hex(32)


def locate(settings: Settings, here: bool = False) -> BrokerAddress | None:
    """The broker this process should talk to, or None if none is known to be running.

    A live local broker's file wins where host:port names that broker (`local_broker`);
    otherwise a secret from the environment means the broker at host:port signs with it (its PUB
    address is learned in the handshake). Where the caller
    starts this host's broker when none runs (`here`), that is only one that listens there
    already: a secret says which key to use, not that the broker is elsewhere.
    """
    secret = secret_of(settings)
    conn = local_broker(settings)
    if conn is not None:
        return conn if secret is None else BrokerAddress(conn.router, conn.pub, secret, conn.pid, conn.curve)
    if secret is not None and settings.port != 0 and not (here and not listens(settings)):
        return BrokerAddress(endpoint(settings.host, settings.port), "", secret, 0, settings.curve)
    return None


def listens(settings: Settings) -> bool:
    """Whether something accepts connections at the broker's host and port."""
    try:
        socket.create_connection((bind_host(settings.host), settings.port), timeout=GREETING_WAIT).close()
    except OSError:
        return False
    return True


def start_embedded_broker(settings: Settings, timeout: float = 10.0) -> BrokerAddress | None:
    """Start a background broker for this host unless one runs, and wait for its file.

    When many ranks stop at once, the one holding the spawn lock starts the broker and the
    others only wait; the broker lock would let just one broker survive in any case.
    """
    ensure_runtime_dir(settings)
    spawn_lock = os.open(
        os.path.join(settings.runtime_dir, f"broker-{settings.port}.spawn"), os.O_RDWR | os.O_CREAT, 0o600
    )
    try:
        try:
            fcntl.flock(spawn_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            spawning = not broker_running(settings)
        except BlockingIOError:
            spawning = False
        if spawning:
            _spawn_broker(settings)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            conn = locate(settings, here=True)
            if conn is not None:
                return conn
            time.sleep(0.02)
        return None
    finally:
        os.close(spawn_lock)


def _spawn_broker(settings: Settings) -> None:
    import subprocess  # here: only the rank that starts its host's broker needs it

    env = dict(os.environ)
    env["MONARCH_DEBUG_SERVER_HOST"] = settings.host
    env["MONARCH_DEBUG_SERVER_PORT"] = str(settings.port)
    env["MONARCH_PDB_RUNTIME_DIR"] = settings.runtime_dir
    with open(log_file(settings), "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "monarch_pdb.broker", "--embedded"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
