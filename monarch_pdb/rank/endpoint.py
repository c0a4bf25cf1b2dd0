"""The scope of one endpoint call, as announced by a mesh runtime.

A session opened by a breakpoint inside the scope lives until the scope exits, and an
exception leaving the scope after such a breakpoint stops the rank where it was raised.
"""

from __future__ import annotations

import bdb
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from monarch_pdb import settings, wire
from monarch_pdb.rank.agent import Agent
from monarch_pdb.rank.identity import CallContext, current, current_call


def wants_post_mortem(exc: BaseException, stopped_before: bool) -> bool:
    """MONARCH_PDB_POST_MORTEM's answer for `exc`, given whether a breakpoint stopped its scope
    (the endpoint call, or the process when there is no call) before it was raised; always yes
    while an editor asks for every uncaught exception."""
    if not isinstance(exc, Exception) or isinstance(exc, bdb.BdbQuit):
        return False
    agent = Agent.existing()
    if agent is not None and agent.breakpoints.uncaught:
        return True
    policy = settings.load().post_mortem
    if policy == "always":
        return True
    return policy != "never" and stopped_before


def outcome_of(exc: BaseException) -> str:
    return wire.Ending.QUIT if isinstance(exc, bdb.BdbQuit) else f"raised {type(exc).__name__}"


def stop_after_raise(call: CallContext, exc: BaseException) -> None:
    """Post-mortem at the raise site, when the policy wants it for this call."""
    if wants_post_mortem(exc, call.session is not None):
        from monarch_pdb.rank import debugger

        debugger.post_mortem(exc)


def end_call(call: CallContext, outcome: str) -> None:
    """The call is over: its session, if a breakpoint opened one, ends with it."""
    if call.session is not None:
        sys.settrace(None)
        call.session.end(outcome)


@contextmanager
def endpoint_call(actor: str, rank: int, coords: dict[str, int]) -> Iterator[CallContext]:
    call = CallContext(actor=actor, rank=rank, coords=dict(coords))
    token = current_call.set(call)
    outcome: str = wire.Ending.RETURNED
    agent = Agent.existing()
    running = None
    if agent is not None:
        ident = current()
        agent.presence.host(ident.job, actor, rank, coords)
        running = agent.threads.started(ident)
    try:
        yield call
    except BaseException as exc:
        outcome = outcome_of(exc)
        stop_after_raise(call, exc)
        raise
    finally:
        if running is not None:
            assert agent is not None
            agent.threads.ended(running)
        end_call(call, outcome)
        current_call.reset(token)
