"""Which code objects of this process hold a line of a file: where a breakpoint set in a
running rank has to watch.

A process's code is that of its functions (found among the objects the collector tracks),
the code nested in theirs (functions not made yet: a closure, a method defined later), and
that of the frames its threads run now (a script's own loop at module level). Code shipped
by value under another name (`<dynamic-code>`) is its script's, as its globals say.
"""

from __future__ import annotations

import gc
import os
import sys
import types
from collections.abc import Iterator

from monarch_pdb.rank.sources import SHIPPED_CODE, source_file


def nested(code: types.CodeType) -> Iterator[types.CodeType]:
    """A code object, and every one nested in it: its functions', classes', comprehensions'."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from nested(const)


def _running() -> Iterator[tuple[types.CodeType, str]]:
    """Each code object, with its file, of the program: its functions', and its threads' frames'."""
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType):
            code = obj.__code__
            named = obj.__globals__.get("__file__") if code.co_filename == SHIPPED_CODE else None
            yield code, named if isinstance(named, str) else code.co_filename
    frame: types.FrameType | None
    for frame in sys._current_frames().values():
        while frame is not None:
            yield frame.f_code, source_file(frame)
            frame = frame.f_back


def code_of(path: str) -> list[types.CodeType]:
    """Every code object of the file `path` this process holds, nested ones included."""
    wanted = os.path.realpath(path)
    same: dict[str, bool] = {}
    found: dict[types.CodeType, None] = {}
    for code, filename in _running():
        if filename not in same:
            same[filename] = not filename.startswith("<") and os.path.realpath(filename) == wanted
        if same[filename]:
            found.update(dict.fromkeys(nested(code)))
    return list(found)


def own_lines(code: types.CodeType) -> set[int]:
    """The lines whose instructions are this code object's own (not those of code nested in it)."""
    return {line for _, _, line in code.co_lines() if line is not None}


def holding(codes: list[types.CodeType], line: int) -> list[types.CodeType]:
    """Those of `codes` with instructions on `line`."""
    return [code for code in codes if line in own_lines(code)]
