"""Structured answers about a paused session's frames, for an editor: its stack, a frame's
scopes, a value's children, an expression's value.

The paused thread answers them itself, between two pdb lines, so the frames it reads stand
still. A value with children gets a handle that lives until the session next runs: children
are made only when asked for, a page at a time, and a tensor or array is described by its
shape, dtype and device, never converted or printed whole.
"""

from __future__ import annotations

import ast
import itertools
import linecache
import reprlib
import traceback
from collections.abc import Callable
from typing import Any

from monarch_pdb import wire
from monarch_pdb.rank import log_points
from monarch_pdb.rank.sources import program_code, source_file

VALUE_LIMIT = 200
"""The most characters of a value's text an answer carries."""
PAGE = 1000
"""The most children one answer carries when the editor asks for all of them."""

_repr = reprlib.Repr()
_repr.maxstring = VALUE_LIMIT
_repr.maxother = VALUE_LIMIT
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 10


def array_summary(value: Any) -> str | None:
    """`Tensor shape=(4, 8) dtype=torch.float32 device=cpu` for anything with a shape and a
    dtype (torch, numpy, jax), read from its attributes only; None for anything else."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None or isinstance(value, type):
        return None
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        return None
    device = getattr(value, "device", None)
    where = f" device={device}" if device is not None and not callable(device) else ""
    return f"{type(value).__name__} shape={dims} dtype={dtype}{where}"


def describe(value: Any) -> str:
    summary = array_summary(value)
    if summary is not None:
        return summary
    try:
        return _repr.repr(value)
    except Exception as error:  # a user's __repr__ may raise anything
        return f"<repr failed: {type(error).__name__}: {error}>"


class Scope:
    """A frame's locals or globals: its children are named as the variables are, where a
    dict's keys are shown as their repr."""

    def __init__(self, names: Any, frame) -> None:
        self.names = names
        self.frame = frame


def has_children(value: Any) -> bool:
    """Whether `children` would show any, found without making them."""
    if array_summary(value) is not None or isinstance(value, (str, bytes, int, float, complex, bool, type(None))):
        return False
    if isinstance(value, Scope):
        return len(value.names) > 0
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        return len(value) > 0
    return isinstance(getattr(value, "__dict__", None), dict) and bool(value.__dict__)


def children(value: Any, start: int, count: int) -> tuple[list[tuple[str, Any]], int]:
    """`count` of a value's children from `start`, as (name, value), and how many it has: a
    container's items, else an object's attributes. Only the page is made."""
    if not has_children(value):
        return [], 0
    if isinstance(value, Scope):
        pairs, total = ((str(name), v) for name, v in value.names.items()), len(value.names)
    elif isinstance(value, dict):
        pairs, total = ((_repr.repr(k), v) for k, v in value.items()), len(value)
    elif isinstance(value, (list, tuple)):
        indexes = range(start, min(len(value), start + count))
        return [(str(i), value[i]) for i in indexes], len(value)
    elif isinstance(value, (set, frozenset)):
        pairs, total = ((str(i), v) for i, v in enumerate(value)), len(value)
    else:
        pairs, total = iter(value.__dict__.items()), len(value.__dict__)
    return list(itertools.islice(pairs, start, start + count)), total


class EditorBreakpoints:
    """The breakpoints an editor set in one session, by file: pdb's own, set again after the
    top-level continue clears those typed with `b`, and gone with the session. A log point is
    a pdb breakpoint that prints its message to the editor (`tell`) instead of stopping."""

    def __init__(self, tell: Callable[[bytes, str], None]) -> None:
        self.tell = tell
        self.files: dict[str, list[wire.Spot]] = {}
        self.owner = b""
        """The editor's connection, whom log points tell."""
        self.logs: dict[int, log_points.Compiled] = {}
        """The log points among pdb's breakpoints, by number."""

    def change(self, debugger, path: str, spots: list[wire.Spot], owner: bytes = b"") -> list[wire.Item]:
        """Make `spots` the file's breakpoints; an item per spot, `value` why it is not set."""
        for spot in self.files.pop(path, []):
            debugger.clear_break(path, spot.line)
        self.files[path] = spots
        self.owner = owner
        return [
            wire.Item(name=str(spot.line), value=self.set(debugger, path, spot) or "", line=spot.line) for spot in spots
        ]

    def drop_gone(self, debugger, gone: set[bytes]) -> None:
        """Forget them once the editor that set them is `gone` (disconnected, or lost)."""
        if not self.files or self.owner not in gone:
            return
        for path, spots in self.files.items():
            for spot in spots:
                debugger.clear_break(path, spot.line)
        self.files.clear()
        self.logs.clear()

    def restore(self, debugger) -> None:
        """Set them again, once pdb's own are cleared."""
        self.logs.clear()
        for path, spots in self.files.items():
            for spot in spots:
                self.set(debugger, path, spot)

    def set(self, debugger, path: str, spot: wire.Spot) -> str | None:
        """pdb's reason when it cannot break there (no such file, no code on that line)."""
        try:
            compiled = log_points.compiled(spot)
        except log_points.Unusable as problem:
            return str(problem)
        if not debugger.checkline(path, spot.line):
            return f"line {spot.line} of {path} holds no code to stop at"
        failed = debugger.set_break(path, spot.line, cond=spot.condition or None)
        if failed:
            return failed
        made = debugger.get_breaks(path, spot.line)[-1]
        if spot.hits > 1:
            made.ignore = spot.hits - 1
        if spot.log:
            self.logs[made.number] = compiled
        return None

    def logged(self, debugger, frame) -> bool:
        """Whether pdb stopped at a log point: its message goes to the editor, and the rank on."""
        logged = self.logs.get(getattr(debugger, "currentbp", 0))
        if logged is None:
            return False
        debugger.currentbp = 0
        self.tell(self.owner, logged.message(frame))
        return True


class Inspector:
    """One paused stop's handles: made as values are shown, forgotten once the session has run.
    `session` is the paused one (debugger.ThreadSession): its pdb, the exception a post-mortem stop
    caught, the editor's breakpoints."""

    def __init__(self, session) -> None:
        self.session = session
        self.debugger = session.debugger
        self.stop = session.stops
        self.handles: dict[int, Any] = {}

    def answer(self, ask: wire.Inspect) -> wire.Inspection:
        try:
            items, total = self._answer(ask)
        except Exception as error:  # the user's expression, or a frame index from an old stop
            return wire.Inspection(ref=ask.ref, items=[], error=f"{type(error).__name__}: {error}", stop=self.stop)
        return wire.Inspection(ref=ask.ref, items=items, total=total, stop=self.stop)

    def _answer(self, ask: wire.Inspect) -> tuple[list[wire.Item], int]:
        if ask.query == wire.Query.STACK:
            frames = [
                wire.Item(name=frame.f_code.co_name, file=source_file(frame), line=lineno, handle=index)
                for index, (frame, lineno) in enumerate(self.frames())
            ]
            if ask.mine:
                frames = [item for item in frames if program_code(item.file)] or frames[:1]
            return frames, len(frames)
        if ask.query == wire.Query.SCOPES:
            frame = self.frame(ask.frame)
            return [
                wire.Item(name="Locals", handle=self.keep(Scope(self.locals_of(frame), frame))),
                wire.Item(name="Globals", handle=self.keep(Scope(frame.f_globals, frame))),
            ], 2
        if ask.query == wire.Query.VARIABLES:
            if ask.handle not in self.handles:
                raise LookupError("that value is gone: the rank ran since it was shown")
            page, total = children(self.handles[ask.handle], ask.start, ask.count or PAGE)
            return [self.item(name, value) for name, value in page], total
        if ask.query == wire.Query.BREAKPOINTS:
            items = self.session.breakpoints.change(self.debugger, ask.expression, ask.spots, ask.owner)
            return items, len(items)
        if ask.query == wire.Query.EXCEPTION:
            caught = self.session.exception
            if caught is None:
                raise LookupError("this rank did not stop for an exception")
            return [
                wire.Item(
                    name=type(caught).__name__,
                    value=str(caught),
                    type="".join(traceback.format_exception(type(caught), caught, caught.__traceback__)),
                )
            ], 1
        if ask.query == wire.Query.SET:
            return [self.set(ask.handle, ask.name, ask.expression)], 1
        if ask.query == wire.Query.SOURCE:
            return [wire.Item(name=ask.expression, value=wire.clip(self.source(ask.expression)))], 1
        frame = self.frame(ask.frame)
        value = eval(ask.expression, frame.f_globals, self.locals_of(frame))
        return [self.item(ask.expression, value)], 1

    def set(self, handle: int, name: str, expression: str) -> wire.Item:
        """Change a variable, an item or an attribute, named as `children` names it."""
        if handle not in self.handles:
            raise LookupError("that value is gone: the rank ran since it was shown")
        parent = self.handles[handle]
        frame = parent.frame if isinstance(parent, Scope) else self.debugger.curframe
        value = eval(expression, frame.f_globals, self.locals_of(frame))
        if isinstance(parent, Scope):
            parent.names[name] = value
        elif isinstance(parent, dict):
            parent[ast.literal_eval(name)] = value
        elif isinstance(parent, list):
            parent[int(name)] = value
        elif isinstance(parent, (tuple, set, frozenset)):
            raise TypeError(f"a {type(parent).__name__} cannot be changed")
        else:
            setattr(parent, name, value)
        return self.item(name, value)

    def source(self, name: str) -> str:
        """A file's text where pdb's `l` finds it: linecache, with the globals of a frame that
        runs it (their loader knows a module's source), under the code's own file name when
        the stack shows another (`<dynamic-code>` under its script's)."""
        for frame, _ in self.frames():
            if source_file(frame) == name and (lines := linecache.getlines(frame.f_code.co_filename, frame.f_globals)):
                return "".join(lines)
        lines = linecache.getlines(name)
        if not lines:
            raise LookupError(f"this rank has no source of {name}")
        return "".join(lines)

    def frames(self) -> list[tuple[Any, int]]:
        """pdb's stack of the program's frames (ours left out), innermost first."""
        return list(reversed(self.debugger.stack))

    def frame(self, index: int):
        frames = self.frames()
        if not 0 <= index < len(frames):
            raise IndexError(f"no frame {index}: the stack has {len(frames)}")
        return frames[index][0]

    def locals_of(self, frame) -> Any:
        """pdb's own locals for its current frame (what `p` reads and `!x = 1` changes)."""
        if frame is self.debugger.curframe and hasattr(self.debugger, "curframe_locals"):
            return self.debugger.curframe_locals
        return frame.f_locals

    def keep(self, value: Any) -> int:
        handle = len(self.handles) + 1
        self.handles[handle] = value
        return handle

    def item(self, name: str, value: Any) -> wire.Item:
        return wire.Item(
            name=name,
            value=describe(value),
            type=type(value).__name__,
            handle=self.keep(value) if has_children(value) else 0,
        )
