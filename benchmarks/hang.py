"""A job that hangs, at 64 processes: what its first look costs, beside floors measured in the
same run, alternating.

- `monarch-pdb stacks --children-of` of 64 processes that never loaded the debugger, read from
  outside and merged; its floor is py-spy's own dump of the same 64, as many at once.
- `collectives` over a torchrun-style job of 64 gloo ranks (torch's Flight Recorder on) where
  the last rank never entered the third all_reduce; its floor is a `peek` of `0` over the same
  ranks, the round trip every rank's answer takes without the snapshot.

    make bench-hang [QUICK=1]     (runs this file with .venv-engines/bin/python: torch)

Prints a table and writes benchmarks/results/hang.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import report
from report import Result, Target, say
from timing import timed

from monarch_pdb import outside, settings, wire
from monarch_pdb.client.commands import collectives_report
from monarch_pdb.client.connection import BrokerConnection
from monarch_pdb.client.outside import host_stacks
from monarch_pdb.processes import children_of

RESULTS = Path(__file__).resolve().parent / "results" / "hang.json"
PROCESSES = 64
ROUNDS = {"full": 5, "quick": 2}
REPEAT = {"full": 3, "quick": 1}
START_TIMEOUT = 600.0
ANSWER_TIMEOUT = 60.0

WAITER = textwrap.dedent("""
    import os, sys, threading

    def wait_for_peers(rank):
        threading.Event().wait()

    def main():
        os.write(1, b"WAITING\\n")
        wait_for_peers(int(os.environ["RANK"]))

    main()
""")
TRAINER = textwrap.dedent("""
    import os, sys, time
    import torch
    import torch.distributed as dist
    import monarch_pdb

    monarch_pdb.install()

    def next_batch(rank, step, last):
        if rank == last and step == 2:
            os.write(1, b"HUNG\\n")
            while True:
                time.sleep(0.1)
        return torch.ones(8)

    def main():
        dist.init_process_group("gloo")
        rank, last = dist.get_rank(), dist.get_world_size() - 1
        for step in range(5):
            dist.all_reduce(next_batch(rank, step, last))

    main()
""")
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys

    count, script = int(sys.argv[1]), sys.argv[2]
    workers = [subprocess.Popen([sys.executable, script], env=dict(
        os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(count), LOCAL_WORLD_SIZE=str(count),
        GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3], TORCHELASTIC_RUN_ID="bench"))
        for r in range(count)]
    for worker in workers:
        worker.wait()
""")


class Job:
    """`count` processes of `script` below one launcher, in a process group of their own."""

    def __init__(self, workdir: Path, script: str, text: str, count: int, env: dict[str, str]) -> None:
        (workdir / script).write_text(text)
        (workdir / "launch.py").write_text(LAUNCHER)
        self.log = workdir / f"{script}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "launch.py", str(count), script, str(free_port())],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=open(self.log, "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_for(self, word: bytes, count: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while self.log.read_bytes().count(word) < count:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the job did not print {word!r} {count} times (see {self.log})")
            time.sleep(0.2)  # the job's start, paced: nothing is timed until it is up

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stacks_outside(pids: list[int]) -> None:
    args = argparse.Namespace(thread="main", native=False, locals=False)
    result = host_stacks.read_all(pids, args)
    if result.missing or sum(len(g.ranks) for g in result.groups) != len(pids):
        raise RuntimeError(f"stacks read {len(result.groups)} groups, missing {result.missing[:3]}")


def py_spy_dumps(pids: list[int]) -> None:
    """The floor: py-spy's own dump of each process, as many at once as ours reads."""

    def one(pid: int) -> None:
        subprocess.run([outside.py_spy(), "dump", "--pid", str(pid), "--json"], capture_output=True, check=True)

    with ThreadPoolExecutor(outside.READS_AT_ONCE) as pool:
        list(pool.map(one, pids))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, for a smoke run")
    mode = "quick" if parser.parse_args().quick else "full"
    samples: dict[str, list[int]] = {}
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="monarch-pdb-hang-")))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MONARCH_PDB_", "MONARCH_DEBUG_"))}
        env.update(
            MONARCH_PDB_RUNTIME_DIR=str(workdir / "run"),
            MONARCH_DEBUG_SERVER_HOST="127.0.0.1",
            MONARCH_DEBUG_SERVER_PORT="0",
            TORCH_FR_BUFFER_SIZE="2000",
        )
        say(f"starting {PROCESSES} plain processes, and a job of {PROCESSES} gloo ranks (minutes on 2 cores)...")
        waiters = Job(workdir, "waiter.py", WAITER, PROCESSES, env)
        stack.callback(waiters.stop)
        trainers = Job(workdir, "train.py", TRAINER, PROCESSES, env)
        stack.callback(trainers.stop)
        waiters.wait_for(b"WAITING", PROCESSES)
        pids = children_of(waiters.proc.pid)
        trainers.wait_for(b"HUNG", 1)
        conn = BrokerConnection.open(settings.load(env).with_overrides(connect_timeout=START_TIMEOUT))
        stack.callback(conn.close)

        def snapshot() -> None:
            report_ = collectives_report.fold(
                conn.peek("train", "ranks(:)", "", ANSWER_TIMEOUT, reading=wire.Reading.COLLECTIVES)
            )
            group = report_.groups.get("0")
            if group is None or len(group.ranks) != PROCESSES or group.disagreement() is None:
                raise RuntimeError("collectives did not name the rank behind")

        def peek_zero() -> None:
            answered = conn.peek("train", "ranks(:)", "0", ANSWER_TIMEOUT)
            if sum(len(g.ranks) for g in answered.groups) != PROCESSES:
                raise RuntimeError(f"peek answered {answered.groups[:2]}, missing {answered.missing[:2]}")

        measures = {
            "stacks": lambda: stacks_outside(pids),
            "py-spy": lambda: py_spy_dumps(pids),
            "collectives": snapshot,
            "peek": peek_zero,
        }
        for number in range(ROUNDS[mode]):
            say(f"round {number + 1} of {ROUNDS[mode]}")
            for name, once in measures.items():
                samples.setdefault(name, []).extend(timed(once, 1 if number == 0 else 0, REPEAT[mode]))
    spy = Result(f"floor: py-spy dump of {PROCESSES} processes, {outside.READS_AT_ONCE} at once", samples["py-spy"])
    peek = Result(f"floor: peek `0` over {PROCESSES} ranks", samples["peek"])
    results = [
        spy,
        Result(
            f"monarch-pdb stacks --children-of, {PROCESSES} processes never joined",
            samples["stacks"],
            spy,
            Target(times_floor=1.2),
        ),
        peek,
        Result(f"collectives, {PROCESSES} gloo ranks, one behind", samples["collectives"], peek, Target(times_floor=3)),
    ]
    rows = [result.row() for result in results]
    print(report.table(rows))
    report.write_json(RESULTS, rows, {"mode": mode, "processes": PROCESSES})
    return 0


if __name__ == "__main__":
    report.run(main)
