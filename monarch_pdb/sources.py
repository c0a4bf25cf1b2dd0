"""Whose code a frame runs, and under which file name its author knows it.

Engines that ship a client's functions by value (Monarch, through cloudpickle) compile them
under the name `<dynamic-code>`, keeping their line numbers and the globals that name the
script: every view of a frame (pdb's `bt`, `list`, `stacks`) names that file instead.
"""

from __future__ import annotations

import bdb
import os
import pdb

SHIPPED_CODE = "<dynamic-code>"
"""The file name cloudpickle gives code it ships by value."""

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
RUNTIME_DIR = os.path.join(PACKAGE_DIR, "actor") + os.sep
DEBUGGER_FILES = frozenset({bdb.__file__, pdb.__file__})


def source_file(frame) -> str:
    """The file of `frame`'s code: for a script's code shipped by value, the script's own
    path, which its globals name."""
    path = frame.f_code.co_filename
    named = frame.f_globals.get("__file__")
    return named if path == SHIPPED_CODE and isinstance(named, str) else path


def debugger_code(filename: str) -> bool:
    """pdb's or this package's own code (the mesh runtime under actor/ is the program's)."""
    return filename in DEBUGGER_FILES or (filename.startswith(PACKAGE_DIR) and not filename.startswith(RUNTIME_DIR))
