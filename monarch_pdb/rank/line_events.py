"""Line events of chosen code objects only, in every thread, through `sys.monitoring` (PEP 669,
Python 3.12+): what an interrupt watches for a thread's next line, and an editor's breakpoint
in a running rank for its line. The rest of the program runs at full speed. Each watcher holds
a tool id of its own while it watches some code, and gives it back when it watches none.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable

TOOL_IDS = (3, 4, 2, 1, 0)
"""The tool ids tried, in order: those Python names for no tool first, then the profiler's,
coverage's and the debugger's."""

Callback = Callable[[types.CodeType, int], object]
"""Called in the thread that reaches a line of watched code, with the code and the line; it
may answer `sys.monitoring.DISABLE` for that line."""


class LineEvents:
    def __init__(self, callback: Callback) -> None:
        self._callback = callback
        self._tool: int | None = None
        self._codes: frozenset = frozenset()

    def watch(self, codes: frozenset) -> bool:
        """Line events of `codes`, and of no other code, from now on; False, and nothing
        watched, when every tool id is taken."""
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        if codes and self._tool is None:
            free = [tool for tool in TOOL_IDS if monitoring.get_tool(tool) is None]
            if not free:
                return False
            self._tool = free[0]
            monitoring.use_tool_id(self._tool, "monarch-pdb")
            monitoring.register_callback(self._tool, monitoring.events.LINE, self._callback)
        if self._tool is None:
            return True
        for code in self._codes - codes:
            monitoring.set_local_events(self._tool, code, 0)
        for code in codes - self._codes:
            monitoring.set_local_events(self._tool, code, monitoring.events.LINE)
        self._codes = codes
        if not codes:
            monitoring.register_callback(self._tool, monitoring.events.LINE, None)
            monitoring.free_tool_id(self._tool)
            self._tool = None
        return True
