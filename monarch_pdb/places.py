"""Where a frame is, in its author's words: which frames are the program's own, judged by path
alone (the process read may run another Python than the reader), the innermost of them, and
its one-line name (`train.py:41 next_batch`). Every view of ranks' stacks names places so: the
shell's tree, the broker's stall events, stacks read from outside.
"""

from __future__ import annotations

import os
import re

from monarch_pdb import wire

LIBRARY = re.compile(r"[/\\](?:lib[/\\]python\d[^/\\]*|site-packages|dist-packages|monarch_pdb)[/\\]")
"""Where code that is not the program's lives: Python's library, installed packages, and this
package (the embedded mesh runtime's worker loop among it)."""


def where(frame: wire.Frame) -> str:
    """`train.py:41 next_batch`; a native frame `ncclGroupEnd (libnccl.so.2)`."""
    if frame.native:
        return f"{frame.function} ({os.path.basename(frame.file)})"
    return f"{os.path.basename(frame.file)}:{frame.line} {frame.function}"


def own_code(frame: wire.Frame) -> bool:
    """Whether a frame is the program's own rather than Python's, a package's, ours or a native
    library's."""
    return not (frame.native or frame.file.startswith("<") or LIBRARY.search(frame.file))


def program_frame(frames: list[wire.Frame]) -> wire.Frame:
    """The innermost frame of the program itself: where a rank is, in its author's words."""
    return next((frame for frame in reversed(frames) if own_code(frame)), frames[-1])


def place(frames: list[wire.Frame]) -> str:
    """Where a thread is, in its author's words: its program frame's place (native frames
    aside); "(no Python frame)" for a thread that runs none."""
    python = [frame for frame in frames if not frame.native]
    return where(program_frame(python)) if python else "(no Python frame)"
