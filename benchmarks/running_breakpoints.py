"""What an editor's breakpoint in a running rank costs the rank (Python 3.12+): a Python-heavy
loop timed in three processes side by side, one without monarch-pdb (the floor), one with it
installed, and one with it installed and a breakpoint set through the broker, as the editor's
adapter sets it, in another function. The breakpoint is a line event on that function's code
only, so the loop should run as fast as the floor.

The three processes start once and are timed in alternating batches, so that all three see
the same drift of a shared machine's load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from report import Result, Target

from monarch_pdb import settings as settings_module
from monarch_pdb import wire
from monarch_pdb.client.connection import BrokerConnection

ITERATIONS = 20_000
"""Loop iterations in one timed sample (about a millisecond)."""
SAMPLES = {"full": 3000, "quick": 300}
ROUNDS = {"full": 10, "quick": 3}
START_TIMEOUT = 60.0
OTHER_LINE = 6
LOOP = textwrap.dedent(f"""
    import sys
    import time

    def other(x):
        return x + 1

    def loop(n):
        total = 0
        for i in range(n):
            total += (i * i) % 7
        return total

    if sys.argv[1] != "bare":
        import monarch_pdb

        monarch_pdb.install()
    print("READY", flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(int(line)):
            start = time.perf_counter_ns()
            loop({ITERATIONS})
            times.append(time.perf_counter_ns() - start)
        print(" ".join(map(str, times)), flush=True)
""")
VARIANTS = {"bare": "", "installed": "0", "breakpoint": "1"}
"""Each process, and the rank it is (none: without monarch-pdb)."""


class Loops:
    """The three loop processes, and a shell connection to the broker of the two installed."""

    def __init__(self, workdir: Path) -> None:
        self.script = workdir / "loop.py"
        self.script.write_text(LOOP)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("MONARCH_PDB_", "MONARCH_DEBUG_"))}
        self.env.update(
            {
                "MONARCH_PDB_RUNTIME_DIR": str(workdir / "run"),
                "MONARCH_DEBUG_SERVER_HOST": "127.0.0.1",
                "MONARCH_DEBUG_SERVER_PORT": "0",
                "MONARCH_PDB_JOB": "loops",
                "MONARCH_PDB_ACTOR": "loop",
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.procs: dict[str, subprocess.Popen] = {}
        self.conn: BrokerConnection | None = None

    def __enter__(self) -> Loops:
        try:
            for name, rank in VARIANTS.items():
                self.procs[name] = subprocess.Popen(
                    [sys.executable, str(self.script), name],
                    env=dict(self.env, RANK=rank),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    start_new_session=True,
                )
            for proc in self.procs.values():
                assert proc.stdout.readline() == "READY\n", "a loop process did not start"
            settings = settings_module.load(self.env).with_overrides(connect_timeout=START_TIMEOUT)
            self.conn = BrokerConnection.open(settings)
            self.set_breakpoint()
        except BaseException:
            self.__exit__()
            raise
        return self

    def set_breakpoint(self) -> None:
        """The editor's breakpoint in `other`, in the rank of the `breakpoint` process, once the
        broker knows that rank."""
        deadline = time.monotonic() + START_TIMEOUT
        ask = wire.Breakpoints(
            ref=1,
            actor="loop",
            selector=f"ranks({VARIANTS['breakpoint']})",
            path=str(self.script),
            spots=[wire.Spot(line=OTHER_LINE)],
        )
        while True:
            reply = self.conn.request(ask, wire.BreakpointsResult)
            if isinstance(reply, wire.BreakpointsResult):
                reasons = [reason for group in reply.groups for reason in group.reasons or [group.missing]]
                assert reasons == [""], f"the breakpoint was not set: {reasons}"
                return
            assert time.monotonic() < deadline, f"the broker never knew the loop's rank: {reply}"
            self.conn.changed.wait(0.1)

    def __exit__(self, *_: object) -> None:
        if self.conn is not None:
            self.conn.close()
        for proc in self.procs.values():
            proc.stdin.close()
            proc.stdout.close()
            proc.wait(timeout=30)

    def samples(self, name: str, count: int) -> list[int]:
        proc = self.procs[name]
        proc.stdin.write(f"{count}\n")
        proc.stdin.flush()
        return [int(ns) for ns in proc.stdout.readline().split()]


def measure(workdir: Path, mode: str, say) -> list[Result]:
    """The loop's rows, beside their floor; none before Python 3.12, which has no line events
    for chosen code (a breakpoint there waits for the rank's next stop)."""
    if sys.version_info < (3, 12):
        say("breakpoints in running ranks: not measured, Python 3.12+ only")
        return []
    say(f"breakpoints in running ranks: a loop of {ITERATIONS:,} iterations, three processes")
    samples: dict[str, list[int]] = {name: [] for name in VARIANTS}
    with Loops(workdir) as loops:
        for _ in range(ROUNDS[mode]):
            for name in VARIANTS:
                samples[name] += loops.samples(name, SAMPLES[mode] // ROUNDS[mode])
    floor = Result(f"Python loop of {ITERATIONS:,}, without monarch-pdb (floor D)", samples["bare"])
    free = Target(times_floor=1.1)
    return [
        floor,
        Result("same loop, monarch-pdb installed", samples["installed"], floor=floor, target=free),
        Result("same loop, a breakpoint set in another function", samples["breakpoint"], floor=floor, target=free),
    ]
