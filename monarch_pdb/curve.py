"""CurveZMQ encryption for untrusted networks, keyed by the shared secret.

The broker's key pair is derived from the secret, so every holder of the secret knows the
broker's public key without another file to copy; each rank process and shell makes a fresh key pair.
Who may talk is still decided by the signatures on every message; CURVE adds privacy.
"""

from __future__ import annotations

import hashlib
import hmac

import zmq
from zmq.utils import z85

LABEL = b"monarch-pdb curve server key"


def server_keys(secret: str) -> tuple[bytes, bytes]:
    """(public, secret) Z85 keys of the broker, the same for everyone who knows `secret`."""
    private = z85.encode(hmac.new(secret.encode(), LABEL, hashlib.sha256).digest())
    return zmq.curve_public(private), private


def serve(sock: zmq.Socket, secret: str) -> None:
    _, private = server_keys(secret)
    sock.curve_server = True
    sock.curve_secretkey = private


def connect(sock: zmq.Socket, secret: str) -> None:
    public, private = zmq.curve_keypair()
    sock.curve_serverkey = server_keys(secret)[0]
    sock.curve_publickey = public
    sock.curve_secretkey = private
