"""The broker's log: one line at a time on its stderr."""

from __future__ import annotations

import sys


def log(text: str) -> None:
    print(f"monarch-pdb broker: {text}", file=sys.stderr, flush=True)
