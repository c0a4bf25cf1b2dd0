"""Side by side with Monarch's own debugger: the guide's program on real Monarch (torchmonarch)
with 4 and with 16 ranks, debugged once by Monarch and once by monarch-pdb.

    make bench-monarch [QUICK=1]     (runs this file with .venv-engines/bin/python)

Monarch's shell is netcat on its debug server's port, so Monarch is timed through a plain TCP
socket, which is all `monarch debug` adds; monarch-pdb through the shell's connection library,
as in debugger.py. The four programs run at once, paused, and the measures alternate in
rounds so that both debuggers see the same background load. Prints a table and writes
benchmarks/results/monarch.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import debugger
import report
from report import Result, say
from timing import timed

RESULTS = Path(__file__).resolve().parent / "results" / "monarch.json"
EMBEDDED_IMPORT = "from monarch_pdb.actor import Actor, current_rank, endpoint, this_host\n"
MONARCH_IMPORT = "from monarch.actor import Actor, current_rank, endpoint, this_host\n"
OUR_HOOK = "import monarch_pdb\nmonarch_pdb.install()\n"
GUIDE_MESH = 'per_host={"host": 4, "gpu": 4}'
MESHES = {4: 'per_host={"host": 2, "gpu": 2}', 16: GUIDE_MESH}
ATTACHED_RANK = 1
START_TIMEOUT = 180.0
ANSWER_TIMEOUT = 60.0
ROUNDS = {"full": 10, "quick": 3}
REPEAT = {"full": {"attached": 600, "cast": 200, "list": 400}, "quick": {"attached": 60, "cast": 30, "list": 60}}
WARMUP = {"attached": 10, "cast": 3, "list": 5}
COLUMNS = (
    ("measure", "measure", "<"),
    ("n", "n", ">"),
    ("monarch_p50_ms", "Monarch p50 ms", ">"),
    ("monarch_p99_ms", "Monarch p99 ms", ">"),
    ("ours_p50_ms", "monarch-pdb p50 ms", ">"),
    ("ours_p99_ms", "monarch-pdb p99 ms", ">"),
    ("speedup", "Monarch / monarch-pdb", ">"),
)


def guide_program(workdir: Path, ranks: int, ours: bool) -> Path:
    """The guide's program as a Monarch user has it, on a mesh of `ranks`; with our one line."""
    source = debugger.EXAMPLE.read_text()
    if EMBEDDED_IMPORT not in source or GUIDE_MESH not in source:
        raise RuntimeError(f"{debugger.EXAMPLE} no longer has the guide's import and mesh")
    hook = OUR_HOOK if ours else ""
    path = workdir / f"{'ours' if ours else 'monarch'}-{ranks}" / "debugging.py"
    path.parent.mkdir(parents=True)
    path.write_text(source.replace(EMBEDDED_IMPORT, MONARCH_IMPORT + hook).replace(GUIDE_MESH, MESHES[ranks]))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MonarchDebugger:
    """The program under Monarch's own debugger, and a TCP connection to its debug server."""

    def __init__(self, script: Path, ranks: int) -> None:
        self.ranks = ranks
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MONARCH_PDB_", "MONARCH_DEBUG_"))}
        env.update({"MONARCH_DEBUG_SERVER_HOST": "127.0.0.1", "MONARCH_DEBUG_SERVER_PORT": str(free_port())})
        self.log = open(script.parent / "program.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(script)],
            env=env,
            cwd=script.parent,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.sock: socket.socket | None = None
        try:
            self._connect(int(env["MONARCH_DEBUG_SERVER_PORT"]))
        except BaseException:
            self.stop()
            raise

    def _connect(self, port: int) -> None:
        """Monarch opens its debug server at the first breakpoint; wait for it, then for every rank."""
        deadline = time.monotonic() + START_TIMEOUT
        while self.sock is None:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT)
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Monarch's debug server did not open (see {self.log.name})") from None
                time.sleep(0.2)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.read_until("monarch_dbg> ")
        while self.listed() < self.ranks:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {self.ranks} ranks stopped under Monarch in {START_TIMEOUT:g} s")
            time.sleep(0.2)

    def read_until(self, prompt: str) -> str:
        data = b""
        wanted = prompt.encode()
        while not data.endswith(wanted):
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError(f"Monarch's debug server closed the connection after {data[-200:]!r}")
            data += chunk
        return data.decode(errors="replace")

    def line(self, text: str, prompt: str) -> str:
        self.sock.sendall(text.encode() + b"\n")
        return self.read_until(prompt)

    def listed(self) -> int:
        return sum(row.startswith("| debugee") for row in self.line("list", "monarch_dbg> ").splitlines())

    def attached_round_trips(self, warmup: int, repeat: int) -> list[int]:
        self.line(f"attach debugee {ATTACHED_RANK}", "(Pdb) ")

        def once() -> None:
            answer = self.line("p rank", "(Pdb) ")
            if not answer.startswith(f"{ATTACHED_RANK}\n"):
                raise RuntimeError(f"Monarch's attached `p rank` answered {answer!r}")

        try:
            return timed(once, warmup, repeat)
        finally:
            self.line("detach", "monarch_dbg> ")

    def cast_round_trips(self, warmup: int, repeat: int) -> list[int]:
        """Monarch prints nothing for a cast; it is over when the prompt comes back."""
        return timed(lambda: self.line("cast debugee ranks(:) p rank", "monarch_dbg> "), warmup, repeat)

    def list_round_trips(self, warmup: int, repeat: int) -> list[int]:
        def once() -> None:
            if self.listed() != self.ranks:
                raise RuntimeError(f"Monarch's list lost ranks (of {self.ranks})")

        return timed(once, warmup, repeat)

    def stop(self) -> None:
        if self.sock is not None:
            self.sock.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, for a smoke run")
    args = parser.parse_args()
    mode = "quick" if args.quick else "full"
    samples: dict[tuple[int, str, str], list[int]] = {}
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="monarch-pdb-versus-")))
        pairs = {}
        for ranks in MESHES:
            say(f"starting the guide's program with {ranks} ranks on real Monarch, twice (Monarch's debugger, ours)...")
            theirs = MonarchDebugger(guide_program(workdir, ranks, ours=False), ranks)
            stack.callback(theirs.stop)
            ours = stack.enter_context(
                debugger.Example(
                    workdir / f"ours-{ranks}", guide_program(workdir, ranks, ours=True), ranks, ATTACHED_RANK
                )
            )
            pairs[ranks] = {"monarch": theirs, "ours": ours}
        for number in range(ROUNDS[mode]):
            say(f"round {number + 1} of {ROUNDS[mode]}")
            for ranks, pair in pairs.items():
                for measure in REPEAT[mode]:
                    for who, target in pair.items():
                        run = getattr(target, f"{measure}_round_trips")
                        samples.setdefault((ranks, measure, who), []).extend(
                            run(WARMUP[measure], REPEAT[mode][measure] // ROUNDS[mode])
                        )
    rows = []
    for ranks in MESHES:
        for measure, title in (("attached", "attached `p rank`"), ("cast", "cast ranks(:) `p rank`"), ("list", "list")):
            theirs = Result(f"Monarch {title}", samples[(ranks, measure, "monarch")])
            ours = Result(f"monarch-pdb {title}", samples[(ranks, measure, "ours")])
            rows.append(
                {
                    "measure": f"{title}, {ranks} ranks",
                    "n": len(ours.samples_ns),
                    "monarch_p50_ms": round(theirs.percentile(50), 3),
                    "monarch_p99_ms": round(theirs.percentile(99), 3),
                    "ours_p50_ms": round(ours.percentile(50), 3),
                    "ours_p99_ms": round(ours.percentile(99), 3),
                    "speedup": f"{theirs.percentile(50) / ours.percentile(50):.1f}x",
                }
            )
    print(report.table(rows, COLUMNS))
    report.write_json(
        RESULTS, rows, {"mode": mode, "rounds": ROUNDS[mode], "warmup_per_batch": WARMUP, "monarch": monarch_version()}
    )
    say(f"wrote {RESULTS}")
    return 0


def monarch_version() -> str:
    from importlib.metadata import version

    return version("torchmonarch")


if __name__ == "__main__":
    report.run(main)
