"""Where a server of ours that a client connects to (the editor's adapter, the agent's MCP
server, the web page) listens: the broker's rule, a loopback address unless a secret is set; and
off loopback, an HTTP server answers only a request that shows that secret."""

from __future__ import annotations

import contextlib
import hmac
import socket
import sys
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

from monarch_pdb import discovery
from monarch_pdb.settings import Settings

TOKEN_COOKIE = "monarch_pdb_token"
"""The cookie a browser keeps the secret in, once it opened a page with `?token=<secret>`."""


def listen_address(text: str, settings: Settings, prog: str) -> tuple[str, int]:
    """HOST:PORT to listen on: a loopback address, or any other once a secret is set; `prog`
    names the command in the one line that refuses it."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SystemExit(f"{prog}: --listen takes HOST:PORT, not {text!r}")
    if not discovery.is_local(host) and discovery.secret_of(settings) is None:
        raise SystemExit(
            f"{prog}: listening on {host}, which is not loopback, needs a secret "
            "(MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE)"
        )
    return discovery.bind_host(host), int(port)


def guarded(app: Any, secret: str, prog: str) -> Any:
    """`app`, answering only requests that show the secret: `Authorization: Bearer <secret>`,
    or the cookie a browser is given by opening any address with `?token=<secret>` once (it is
    sent on to the same address without it). Anything else is refused with 401."""
    from starlette.responses import PlainTextResponse, RedirectResponse

    bearer = f"Bearer {secret}".encode()

    async def guard(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        jar: SimpleCookie = SimpleCookie()
        with contextlib.suppress(CookieError):
            jar.load(headers.get(b"cookie", b"").decode("latin-1"))
        kept = jar[TOKEN_COOKIE].value if TOKEN_COOKIE in jar else ""
        if hmac.compare_digest(headers.get(b"authorization", b""), bearer) or hmac.compare_digest(
            kept.encode(), secret.encode()
        ):
            await app(scope, receive, send)
            return
        token = parse_qs(scope.get("query_string", b"").decode(errors="replace")).get("token", [""])[0]
        if token and hmac.compare_digest(token.encode(), secret.encode()):
            answer: Any = RedirectResponse(scope.get("path", "/"), status_code=303)
            answer.set_cookie(TOKEN_COOKIE, secret, httponly=True, samesite="strict")
        else:
            answer = PlainTextResponse(
                f"{prog}: send 'Authorization: Bearer <the secret>', or open ?token=<the secret> once\n",
                status_code=401,
            )
        await answer(scope, receive, send)

    return guard


def serve(app: Any, host: str, port: int, secret: str | None, prog: str, path: str = "/") -> None:
    """`app` over HTTP on HOST:PORT (port 0: any free one), its address said on stderr; off
    loopback, guarded by the secret."""
    import anyio
    import uvicorn

    if not discovery.is_local(host):
        assert secret is not None  # listen_address refused it otherwise
        app = guarded(app, secret, prog)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, port), family=family) as sock:
        where = discovery.endpoint(host, sock.getsockname()[1]).removeprefix("tcp://")
        print(f"{prog}: listening on http://{where}{path}", file=sys.stderr, flush=True)
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
        anyio.run(uvicorn.Server(config).serve, [sock])
