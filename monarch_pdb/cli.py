"""Entry points `monarch-pdb` and `monarch`: the one place that knows all three roles.

Each subcommand's module is imported only when chosen, so a shell never loads the broker and
the broker never loads cmd2. torchmonarch installs a `monarch` command of its own (`apply`,
`exec`, `kill`, ...), which ours replaces when installed after it: `monarch` runs Monarch's
own command for every subcommand but ours.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from typing import Protocol

COMMANDS = ("debug", "broker", "join", "stacks", "dap", "mcp", "web", "snapshot")
MONARCH_MAIN = "monarch_pdb.cli:monarch_main"
"""Our `monarch` console script's entry point; any other is Monarch's own."""


class _Command(Protocol):
    """A subcommand's module."""

    def build_parser(self, parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="pdb for programs that run as many processes at once")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{debug,broker,join,stacks,dap,mcp,web,snapshot}"
    )
    commands.add_parser("debug", help="open the debugger shell", add_help=True)
    commands.add_parser("broker", help="run a debug broker in the foreground", add_help=True)
    commands.add_parser("join", help="load the debugger into running Python 3.14+ processes", add_help=True)
    commands.add_parser("stacks", help="read the stacks of processes from outside, joined or not", add_help=True)
    commands.add_parser("dap", help="serve an editor through the Debug Adapter Protocol", add_help=True)
    commands.add_parser("mcp", help="serve a coding agent through the Model Context Protocol", add_help=True)
    commands.add_parser("web", help="serve the job as a page in a browser", add_help=True)
    commands.add_parser("snapshot", help="write the whole job as one HTML file to share", add_help=True)
    return parser


def main(argv: list[str] | None = None, prog: str = "monarch-pdb") -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        print(
            f"{prog}: {argv[0]!r} is not a command of monarch-pdb ({', '.join(COMMANDS)})"
            + (", and torchmonarch, whose `monarch` runs Monarch's own, is not installed" if prog == "monarch" else ""),
            file=sys.stderr,
        )
        return 2
    if not argv or argv[0] not in COMMANDS:
        _parser(prog).parse_args(argv)
        return 2
    chosen: _Command
    if argv[0] == "debug":
        from monarch_pdb.client.shell import command_line as chosen
    elif argv[0] == "join":
        from monarch_pdb.client.outside import join as chosen
    elif argv[0] == "stacks":
        from monarch_pdb.client.outside import host_stacks as chosen
    elif argv[0] == "dap":
        from monarch_pdb.client.editor import dap as chosen
    elif argv[0] == "mcp":
        from monarch_pdb.client.agents import mcp_server as chosen
    elif argv[0] == "web":
        from monarch_pdb.client.web import server as chosen
    elif argv[0] == "snapshot":
        from monarch_pdb.client.web import snapshot as chosen
    else:
        from monarch_pdb.broker import main as chosen
    sub = chosen.build_parser(argparse.ArgumentParser(prog=f"{prog} {argv[0]}"))
    return chosen.run(sub.parse_args(argv[1:]))


def monarch_command() -> metadata.EntryPoint | None:
    """torchmonarch's `monarch` console script (any `monarch` script but ours), if installed."""
    return next(
        (
            ep
            for ep in metadata.entry_points(group="console_scripts", name="monarch")
            if ep.value.replace(" ", "") != MONARCH_MAIN
        ),
        None,
    )


def monarch_main() -> int | None:
    """`monarch debug`, as Monarch's guide spells it, and our other commands; anything else
    runs Monarch's own `monarch`, as its console script would, where torchmonarch is installed."""
    argv = sys.argv[1:]
    if argv and argv[0] in COMMANDS:
        return main(argv, prog="monarch")
    theirs = monarch_command()
    if theirs is None:
        return main(argv, prog="monarch")
    return theirs.load()()
