"""`monarch-pdb broker`: its command line, and a broker's start: its secret, read once, the
checks that refuse an unsafe start, the socket bound and the connection file written, then the
loop (`server.py`) until it stops."""

from __future__ import annotations

import argparse
import getpass
import os
import resource

import zmq

from monarch_pdb import discovery
from monarch_pdb import settings as settings_module
from monarch_pdb.broker import server
from monarch_pdb.broker.log import log
from monarch_pdb.settings import Settings


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="monarch-pdb broker")
    parser.description = "Run the debug broker in the foreground."
    parser.add_argument("--host", help="address to listen on (MONARCH_DEBUG_SERVER_HOST, default localhost)")
    parser.add_argument("--port", type=int, help="port to listen on (MONARCH_DEBUG_SERVER_PORT, default 27000)")
    parser.add_argument(
        "--idle-exit",
        type=float,
        metavar="SECONDS",
        help="exit after this long with no rank or shell connected (default: never)",
    )
    parser.add_argument(
        "--curve",
        action="store_true",
        default=None,
        help="encrypt every connection with CurveZMQ (MONARCH_PDB_CURVE=1)",
    )
    parser.add_argument(
        "--upstream",
        metavar="HOST:PORT",
        help="register with the broker above at HOST:PORT and serve it every rank of this one "
        "(MONARCH_PDB_UPSTREAM); needs the secret that broker has (MONARCH_PDB_SECRET_FILE)",
    )
    parser.add_argument(
        "--audit",
        metavar="FILE",
        help="append one line per command sent to any rank: time, shell, job, actor, ranks, command",
    )
    parser.add_argument("--embedded", action="store_true", help=argparse.SUPPRESS)
    return parser


def run(args: argparse.Namespace) -> int:
    upstream = settings_module.upstream_address(args.upstream, "--upstream") if args.upstream else None
    settings = settings_module.load().with_overrides(
        host=args.host, port=args.port, curve=args.curve, upstream=upstream
    )
    idle = args.idle_exit if args.idle_exit is not None else (settings.broker_idle_exit if args.embedded else 0.0)
    return serve(settings, embedded=args.embedded, idle_exit=idle, audit=args.audit)


def main(argv: list[str]) -> int:
    return run(build_parser().parse_args(argv))


def raise_open_file_limit() -> str:
    """Each rank process and shell is a connection: take as many descriptors as allowed, and
    say how many connections that makes when it is few."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= 65536:
        return ""
    return f"can serve about {max(soft - 64, 0)} rank processes and shells (open-file limit {soft}; raise it with ulimit -n)"


def broker_secret(settings: Settings, configured: str | None) -> str:
    """The `configured` secret; else that of the broker that last served this port, if its file
    is still here (ranks and shells that knew it reconnect to a restarted broker without a
    word); else a new one."""
    if configured is not None:
        return configured
    previous = discovery.read_connection_file(settings)
    return previous.secret if previous is not None else discovery.new_secret()


def serve(settings: Settings, embedded: bool, idle_exit: float, audit: str | None = None) -> int:
    """Run a broker in this process until stopped; 0 also when another broker already runs."""
    try:
        lock = discovery.take_broker_lock(settings)
        configured = discovery.secret_of(settings)
        secret = broker_secret(settings, configured)
    except discovery.Insecure as problem:
        log(str(problem))
        return 2
    if lock is None:
        if not embedded:
            log(f"another broker already serves port {settings.port} (see {discovery.connection_file(settings)})")
            return 1
        return 0
    if configured is None and not discovery.is_local(settings.host):
        log(
            f"refusing to listen on {settings.host} without a secret: set MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE"
        )
        return 2
    if configured is None and settings.upstream:
        log(
            f"cannot register with the broker above ({settings.upstream}) without the secret it was given: "
            "set MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE"
        )
        return 2
    unresolved = discovery.does_not_resolve(discovery.bind_host(settings.host))
    if unresolved:
        log(f"cannot listen on {settings.host}:{settings.port}: {unresolved}")
        return 2
    capacity = raise_open_file_limit()
    audit_file = open(audit, "a", encoding="utf-8") if audit else None
    broker = server.Broker(settings, secret, idle_exit, audit_file)
    try:
        conn = broker.bind()
    except zmq.ZMQError as error:
        log(f"cannot listen on {settings.host}:{settings.port}: {error}")
        return 1
    try:
        discovery.write_connection(settings, conn)
    except discovery.Insecure as problem:
        log(str(problem))
        broker.context.destroy(linger=0)
        return 2
    encrypted = ", encrypted with CURVE" if settings.curve else ""
    log(f"listening on {conn.router} (events on {conn.pub}){encrypted} as {getpass.getuser()}, pid {os.getpid()}")
    if capacity:
        log(capacity)
    if settings.upstream and discovery.reaches_itself(settings.upstream, conn.router):
        log(f"the broker above ({settings.upstream}) is this broker itself: it serves as the root, with none above")
    elif settings.upstream:
        broker.start_upstream(settings.upstream)
    try:
        broker.serve()
    finally:
        discovery.remove_connection(settings, conn)
        if audit_file is not None:
            audit_file.close()
    return 0
