"""`monarch-pdb web [--listen HOST:PORT]`: the job in a browser, live. A client of the broker like
`debug`, `dap` and `mcp` (the same `--host`/`--port`, environment and connection file), serving
the snapshot's page with the job's state in it: the page asks `actor?name=` to read one actor,
and hears the broker's news on `news` (server-sent events), after which it asks `state` for the
job again. Nothing is polled while nothing happens.

It listens where the editor's and the agent's servers may (`listen.py`): on loopback, or
anywhere once a secret is set, and then every request must show it. Starlette and uvicorn come
with the `web` extra.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

from monarch_pdb import discovery
from monarch_pdb import settings as settings_module
from monarch_pdb.client import commands
from monarch_pdb.client.commands.event_lines import describe_events
from monarch_pdb.client.connection import RESTARTED, BrokerConnection, NoBroker
from monarch_pdb.client.listen import listen_address, serve
from monarch_pdb.client.web import views
from monarch_pdb.client.web.page import page

NEEDS = "monarch-pdb web needs Starlette and uvicorn: pip install 'monarch-pdb[web]'"
LISTEN = "127.0.0.1:8760"
NEWS_KEPT = 256
"""Lines of news kept for a page that connects late or reconnects."""
QUIET_AFTER = 15.0
"""Seconds a news stream waits before it sends a comment, so that proxies keep it open."""


class News:
    """The broker's events as lines, numbered, for every page that listens; told on the
    connection's thread, waited for on the server's."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, str]] = []
        self.seq = 0
        self.changed = threading.Condition()

    def heard(self, lines: list[str]) -> None:
        with self.changed:
            for line in lines:
                self.seq += 1
                self.lines.append((self.seq, line))
            del self.lines[:-NEWS_KEPT]
            self.changed.notify_all()

    def after(self, seq: int, timeout: float) -> list[tuple[int, str]]:
        """The lines after `seq`, waiting up to `timeout` for one."""
        with self.changed:
            self.changed.wait_for(lambda: self.seq > seq, timeout)
            return [(n, line) for n, line in self.lines if n > seq]


def app(conn: BrokerConnection, news: News, cast_timeout: float) -> Any:
    try:
        import anyio
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
        from starlette.routing import Route
    except ImportError:
        raise SystemExit(NEEDS) from None
    asking = threading.Lock()
    """One question to the broker at a time, as the shell asks them."""

    def answered(make: Any, response: Any = JSONResponse) -> Any:
        """What `make` asks of the broker, as `response`; a command's one-line failure as 503."""
        with asking:
            try:
                return response(make())
            except commands.FAILURES as error:
                return PlainTextResponse(str(error), status_code=503)

    def home(request: Request) -> Any:
        return answered(lambda: page(views.state(conn), live=True), HTMLResponse)

    def state(request: Request) -> Any:
        return answered(lambda: views.state(conn))

    def actor(request: Request) -> Any:
        name = request.query_params.get("name", "")
        if not name:
            return PlainTextResponse("actor?name= needs an actor's name", status_code=400)
        return answered(lambda: views.reading(conn, name, cast_timeout))

    async def stream(request: Request) -> StreamingResponse:
        async def lines() -> AsyncIterator[str]:
            seen = news.seq
            while not await request.is_disconnected():
                told = await anyio.to_thread.run_sync(news.after, seen, QUIET_AFTER)
                for _, line in told:
                    yield f"data: {json.dumps(line)}\n\n"
                if told:
                    seen = told[-1][0]
                else:
                    yield ": still here\n\n"

        return StreamingResponse(lines(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    return Starlette(
        routes=[
            Route("/", home),
            Route("/state", state),
            Route("/actor", actor),
            Route("/news", stream),
        ]
    )


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="monarch-pdb web")
    parser.description = "Serve the job as a page in a browser: the mesh as it changes, the stacks, the hang story."
    parser.add_argument(
        "--listen",
        default=LISTEN,
        metavar="HOST:PORT",
        help=f"where the page is served (default {LISTEN}; port 0: any free one); off loopback, with a secret "
        "set, which a browser shows by opening ?token=<secret> once",
    )
    views.client_options(parser, "when an actor is read")
    return parser


def run(args: argparse.Namespace) -> int:
    settings = settings_module.load().with_overrides(host=args.host, port=args.port)
    where = listen_address(args.listen, settings, "monarch-pdb web")
    news = News()
    try:
        conn = BrokerConnection.open(settings)
    except NoBroker as error:
        print(f"monarch-pdb: {error}", file=sys.stderr)
        return 2
    conn.on_events = lambda events: news.heard(describe_events(events, None, None))
    conn.on_restart = lambda: news.heard([RESTARTED])
    try:
        serve(app(conn, news, args.timeout), *where, discovery.secret_of(settings), "monarch-pdb web")
    finally:
        conn.close()
    return 0


def main(argv: list[str]) -> int:
    return run(build_parser().parse_args(argv))
