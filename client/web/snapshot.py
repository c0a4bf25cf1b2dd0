"""`monarch-pdb snapshot [actor] -o FILE`: the whole job as one HTML file to attach to a bug
report, that opens in any browser with no server and no network, after the job is gone.

Each part is a command of the command layer, run as the shell runs it: the jobs, every rank
(`list --all`), and for each actor that runs, its mesh, the hang story (where the ranks are, the
collective they disagree on, who is behind), its torch.distributed process groups as
`collectives` folds them, and its merged stacks with the program frame's locals. Nothing in the ranks is stopped or changed.
"""

from __future__ import annotations

import argparse
import os
import sys

from monarch_pdb import settings as settings_module
from monarch_pdb.client import commands
from monarch_pdb.client.connection import BrokerConnection, NoBroker
from monarch_pdb.client.web import views
from monarch_pdb.client.web.page import page


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="monarch-pdb snapshot")
    parser.description = (
        "Write the whole job as one HTML file, with everything it shows inside it: the mesh, the hang story, "
        "the merged stacks with their locals, every rank. Stops nothing."
    )
    parser.add_argument("actor", nargs="?", help="one actor (default: every actor that runs)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write")
    views.client_options(parser, "the snapshot's reading")
    return parser


def run(args: argparse.Namespace) -> int:
    settings = settings_module.load().with_overrides(host=args.host, port=args.port)
    try:
        conn = BrokerConnection.open(settings)
    except NoBroker as error:
        print(f"monarch-pdb: {error}", file=sys.stderr)
        return 2
    try:
        data = views.gather(conn, args.actor, args.timeout)
    except commands.FAILURES as error:
        print(f"monarch-pdb: {error}", file=sys.stderr)
        return 1
    finally:
        conn.close()
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(page(data))
    except OSError as error:
        print(f"monarch-pdb: cannot write {args.output}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(f"wrote {os.path.abspath(args.output)}: {len(data['ranks'])} ranks, {len(data['actors'])} actors")
    return 0


def main(argv: list[str]) -> int:
    return run(build_parser().parse_args(argv))
