"""What `breakpoint()` calls: `monarch_pdb.set_trace`, through PYTHONBREAKPOINT alone or through
the `sys.breakpointhook` that `install` sets.

The package's top level hands this module's `set_trace` out as its own, so this module imports
nothing but `sys`: `import monarch_pdb` costs what a bare interpreter does, and the debugger,
pdb and ZeroMQ load at the first stop.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from monarch_pdb.rank.agent import Agent
    from monarch_pdb.rank.identity import Identity

INSTALLED = "_monarch_pdb_installed"
"""The mark on each hook of ours (an exception hook, an engine's function we wrapped)."""


def set_trace(*, header: str | None = None, commands: list[str] | None = None) -> None:
    """Pause the calling frame in a session of the broker, stopping at its next line; pdb's
    `commands` run first, as pdb.set_trace's do from Python 3.14 on."""
    from monarch_pdb.rank import debugger

    _known_from_first_stop()
    debugger.set_trace(sys._getframe(1), header=header, commands=commands)


async def set_trace_async(*, header: str | None = None, commands: list[str] | None = None) -> None:
    """`await pdb.set_trace_async()` in an installed process (Python 3.14 on): pause the calling
    coroutine in a session of the broker, whose prompt runs `await` statements too."""
    from monarch_pdb.rank import debugger

    await debugger.set_trace_async(sys._getframe(1), header=header, commands=commands)


def _known_from_first_stop() -> None:
    """A process that stops without having run `install` (PYTHONBREAKPOINT alone) is known to
    the broker from its first stop on, as an installed one is: a rank continued out of the
    debugger is still listed, drawn, and reached by `stacks`, `peek` and `interrupt`, and is
    `finished` when its process ends."""
    if getattr(sys.excepthook, INSTALLED, False):
        return
    from monarch_pdb.rank import main_thread_signal

    agent = process_agent()
    if not agent.presence.own():
        main_thread_signal.arm(stop_signalled)
        agent.presence.host_self()


def stop_signalled(frame) -> None:
    """The interrupt signal's work, on the main thread: stop at `frame` if this process's
    agent was asked to."""
    from monarch_pdb.rank.agent import Agent

    agent = Agent.existing()
    interrupts = agent.made("interrupts") if agent is not None else None
    if interrupts is not None:
        interrupts.signalled(frame)


def process_agent() -> Agent:
    """This process's agent, started on first use; its interrupts and an editor's breakpoints
    stop a thread in the debugger, which loads then."""
    from monarch_pdb.rank.agent import Agent

    return Agent.get(_interrupt, _break_at)


def _interrupt(frame: Any, identity: Identity) -> None:
    from monarch_pdb.rank import debugger

    debugger.interrupt(frame, identity)


def _break_at(frame: Any) -> None:
    from monarch_pdb.rank import debugger

    debugger.break_at(frame)
