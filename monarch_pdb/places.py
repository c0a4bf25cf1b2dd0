"""Where a frame is, in its author's words: which frames are the program's own, judged by path
alone (the process read may run another Python than the reader), the innermost of them, and
its one-line name (`train.py:41 next_batch`). Every view of ranks' stacks names places so: the
shell's tree, the broker's stall events, stacks read from outside.
"""

from __future__ import annotations

import os
import re

from monarch_pdb import wire

NATIVE_WIDTH = 100
"""Characters of a C++ function's name shown whole; a longer one loses its template arguments
and parameter lists (pybind11's run to thousands)."""
PIECE = re.compile(r"\boperator(?:\(\)|\[\]|[^\w\s(]*)|\(anonymous namespace\)|.", re.S)
"""A C++ name's pieces: an operator's name (`operator()`, `operator<<`) and `(anonymous
namespace)`, whose brackets open no list, else one character."""
LIBRARY = re.compile(r"[/\\](?:lib[/\\]python\d[^/\\]*|site-packages|dist-packages|monarch_pdb)[/\\]")
"""Where code that is not the program's lives: Python's library, installed packages, and this
package (the embedded mesh runtime's worker loop among it)."""


def where(frame: wire.Frame) -> str:
    """`train.py:41 next_batch`; a native frame `ncclGroupEnd (libnccl.so.2)`."""
    if frame.native:
        return f"{native_name(frame.function)} ({os.path.basename(frame.file)})"
    return f"{os.path.basename(frame.file)}:{frame.line} {frame.function}"


def native_name(name: str, width: int = NATIVE_WIDTH) -> str:
    """A C++ function's name as a reader takes it in: whole up to `width` characters, else its
    qualified name with each template argument list and parameter list elided (`f<...>(...)`);
    still too long, its end, which names the function."""
    if len(name) <= width:
        return name
    shown, depth, elided = [], 0, False
    for piece in PIECE.findall(name):
        if piece in ("<", "("):
            if depth:
                elided = True
            else:
                shown.append(piece)
                elided = False
            depth += 1
        elif piece in (">", ")") and depth:
            depth -= 1
            shown += [("..." if elided else "") + piece] if not depth else []
        elif depth:
            elided = True
        else:
            shown.append(piece)
    short = "".join(shown)
    return short if len(short) <= width else "..." + short[3 - width :]


def by_program(frame: wire.Frame) -> bool:
    """Whether a frame is the program's own rather than Python's, a package's, ours or a native
    library's."""
    return not (frame.native or frame.file.startswith("<") or LIBRARY.search(frame.file))


def program_frame(frames: list[wire.Frame]) -> wire.Frame:
    """The innermost frame of the program itself: where a rank is, in its author's words."""
    return next((frame for frame in reversed(frames) if by_program(frame)), frames[-1])


def place(frames: list[wire.Frame]) -> str:
    """Where a thread is, in its author's words: its program frame's place (native frames
    aside); "(no Python frame)" for a thread that runs none."""
    python = [frame for frame in frames if not frame.native]
    return where(program_frame(python)) if python else "(no Python frame)"
