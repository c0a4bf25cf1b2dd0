"""The signal that stops a rank's main thread where it is (see monarch_pdb.rank.interrupt).

`install` arms it, so it holds only what arming needs: a rank never interrupted loads nothing of
the interrupts themselves.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

SIGNAL = signal.SIGRTMAX - 3
"""A real-time signal, which programs and launchers rarely use (unlike SIGUSR1/SIGUSR2), so
its handler need not be shared."""


class _Handler:
    """The handler `arm` installs, known as ours by its type."""

    def __init__(self, on_signal: Callable[[Any], None]) -> None:
        self.on_signal = on_signal

    def __call__(self, signum: int, frame) -> None:
        if frame is not None:
            self.on_signal(frame)


def arm(on_signal: Callable[[Any], None]) -> bool:
    """Install, from the main thread, a handler that calls `on_signal` with the frame the
    signal interrupted, unless the program handles the signal itself."""
    if threading.current_thread() is not threading.main_thread():
        return False
    installed = signal.getsignal(SIGNAL)
    if installed is not signal.SIG_DFL and not isinstance(installed, _Handler):
        return False
    signal.signal(SIGNAL, _Handler(on_signal))
    return True


def armed() -> bool:
    """Whether our handler is installed (the default action of the signal would end the process)."""
    return isinstance(signal.getsignal(SIGNAL), _Handler)


def send() -> None:
    signal.pthread_kill(threading.main_thread().ident, SIGNAL)  # type: ignore[arg-type]
