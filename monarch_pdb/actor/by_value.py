"""The classes and functions of a program with no script file to rerun (a notebook cell,
`python -`, `python -c`, an interactive session) travel to the workers by value, with
cloudpickle, and each code object brings its source along: a worker's pdb shows the cell's own
lines, under the name IPython gives the cell in its tracebacks (`<Cell In[3]>`)."""

from __future__ import annotations

import io
import linecache
import os
import pickle
import stat
import sys
import types

import cloudpickle


def dumps(value: object) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


class _Pickler(cloudpickle.Pickler):
    """cloudpickle's pickler, whose code objects keep a readable file name and carry their
    file's lines (pickled once per payload, however many functions share the file)."""

    def __init__(self, file: io.BytesIO, protocol: int) -> None:
        super().__init__(file, protocol=protocol)
        self._sources: dict[str, tuple[str, list[str]]] = {}
        self._as_is: dict[int, types.CodeType] = {}

    def reducer_override(self, obj: object):
        if type(obj) is types.CodeType and id(obj) not in self._as_is:
            if obj.co_filename not in self._sources:
                self._sources[obj.co_filename] = (readable_name(obj.co_filename), source_lines(obj.co_filename))
            name, lines = self._sources[obj.co_filename]
            if lines:
                shipped = obj.replace(co_filename=name)
                self._as_is[id(shipped)] = shipped
                return with_source, (name, lines, shipped)
        return super().reducer_override(obj)


def with_source(name: str, lines: list[str], code: types.CodeType) -> types.CodeType:
    """In the worker: the code under its own name again (cloudpickle names all it rebuilds
    `<dynamic-code>`), and its file's lines where pdb and tracebacks look for them."""
    linecache.cache[name] = (sum(map(len, lines)), None, lines, name)
    return code.replace(co_filename=name)


def readable_name(filename: str) -> str:
    """IPython's name for a cell's code (its file name is a hash), else the file name."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    label = shell.compile.format_code_name(filename) if shell is not None else None
    return f"<{' '.join(label)}>" if label else filename


def source_lines(filename: str) -> list[str]:
    """The lines of a code's file: from linecache (IPython's cells, the REPL's inputs, real
    files), or the program's own text for `python -c` and `python - < FILE`."""
    lines = linecache.getlines(filename)
    if lines:
        return lines
    text = _program_text(filename)
    return text.splitlines(True) if text else []


def _program_text(filename: str) -> str:
    if filename == "<string>" and sys.argv[:1] == ["-c"] and "-c" in sys.orig_argv[:-1]:
        return sys.orig_argv[sys.orig_argv.index("-c") + 1]
    if filename == "<stdin>":
        try:
            if stat.S_ISREG(os.fstat(0).st_mode):
                return os.pread(0, os.fstat(0).st_size, 0).decode("utf-8", "replace")
        except OSError:
            return ""
    return ""
