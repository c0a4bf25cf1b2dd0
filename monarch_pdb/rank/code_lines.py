"""Which code objects of this process hold a line of a file: where a breakpoint set in a
running rank has to watch.

A file's code is found where the program keeps it: the modules loaded from that file (their
functions, the methods of their classes, what a decorator wrapped) and the frames its threads
run now (a script's own loop at module level), with the code nested in each (a closure, a method
defined later, a comprehension). Only when those hold none of a breakpoint's lines is every
function on the heap looked at: code a module does not name, like a script's functions shipped by
value under another name (`<dynamic-code>`, which its globals name as the script's). Setting a
breakpoint then costs what the file's own code does, not what the process's 3 million objects do.
"""

from __future__ import annotations

import gc
import os
import sys
import types
from collections.abc import Iterable, Iterator

from monarch_pdb.rank.sources import SHIPPED_CODE, source_file


def nested(code: types.CodeType) -> Iterator[types.CodeType]:
    """A code object, and every one nested in it: its functions', classes', comprehensions'."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from nested(const)


def _of_modules(wanted: str) -> Iterator[types.CodeType]:
    """The code of each function that a module loaded from the file `wanted` (a real path)
    names, directly or in its classes."""
    name = os.path.basename(wanted)
    for module in list(sys.modules.values()):
        filename = getattr(module, "__file__", None)
        if isinstance(filename, str) and os.path.basename(filename) == name and os.path.realpath(filename) == wanted:
            yield from _of_namespace(vars(module), set())


def _of_namespace(namespace: dict, seen: set[int]) -> Iterator[types.CodeType]:
    """The code of the functions in a module's or a class's namespace, classes' in turn."""
    for value in list(namespace.values()):
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            yield from (f.__code__ for f in (value.fget, value.fset, value.fdel) if isinstance(f, types.FunctionType))
            continue
        while isinstance(value, types.FunctionType):
            yield value.__code__
            value = value.__dict__.get("__wrapped__")  # what functools.wraps wrapped
        if isinstance(value, type) and id(value) not in seen:
            seen.add(id(value))
            yield from _of_namespace(dict(vars(value)), seen)


def _of_heap() -> Iterator[tuple[types.CodeType, str]]:
    """Each function's code on the heap, with its file (a shipped function's, its script's)."""
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType):
            code = obj.__code__
            named = obj.__globals__.get("__file__") if code.co_filename == SHIPPED_CODE else None
            yield code, named if isinstance(named, str) else code.co_filename


def _of_frames() -> Iterator[tuple[types.CodeType, str]]:
    """The code each thread runs now, at every level of its stack, with its file."""
    frame: types.FrameType | None
    for frame in sys._current_frames().values():
        while frame is not None:
            yield frame.f_code, source_file(frame)
            frame = frame.f_back


def _of_file(found: Iterable[tuple[types.CodeType, str]], wanted: str) -> dict[types.CodeType, None]:
    """Those of `found` whose file is `wanted`, with the code nested in them."""
    same: dict[str, bool] = {}
    codes: dict[types.CodeType, None] = {}
    for code, filename in found:
        if filename not in same:
            same[filename] = not filename.startswith("<") and os.path.realpath(filename) == wanted
        if same[filename]:
            codes.update(dict.fromkeys(nested(code)))
    return codes


def code_of(path: str, lines: Iterable[int]) -> list[types.CodeType]:
    """Every code object of the file `path` this process holds, nested ones included: those its
    modules name and its threads run, or, when some of `lines` is in none of those, every one."""
    wanted = os.path.realpath(path)
    named = _of_file(((code, code.co_filename) for code in _of_modules(wanted)), wanted)
    found = {**named, **_of_file(_of_frames(), wanted)}
    if all(holding(list(found), line) for line in lines):
        return list(found)
    return list({**found, **_of_file(_of_heap(), wanted)})


def own_lines(code: types.CodeType) -> set[int]:
    """The lines whose instructions are this code object's own (not those of code nested in it)."""
    return {line for _, _, line in code.co_lines() if line is not None}


def holding(codes: list[types.CodeType], line: int) -> list[types.CodeType]:
    """Those of `codes` with instructions on `line`."""
    return [code for code in codes if line in own_lines(code)]
