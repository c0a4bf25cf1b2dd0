"""The pending answers of one mesh call, filled in by the threads that read worker replies."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any, Generic, TypeVar

from monarch_pdb.actor.errors import ActorError, RankError, name_ranks
from monarch_pdb.actor.point import Point

T = TypeVar("T")


class Future(Generic[T]):
    """`get()` blocks until every rank answered; `await future` does the same without blocking
    the event loop."""

    def __init__(self, call: str, points: Sequence[Point], combine: Callable[[list[tuple[Point, Any]]], T]) -> None:
        self._call = call
        self._points = {point.rank: point for point in points}
        self._combine = combine
        self._lock = threading.Lock()
        self._values: dict[int, Any] = {}
        self._errors: dict[int, RankError] = {}
        self._done = threading.Event()
        self._callbacks: list[Callable[[], None]] = []

    def deliver(self, rank: int, value: Any = None, error: RankError | None = None) -> None:
        with self._lock:
            if error is None:
                self._values[rank] = value
            else:
                self._errors[rank] = error
            if len(self._values) + len(self._errors) < len(self._points):
                return
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def when_done(self, callback: Callable[[], None]) -> None:
        """Run callback once every rank answered: now if they have, else in a reader thread."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def get(self, timeout: float | None = None) -> T:
        if not self._done.wait(timeout):
            with self._lock:
                missing = sorted(set(self._points) - set(self._values) - set(self._errors))
            raise TimeoutError(
                f"{self._call}: {len(missing)} of {len(self._points)} ranks did not answer "
                f"within {timeout}s: {name_ranks(missing)}"
            )
        if self._errors:
            raise ActorError(self._call, len(self._points), list(self._errors.values()))
        return self._combine([(self._points[rank], self._values[rank]) for rank in sorted(self._points)])

    def __await__(self) -> Generator[Any, None, T]:
        if not self._done.is_set():
            loop = asyncio.get_running_loop()
            woken = loop.create_future()
            self.when_done(lambda: _wake(loop, woken))
            yield from woken
        return self.get()


def _wake(loop: asyncio.AbstractEventLoop, woken: asyncio.Future) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed before every rank answered
        loop.call_soon_threadsafe(_resolve, woken)


def _resolve(woken: asyncio.Future) -> None:
    if not woken.done():
        woken.set_result(None)
