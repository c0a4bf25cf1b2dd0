"""Command line of `monarch-pdb debug` and `monarch debug`."""

from __future__ import annotations

import argparse
import sys

from monarch_pdb import settings as settings_module
from monarch_pdb.client.connection import NoBroker, ShellConnection


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="monarch-pdb debug")
    parser.description = "Open the debugger shell on the ranks paused in a broker."
    parser.add_argument("--host", help="the broker's host (MONARCH_DEBUG_SERVER_HOST, default localhost)")
    parser.add_argument("--port", type=int, help="the broker's port (MONARCH_DEBUG_SERVER_PORT, default 27000)")
    return parser


def run(args: argparse.Namespace) -> int:
    from monarch_pdb.client.shell import DebugShell

    settings = settings_module.load().with_overrides(host=args.host, port=args.port)
    try:
        conn = ShellConnection.open(settings)
    except NoBroker as error:
        print(f"monarch-pdb: {error}", file=sys.stderr)
        return 2
    try:
        return DebugShell(conn, history_file=settings.history_file).cmdloop()
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    return run(build_parser().parse_args(argv))
