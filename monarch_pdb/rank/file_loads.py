"""Code of chosen files as they are imported, handed over before it runs: where an editor's
breakpoint in a file a running rank has not imported yet waits.

A finder first in `sys.meta_path` while some file is waited for, and gone as soon as none is: it
asks the finders behind it for each module, and only the spec of a waited-for file gets a loader
that hands its module's code to the callback, then runs it as the file's own loader would, and
gives the module its own loader back. Nothing else an import does changes, and once the finder
is gone nothing of it is left: an audit hook, the other way to see code about to run, cannot be
removed, and made `sys._getframe`, `open()` and logging slower for the rest of the process.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable

Loading = Callable[[types.CodeType], None]
"""Called with a waited-for module's code before it runs, in the thread that imports it; it
must not raise (the import would fail)."""


class FileLoads:
    """A `sys.meta_path` finder, there only while some file is waited for."""

    def __init__(self, loading: Loading) -> None:
        self._loading = loading
        self._files: frozenset[str] = frozenset()

    def wait_for(self, files: frozenset[str]) -> None:
        """Hand over the code of these files (real paths) as they load, and of no other; with
        none, the finder leaves `sys.meta_path`."""
        self._files = files
        present = self in sys.meta_path
        if files and not present:
            sys.meta_path.insert(0, self)
        elif not files and present:
            sys.meta_path.remove(self)

    def find_spec(self, name: str, path, target=None):
        """The spec the finders behind this one give; a waited-for file's with our loader."""
        if not self._files:
            return None
        spec = spec_behind(self, name, path, target)
        if spec is None:
            return None
        loader = spec.loader
        if spec.origin and hasattr(loader, "get_code") and os.path.realpath(spec.origin) in self._files:
            spec.loader = _HandingOver(loader, self._loading)
        return spec


def spec_behind(finder: object, name: str, path, target=None):
    """The spec the finders of `sys.meta_path` other than `finder` give for a module, as the
    import system would have found it without `finder`."""
    for other in list(sys.meta_path):
        find = getattr(other, "find_spec", None) if other is not finder else None
        spec = find(name, path, target) if find is not None else None
        if spec is not None:
            return spec
    return None


class OneImport:
    """A module's own loader, wrapped for one import: the module keeps its own loader, not this
    one (`own_loader_back`), so that nothing of the wrapper is left once the import is done."""

    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def own_loader_back(self, module: types.ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader


class _HandingOver(OneImport):
    """A waited-for module's loader, for one import: the module's code goes to `loading` first."""

    def __init__(self, loader, loading: Loading) -> None:
        super().__init__(loader)
        self._loading = loading

    def exec_module(self, module: types.ModuleType) -> None:
        """What a source or bytecode loader's `exec_module` does, with the hand-over between
        getting the code and running it."""
        self.own_loader_back(module)
        code = self._loader.get_code(module.__name__)
        if code is None:
            raise ImportError(f"cannot load the code of {module.__name__!r}", name=module.__name__)
        self._loading(code)
        exec(code, module.__dict__)
