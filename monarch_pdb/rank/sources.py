"""Whose code a frame runs, and under which file name its author knows it.

Engines that ship a client's functions by value (Monarch, through cloudpickle) compile them
under the name `<dynamic-code>`, keeping their line numbers and the globals that name the
script: every view of a frame (pdb's `bt`, `list`, `stacks`) names that file instead.
"""

from __future__ import annotations

import bdb
import os
import pdb
import sysconfig

SHIPPED_CODE = "<dynamic-code>"
"""The file name cloudpickle gives code it ships by value."""

RANK_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
PACKAGE_DIR = os.path.dirname(RANK_DIR.rstrip(os.sep)) + os.sep
RUNTIME_DIR = os.path.join(PACKAGE_DIR, "actor") + os.sep
DEBUGGER_FILES = frozenset({bdb.__file__, pdb.__file__})
WRAPPERS = frozenset(os.path.join(RANK_DIR, name) for name in ("hooks.py", "endpoint.py"))
"""This package's modules whose frames hold an engine's call of the program's code."""
LIBRARY_DIRS = tuple({os.path.join(sysconfig.get_paths()[key], "") for key in ("stdlib", "platstdlib")})
INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def source_file(frame) -> str:
    """The file of `frame`'s code: for a script's code shipped by value, the script's own
    path, which its globals name."""
    path = frame.f_code.co_filename
    named = frame.f_globals.get("__file__")
    return named if path == SHIPPED_CODE and isinstance(named, str) else path


def package_code(filename: str) -> bool:
    """This package's own code (its mesh runtime under actor/ is the program's): never shown."""
    return filename.startswith(PACKAGE_DIR) and not filename.startswith(RUNTIME_DIR)


def debugger_code(filename: str) -> bool:
    """pdb's or this package's code that pauses or inspects a thread: what runs below it is
    the debugger's, not the program's (unlike a wrapper's, which calls the program)."""
    return filename in DEBUGGER_FILES or (package_code(filename) and filename not in WRAPPERS)


def program_code(filename: str) -> bool:
    """Code its author wrote: not Python's library, an installed package, frozen code, nor
    this package (its mesh runtime included)."""
    return not (
        filename.startswith(PACKAGE_DIR)
        or filename.startswith(LIBRARY_DIRS)
        or filename.startswith("<frozen")
        or any(part in filename for part in INSTALLED)
    )
