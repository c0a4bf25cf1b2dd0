"""The numbers as a person reads them (a table) and as a later run compares them (JSON).

Verdicts judge the median: a target says what a user waits for most of the time, and p99 on
a shared 2-core machine is mostly the scheduler. The p99 is still shown, so a tail is seen.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgpack
import zmq


@dataclass(frozen=True)
class Target:
    """A median under `ms` milliseconds, within `times_floor` times the floor's, or both."""

    ms: float | None = None
    times_floor: float | None = None

    def describe(self) -> str:
        parts = ([f"< {self.ms:g} ms"] if self.ms is not None else []) + (
            [f"<= {self.times_floor:g}x floor"] if self.times_floor is not None else []
        )
        return " and ".join(parts)

    def met(self, p50_ms: float, floor_p50_ms: float | None) -> bool:
        under = self.ms is None or p50_ms < self.ms
        near = self.times_floor is None or (floor_p50_ms is not None and p50_ms <= self.times_floor * floor_p50_ms)
        return under and near


CRITICAL = "critical path"
"""What a target of a tree on one machine applies to: the root's CPU time plus the slowest host
broker's, what a cluster whose hosts each have their own cores would wait for."""
WALL = "wall"


@dataclass
class Result:
    measure: str
    samples_ns: list[int]
    floor: Result | None = None
    target: Target | None = None
    critical_ns: list[int] | None = None
    """Each sample's critical path, where the processes measured share this machine's cores."""
    judged_on: str = WALL
    """Which of the two the target applies to (`WALL` or `CRITICAL`)."""
    failed: str = ""
    """Why the measure could not be taken (all of it, or its later samples): a MISS."""

    def percentile(self, p: float, samples: list[int] | None = None) -> float:
        """Nearest-rank percentile, in milliseconds."""
        ordered = sorted(self.samples_ns if samples is None else samples)
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] / 1e6

    def row(self) -> dict:
        taken = bool(self.samples_ns)
        p50 = self.percentile(50) if taken else None
        critical = self.percentile(50, self.critical_ns) if self.critical_ns else None
        floor = self.floor.percentile(50) if self.floor and self.floor.samples_ns else None
        judged = critical if self.judged_on == CRITICAL else p50
        if self.failed:
            verdict = f"MISS: {self.failed}"
        elif self.target is None:
            verdict = None
        else:
            verdict = "PASS" if judged is not None and self.target.met(judged, floor) else "MISS"
        return {
            "measure": self.measure,
            "n": len(self.samples_ns),
            "p50_ms": round(p50, 4) if taken else None,
            "p99_ms": round(self.percentile(99), 4) if taken else None,
            "floor": self.floor.measure if self.floor else None,
            "floor_p50_ms": round(floor, 4) if floor is not None else None,
            "ratio_to_floor": round(p50 / floor, 2) if floor and taken else None,
            "target": self.target.describe() if self.target else None,
            "verdict": verdict,
            **(
                {
                    "critical_p50_ms": round(critical, 4) if critical is not None else None,
                    "target_on": self.judged_on if self.target else None,
                }
                if self.critical_ns is not None
                else {}
            ),
        }


COLUMNS = (
    ("measure", "measure", "<"),
    ("n", "n", ">"),
    ("p50_ms", "p50 ms", ">"),
    ("p99_ms", "p99 ms", ">"),
    ("floor_p50_ms", "floor p50 ms", ">"),
    ("ratio_to_floor", "ratio to floor", ">"),
    ("target", "target", "<"),
    ("verdict", "verdict", "<"),
)
TREE_COLUMNS = (
    *COLUMNS[:4],
    ("critical_p50_ms", "critical path p50 ms", ">"),
    *COLUMNS[4:7],
    ("target_on", "target on", "<"),
    COLUMNS[7],
)
"""The columns of a tree whose brokers share this machine: both times, and which one is judged."""


def _cell(key: str, value: object) -> str:
    if value is None:
        return "-"
    if key == "ratio_to_floor":
        return f"{value:.2f}x"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def table(rows: list[dict], columns: tuple[tuple[str, str, str], ...] = COLUMNS) -> str:
    cells = [[_cell(key, row.get(key)) for key, _, _ in columns] for row in rows]
    headers = [title for _, title, _ in columns]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        return "  ".join(f"{v:{align}{w}}" for v, w, (_, _, align) in zip(values, widths, columns)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, cells)])


def machine() -> dict:
    """Enough about where the numbers came from to know whether two runs compare."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "pyzmq": zmq.pyzmq_version(),
        "libzmq": zmq.zmq_version(),
        "msgpack": ".".join(map(str, msgpack.version)),
        "cpu_count": os.cpu_count(),
        "cpu": _cpu_model(),
        "platform": platform.platform(),
        "commit": _commit(),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def write_json(path: Path, rows: list[dict], details: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), **details, "results": rows}, indent=2) + "\n")


def say(text: str) -> None:
    """Progress, on stderr so the table on stdout stays clean."""
    print(text, file=sys.stderr, flush=True)


def run(main: Callable[[], int]) -> None:
    """Run a benchmark to its exit status. `make` and CI stop a run with SIGTERM, which unwinds
    like Ctrl-C, so every process the benchmark started is ended either way."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        say("interrupted (every process the benchmark started has been ended)")
        sys.exit(130)
