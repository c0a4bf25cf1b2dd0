"""Entry points `monarch-pdb` and `monarch`: the one place that knows all three roles.

Each subcommand's module is imported only when chosen, so a shell never loads the broker and
the broker never loads cmd2.
"""

from __future__ import annotations

import argparse
import sys


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="pdb for programs that run as many processes at once")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{debug,broker,join}")
    commands.add_parser("debug", help="open the debugger shell", add_help=True)
    commands.add_parser("broker", help="run a debug broker in the foreground", add_help=True)
    commands.add_parser("join", help="load the debugger into running Python 3.14+ processes", add_help=True)
    return parser


def main(argv: list[str] | None = None, prog: str = "monarch-pdb") -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser(prog)
    if not argv or argv[0] not in ("debug", "broker", "join"):
        parser.parse_args(argv)
        return 2
    if argv[0] == "debug":
        from monarch_pdb.client import cli as chosen
    elif argv[0] == "join":
        from monarch_pdb.client import join as chosen
    else:
        from monarch_pdb.broker import cli as chosen
    sub = chosen.build_parser(argparse.ArgumentParser(prog=f"{prog} {argv[0]}"))
    return chosen.run(sub.parse_args(argv[1:]))


def monarch_main() -> int:
    """`monarch debug`, as Monarch's guide spells it."""
    return main(prog="monarch")
