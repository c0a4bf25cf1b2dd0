"""Where a server of ours that a client connects to (the editor's adapter, the agent's MCP
server) listens: the broker's rule, a loopback address unless a secret is set."""

from __future__ import annotations

from monarch_pdb import discovery
from monarch_pdb.settings import Settings


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
