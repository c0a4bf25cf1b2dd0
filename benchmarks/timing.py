"""One way of timing repetitions, shared by the floors and the product so they compare."""

from __future__ import annotations

import time
from collections.abc import Callable


def timed(once: Callable[[], None], warmup: int, repeat: int) -> list[int]:
    """Nanoseconds of each of `repeat` calls of `once`, after `warmup` untimed ones (which
    fill caches, connect sockets and let the broker learn every peer)."""
    for _ in range(warmup):
        once()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        once()
        samples.append(time.perf_counter_ns() - start)
    return samples
