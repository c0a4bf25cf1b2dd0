"""Command line of `monarch-pdb debug` and `monarch debug`: the interactive shell, or the
same commands from a script or the command line, for programs and CI."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from monarch_pdb import settings as settings_module
from monarch_pdb.client.commands.arguments import seconds
from monarch_pdb.client.connection import WAIT_BROKER, BrokerConnection, NoBroker, broker_options
from monarch_pdb.client.shell.reporter import Transcript

QUIT_KEYS = "Ctrl-C, Ctrl-D or quit leaves; other lines typed meanwhile run once it answers."
INTERRUPTED = 130
"""The exit status of a program a SIGINT (Ctrl-C) ended."""


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="monarch-pdb debug")
    parser.description = "Open the debugger shell on the ranks paused in a broker."
    broker_options(parser)
    parser.add_argument(
        "--script",
        metavar="FILE",
        action="append",
        default=[],
        help="run the commands in FILE (one per line, # comments) and exit; repeatable",
    )
    parser.add_argument(
        "-c",
        dest="commands",
        metavar="CMD",
        action="append",
        default=[],
        help="run CMD and exit; repeatable, after any --script",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document per command")
    parser.add_argument("--record", metavar="FILE", help="write a transcript that --script can replay")
    parser.add_argument(
        "--wait-broker",
        type=seconds,
        default=WAIT_BROKER,
        metavar="S",
        help=f"with --script or -c, seconds to wait for a broker to answer (default {WAIT_BROKER:g}); "
        "the interactive shell waits until one does",
    )
    return parser


def script_lines(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    """(where, line number, text) of every command to run, comments and blank lines left out."""
    lines = []
    for path in args.script:
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as f:  # an undecodable byte as -c has it
                lines += [(path, n, text.rstrip("\n")) for n, text in enumerate(f, 1)]
        except OSError as error:
            raise SystemExit(f"monarch-pdb: cannot read script {path}: {error.strerror}") from None
    lines += [("-c", n, text) for n, text in enumerate(args.commands, 1)]
    return [(where, n, text) for where, n, text in lines if text.strip() and not text.lstrip().startswith("#")]


def shorten(text: str, width: int = 200) -> str:
    """A script's line as an error message quotes it: a long one by its start."""
    return text if len(text) <= width else f"{text[:width]}... ({len(text):,} characters)"


def run(args: argparse.Namespace) -> int:
    """The shell, or the lines of args' scripts and -c."""
    from monarch_pdb.client.shell.debug_shell import QUIT_COMMANDS, DebugShell, OutputClosed
    from monarch_pdb.client.shell.terminal import TypedAhead

    settings = settings_module.load().with_overrides(host=args.host, port=args.port)
    interactive = not (args.script or args.commands)
    lines = script_lines(args)
    if not (interactive or lines):
        return 0  # only blank lines and comments: nothing to do, and no broker to wait for
    keyboard = sys.stdin.fileno() if interactive and sys.stdin.isatty() else None
    if keyboard is not None:
        # Ctrl-C quits while we wait for a broker, as it stops a command at the prompt (cmd2
        # sets its own handler there), even when whoever started us ignores SIGINT (a
        # script's background job does).
        signal.signal(signal.SIGINT, signal.default_int_handler)
    conn = BrokerConnection(settings)
    transcript = None
    ahead = TypedAhead(QUIT_COMMANDS)
    try:
        try:
            if keyboard is None:
                conn.wait_for_broker(
                    args.wait_broker,
                    lambda note: print(
                        f"monarch-pdb: {note} Giving up after {args.wait_broker:g} s (--wait-broker).", file=sys.stderr
                    ),
                )
            else:
                conn.wait_for_broker(
                    None,
                    lambda note: print(f"{note[0].upper()}{note[1:]} {QUIT_KEYS}", file=sys.stderr),
                    keyboard,
                    ahead.take,
                )
        except NoBroker as error:
            if args.json:
                print(json.dumps({"error": str(error)}))
            else:
                print(f"monarch-pdb: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(file=sys.stderr)
            return INTERRUPTED
        transcript = Transcript.open(args.record) if args.record else None
        shell = DebugShell(
            conn, history_file=settings.history_file if interactive else "", as_json=args.json, transcript=transcript
        )
        if ahead.leaving is not None:
            shell.onecmd_plus_hooks(ahead.leaving)
            return 0
        if interactive:
            shell.terminal.typed_ahead = ahead.lines
            return shell.cmdloop()
        for where, number, text in lines:
            shell.report.script_line = f"{where}:{number}: {shorten(text.strip())}"
            stop = shell.onecmd_plus_hooks(text)
            if shell.report.failure:
                return 1
            if stop:
                break
        return 0
    except OutputClosed:
        # What is still buffered for the closed pipe goes nowhere, instead of failing again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    finally:
        conn.close()
        if transcript is not None:
            transcript.close()


def main(argv: list[str]) -> int:
    return run(build_parser().parse_args(argv))
