"""Stopping a running rank where it is, without a breakpoint() in its code.

The agent's thread sends a dedicated signal to the process's main thread. The signal cuts
short a sleep, a lock wait or a socket read (Python runs the handler, then resumes the call),
and the handler opens a session on the frame it interrupted, at once. A thread other than the
main one cannot be interrupted this way, nor a main thread blocked in C code that holds the
GIL: the shell names those ranks and shows their stacks instead.
"""

from __future__ import annotations

import signal
import threading

from monarch_pdb.sources import debugger_code

SIGNAL = signal.SIGRTMAX - 3
"""A real-time signal, which programs and launchers rarely use (unlike SIGUSR1/SIGUSR2), so
its handler need not be shared."""


def arm() -> bool:
    """Install the handler, from the main thread, unless the program handles the signal itself."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(SIGNAL) not in (signal.SIG_DFL, _stop_here):
        return False
    signal.signal(SIGNAL, _stop_here)
    return True


def can_interrupt(thread: int) -> bool:
    """Only the main thread can be signalled, and only while our handler is installed (the
    default action of the signal would end the process)."""
    return thread == threading.main_thread().ident and signal.getsignal(SIGNAL) is _stop_here


def signal_main_thread() -> None:
    signal.pthread_kill(threading.main_thread().ident, SIGNAL)  # type: ignore[arg-type]


def inside_agent(frame) -> bool:
    """The interrupted code is the debugger's own (which may hold the agent's locks, or be
    paused already): the session must wait until the program's code runs again."""
    while frame is not None:
        if debugger_code(frame.f_code.co_filename):
            return True
        frame = frame.f_back
    return False


def _stop_here(signum: int, frame) -> None:
    from monarch_pdb import debugger
    from monarch_pdb.agent import Agent

    agent = Agent._instance
    if agent is None or frame is None or inside_agent(frame):
        return
    wanted = agent.next_interrupt()
    if wanted is not None:
        debugger.interrupt(frame, wanted)
