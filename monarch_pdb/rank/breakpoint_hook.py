"""What `breakpoint()` calls: `monarch_pdb.set_trace`, through PYTHONBREAKPOINT alone or through
the `sys.breakpointhook` that `install` sets; and pdb's other entry points, `post_mortem` and `pm`.

The package's top level hands these out as its own, so this module imports nothing but `sys`:
`import monarch_pdb` costs what a bare interpreter does, and the debugger, pdb and ZeroMQ load at
the first stop.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any

    from monarch_pdb.rank.identity import Identity
    from monarch_pdb.rank.rank_process import RankProcess

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


def post_mortem(t: BaseException | TracebackType | None = None) -> None:
    """pdb.post_mortem's counterpart: a post-mortem session in the broker at the frame that raised
    `t` (an exception, or its traceback), by default the exception being handled, as an uncaught
    one opens; it returns when the user lets the rank go on."""
    from monarch_pdb.rank import debugger

    raised = _raised(t)
    _known_from_first_stop()
    debugger.post_mortem(raised)


def pm() -> None:
    """pdb.pm's counterpart: post-mortem of the last uncaught exception (`sys.last_exc`, before
    Python 3.12 `sys.last_value`), which Python keeps where it reports one and goes on (the
    interactive interpreter)."""
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if last is None:
        raise ValueError(
            "no uncaught exception to debug: pm() debugs the last one Python kept (sys.last_exc), and there is none"
        )
    post_mortem(last)


def _raised(t: BaseException | TracebackType | None) -> BaseException | TracebackType:
    """What a post-mortem of `t` shows: the exception itself where it can be found (its chain and
    its message), from the one being handled or the last uncaught one for a traceback of theirs;
    a traceback on its own otherwise. pdb's own error when there is neither."""
    handled = sys.exc_info()[1]
    if t is None:
        t = handled
    if t is None or (isinstance(t, BaseException) and t.__traceback__ is None):
        raise ValueError("A valid traceback must be passed if no exception is being handled")
    if isinstance(t, BaseException):
        return t
    seen: set[int] = set()
    for exc in (handled, getattr(sys, "last_exc", None), getattr(sys, "last_value", None)):
        while exc is not None and id(exc) not in seen:
            if exc.__traceback__ is t:
                return exc
            seen.add(id(exc))
            exc = exc.__cause__ or exc.__context__
    return t


def _known_from_first_stop() -> None:
    """A process that stops without having run `install` (PYTHONBREAKPOINT alone) is known to
    the broker from its first stop on, as an installed one is: a rank continued out of the
    debugger is still listed, drawn, and reached by `stacks`, `peek` and `interrupt`, and is
    `finished` when its process ends."""
    if getattr(sys.excepthook, INSTALLED, False):
        return
    from monarch_pdb.rank import main_thread_signal

    rank_process = this_rank_process()
    if not rank_process.presence.own():
        main_thread_signal.arm(stop_signalled)
        rank_process.presence.host_self()


def stop_signalled(frame) -> None:
    """The interrupt signal's work, on the main thread: stop at `frame` if this process's
    rank process was asked to."""
    from monarch_pdb.rank.rank_process import RankProcess

    rank_process = RankProcess.existing()
    interrupts = rank_process.made("interrupts") if rank_process is not None else None
    if interrupts is not None:
        interrupts.signalled(frame)


def this_rank_process() -> RankProcess:
    """This process's RankProcess, started on first use; its interrupts and an editor's breakpoints
    stop a thread in the debugger, which loads then."""
    from monarch_pdb.rank.rank_process import RankProcess

    return RankProcess.get(_interrupt, _break_at)


def _interrupt(frame: Any, identity: Identity) -> None:
    from monarch_pdb.rank import debugger

    debugger.interrupt(frame, identity)


def _break_at(frame: Any) -> None:
    from monarch_pdb.rank import debugger

    debugger.break_at(frame)
