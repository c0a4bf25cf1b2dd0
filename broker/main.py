"""Command line of `monarch-pdb broker`."""

from __future__ import annotations

import argparse

from monarch_pdb import settings as settings_module
from monarch_pdb.broker import server


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
    return server.run(settings, embedded=args.embedded, idle_exit=idle, audit=args.audit)


def main(argv: list[str]) -> int:
    return run(build_parser().parse_args(argv))
