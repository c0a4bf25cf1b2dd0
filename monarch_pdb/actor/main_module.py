"""Rebuild the parent's `__main__` in a fresh worker, the way multiprocessing's spawn does.

The script runs again as `__mp_main__` (so its `if __name__ == "__main__":` block stays
quiet) and is aliased as `__main__`, so pickled references to `__main__.X` resolve. Running
it from its real path keeps real file names in code objects: pdb shows the script's source.
A program with no script to rerun sends its `__main__` classes and functions by value instead
(`by_value`).
"""

from __future__ import annotations

import os
import runpy
import sys
import types
from dataclasses import dataclass


@dataclass(frozen=True)
class MainSource:
    """How to rerun the main program: a script path, a module name, or nothing to rerun."""

    path: str | None = None
    module: str | None = None


_inherited: MainSource | None = None
_loading = False


def share() -> MainSource:
    """Describe `__main__` for new workers, and let replies naming `__mp_main__.X` (the
    workers' name for the main script) resolve in this process."""
    if _loading:
        raise RuntimeError(
            "a worker tried to start workers while rerunning the main script: put the "
            'program\'s top-level code under `if __name__ == "__main__":`'
        )
    sys.modules.setdefault("__mp_main__", sys.modules["__main__"])
    return _inherited if _inherited is not None else _described()


def by_value() -> bool:
    """Whether `__main__`'s classes and functions travel by value: there is no script to rerun."""
    return (_inherited if _inherited is not None else _described()) == MainSource()


def _described() -> MainSource:
    main = sys.modules["__main__"]
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name is not None:
        rerunnable = spec_name != "__main__" and not spec_name.endswith(".__main__")
        return MainSource(module=spec_name) if rerunnable else MainSource()
    path = getattr(main, "__file__", None)
    if path and os.path.isfile(path):
        return MainSource(path=os.path.abspath(path))
    return MainSource()


def load(source: MainSource) -> None:
    global _inherited, _loading
    _inherited = source
    if source.module is None and source.path is None:
        return
    _loading = True
    try:
        if source.module is not None:
            namespace = runpy.run_module(source.module, run_name="__mp_main__", alter_sys=True)
        else:
            assert source.path is not None
            namespace = runpy.run_path(source.path, run_name="__mp_main__")
    finally:
        _loading = False
    main = types.ModuleType("__mp_main__")
    main.__dict__.update(namespace)
    sys.modules["__main__"] = sys.modules["__mp_main__"] = main
