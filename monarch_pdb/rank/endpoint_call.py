"""The scope of one endpoint call, as announced by a mesh runtime.

A session opened by a breakpoint inside the scope lives until the scope exits, and an
exception leaving the scope after such a breakpoint stops the rank where it was raised.

A runtime enters one scope per call of every rank, so a scope costs a few attribute looks when
no rank process runs and a dictionary look-up for the rank's identity when one does; the debugger's
modules (pdb, the wire, ZeroMQ) load only once a process installs or stops.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from monarch_pdb import settings
from monarch_pdb.rank.identity import CallContext, current, current_call

if TYPE_CHECKING:
    from monarch_pdb.rank.rank_process import RankProcess


def rank_process_if_started() -> RankProcess | None:
    """The process's RankProcess if `install` or a stop started one; its module is loaded only then,
    so a process whose module is not loaded has none, nor one whose first stop, in another
    thread, is loading it now."""
    process_class = getattr(sys.modules.get("monarch_pdb.rank.rank_process"), "RankProcess", None)
    return process_class.existing() if process_class is not None else None


def is_quit(exc: BaseException) -> bool:
    """Whether `exc` is pdb's `quit`: only a process that loaded bdb can raise one."""
    quit_class = getattr(sys.modules.get("bdb"), "BdbQuit", None)
    return quit_class is not None and isinstance(exc, quit_class)


def wants_post_mortem(exc: BaseException, stopped_before: bool) -> bool:
    """MONARCH_PDB_POST_MORTEM's answer for `exc`, given whether a breakpoint stopped its scope
    (the endpoint call, or the process when there is no call) before it was raised; always yes
    while an editor asks for every uncaught exception."""
    if not isinstance(exc, Exception) or is_quit(exc):
        return False
    rank_process = rank_process_if_started()
    if rank_process is not None and rank_process.breakpoints.uncaught:
        return True
    policy = settings.load().post_mortem
    if policy == "always":
        return True
    return policy != "never" and stopped_before


def outcome_of(exc: BaseException | None) -> str:
    """How a call that raised `exc` (None: returned) ended, as its session says it; asked only
    of a call with a session, so the wire is loaded already."""
    from monarch_pdb import wire

    if exc is None:
        return wire.Ending.RETURNED
    return wire.Ending.QUIT if is_quit(exc) else f"raised {type(exc).__name__}"


def stop_after_raise(call: CallContext, exc: BaseException) -> None:
    """Post-mortem at the raise site, when the policy wants it for this call."""
    if wants_post_mortem(exc, call.session is not None):
        from monarch_pdb.rank import debugger

        debugger.post_mortem(exc)


def end_call(call: CallContext, exc: BaseException | None) -> None:
    """The call is over, having raised `exc` (None: returned): its session, if a breakpoint
    opened one, ends with it."""
    if call.session is not None:
        sys.settrace(None)
        call.session.end(outcome_of(exc))


class endpoint_call(CallContext):
    """`with endpoint_call(actor, rank, coords) as call:` around one call of a rank's code:
    a breakpoint inside opens the rank's session (`call.session`), which ends with the call.

    The call and its scope are one object, and a class named as the function it stands for,
    not a generator: a runtime enters one per call of every rank."""

    __slots__ = ("_token", "_running", "_rank_process")

    def __enter__(self) -> CallContext:
        self._token = current_call.set(self)
        self._rank_process = rank_process = rank_process_if_started()
        if rank_process is not None:
            ident = current()
            rank_process.presence.host(ident.job, self.actor, self.rank, self.coords)
            self._running = rank_process.threads.started(ident)
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc is not None:
                stop_after_raise(self, exc)
        finally:
            rank_process = self._rank_process
            if rank_process is not None:
                rank_process.threads.ended(self._running)
            if self.session is not None:
                end_call(self, exc)
            current_call.reset(self._token)
