"""Benchmark monarch-pdb against raw pyzmq floors measured in the same run.

    .venv/bin/python benchmarks/run.py [--quick] [--scale]      (or: make bench [QUICK=1])
    .venv/bin/python benchmarks/run.py --tree-large [--ranks N] [--profile DIR]
                                                                (or: make bench-tree-large)

Prints a table and writes benchmarks/results/latest.json. The targets are DESIGN.md's
"Performance targets" for 16 ranks: an attached `p` within 2x of the raw relay floor, a cast
to 16 ranks under 5 ms, `list` under 200 ms. `--scale` then adds thousands of emulated ranks
(scale.py: 256 to 16,384, directly and through a tree of 8 host brokers; with --quick 256 and
1,024), which takes several minutes. `--tree-large` measures only the trees of 131,072 ranks
under 16 host brokers and 1,048,576 under 64, ranks emulated at the wire (wire_ranks.py), on two
cores, and writes benchmarks/results/tree-large.json; each row has its wall time here and its
critical path (the root's CPU plus the slowest host broker's), and a measure that fails is a MISS
with its reason in its row. `--ranks` runs one of the two trees only (131,072 takes a few
minutes, 1,048,576 loads two cores for a quarter of an hour); `--profile` runs every broker under
cProfile and leaves each one's statistics in DIR (root.prof, host-0.prof, ...).

Tab at the attached prompt (`p ra` to `p rank`, the rank's pdb completing it) is measured as the
attached line is, against floor C's own Tab plus the attached line below the shell.

The editor's `next` on one rank, request to `stopped` event (editor.py), and a Step Over on to
the new frame's Locals as VS Code asks for them (next, stopped, stackTrace, scopes, variables),
are measured beside the same `n` typed in the shell, attached, in a terminal: the target of each
is within 2x of that.

The broker's CPU with 1,024 idle ranks connected is read beside a bare ROUTER's (its floor) and
beside the same broker answering a Python heartbeat a rank a second, as ranks once sent (idle.py).

Floors and product measures run in alternating batches, every process started once up front:
on a small shared machine the background load drifts by tens of percent within a minute, and
alternating makes a product number and its floor see the same drift.

On Python 3.12+ it also times a loop with an editor's breakpoint set in another function of
its running rank, beside the same loop without monarch-pdb (running_breakpoints.py).

Last, what monarch-pdb costs a job that never stops (job_cost.py): import, install, the 16-rank
mesh's start, an endpoint call, a false condition's hit, after a breakpoint waited for a file,
setting a breakpoint among 3 million objects, an idle rank's and the idle broker's CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import tempfile
from pathlib import Path

import debugger
import editor
import floors
import idle
import job_cost
import report
import running_breakpoints
import scale
import terminal
from report import Result, Target, say

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"
TREE_LARGE_RESULTS = RESULTS.with_name("tree-large.json")
ROUNDS = {"full": 10, "quick": 3}
# Timed repetitions per measure over the whole run; full mode takes about half a minute on 2 cores.
REPEAT = {
    "full": {
        "relay": 10000,
        "attached": 5000,
        "fan_out": 3000,
        "cast": 2000,
        "list": 3000,
        "tty_floor": 1000,
        "tty_attached": 1000,
        "tty_floor_tab": 1000,
        "tty_tab": 1000,
        "tty_cast": 500,
        "tty_next": 500,
        "dap_next": 500,
        "dap_step_shown": 500,
    },
    "quick": {
        "relay": 600,
        "attached": 300,
        "fan_out": 210,
        "cast": 90,
        "list": 210,
        "tty_floor": 90,
        "tty_attached": 90,
        "tty_floor_tab": 90,
        "tty_tab": 90,
        "tty_cast": 45,
        "tty_next": 45,
        "dap_next": 45,
        "dap_step_shown": 45,
    },
}
# Untimed repetitions before each batch: the first connects sockets and fills caches, later
# ones make the processes of this measure hot again after the previous measure ran.
WARMUP = {
    "relay": 50,
    "attached": 20,
    "fan_out": 20,
    "cast": 5,
    "list": 20,
    "tty_floor": 5,
    "tty_attached": 5,
    "tty_floor_tab": 5,
    "tty_tab": 5,
    "tty_cast": 2,
    "tty_next": 5,
    "dap_next": 5,
    "dap_step_shown": 5,
}


def quantile_sum(first: list[int], second: list[int]) -> list[int]:
    """Samples whose every percentile is the sum of the two lists' same percentiles."""
    a, b = sorted(first), sorted(second)
    n = min(len(a), len(b))
    return [a[i * len(a) // n] + b[i * len(b) // n] for i in range(n)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, for a smoke run")
    parser.add_argument("--scale", action="store_true", help="add the emulated-rank scale measures")
    parser.add_argument(
        "--tree-large", action="store_true", help="only the trees of 131,072 and 1,048,576 ranks emulated at the wire"
    )
    parser.add_argument(
        "--ranks",
        type=int,
        choices=[shape.ranks for shape in scale.TREE_LARGE],
        help="with --tree-large: only the tree of this many ranks",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="with --tree-large: run each broker under cProfile, its statistics to DIR/NAME.prof",
    )
    args = parser.parse_args()
    if args.tree_large:
        shapes = [shape for shape in scale.TREE_LARGE if args.ranks in (None, shape.ranks)]
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
        return tree_large(shapes, args.profile.resolve() if args.profile else None)
    if args.ranks or args.profile:
        parser.error("--ranks and --profile go with --tree-large")
    mode = "quick" if args.quick else "full"

    with contextlib.ExitStack() as stack:
        say(
            f"monarch-pdb benchmark ({mode}): starting the floors' peers and {debugger.EXAMPLE.name} "
            f"with {debugger.RANKS} ranks..."
        )
        relay = stack.enter_context(floors.Relay())
        fan_out = stack.enter_context(floors.FanOut(debugger.RANKS))
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="monarch-pdb-bench-")))
        example = stack.enter_context(debugger.Example(workdir))
        shells = stack.enter_context(terminal.Shells(example.env, debugger.ATTACHED_RANK, debugger.RANKS))
        stepping = stack.enter_context(editor.Stepping(workdir / "stepper"))
        measures = {
            "relay": relay.round_trips,
            "attached": example.attached_round_trips,
            "fan_out": fan_out.round_trips,
            "cast": example.cast_round_trips,
            "list": example.list_round_trips,
            "tty_floor": shells.floor_round_trips,
            "tty_attached": shells.attached_round_trips,
            "tty_floor_tab": shells.floor_tab_round_trips,
            "tty_tab": shells.attached_tab_round_trips,
            "tty_cast": shells.cast_round_trips,
            "tty_next": stepping.shell_next_round_trips,
            "dap_next": stepping.editor_next_round_trips,
            "dap_step_shown": stepping.editor_step_shown_round_trips,
        }
        samples: dict[str, list[int]] = {name: [] for name in measures}
        for n in range(ROUNDS[mode]):
            say(f"round {n + 1} of {ROUNDS[mode]}")
            for name, measure in measures.items():
                samples[name] += measure(WARMUP[name], REPEAT[mode][name] // ROUNDS[mode])
        shell_cpu = shells.cpu_ms_per_line()
    # After the 16-rank run's processes are gone, so neither measure loads the other.
    scaled, resources = measure_scale(scale.SHAPES[mode]) if args.scale else ([], [])
    with tempfile.TemporaryDirectory(prefix="monarch-pdb-breakpoints-") as workdir:
        breaking = running_breakpoints.measure(Path(workdir), mode, say)
    idle_cpu = idle.measure(say)
    costs = [*job_cost.measure(mode, say), *job_cost.broker_rows(idle_cpu)]

    floor_a = Result("raw relay round trip (floor A)", samples["relay"])
    tty_floor = Result("terminal: cmd + readline answering itself (floor C)", samples["tty_floor"])
    floor_b = Result(f"raw fan-out/gather x{debugger.RANKS} (floor B)", samples["fan_out"])
    attached = Result("attached `p rank`", samples["attached"], floor=floor_a, target=Target(times_floor=2.0))
    # What a bare readline program costs plus what the same line costs below the shell: the
    # terminal's attached line can be no faster than both together.
    tty_path_floor = Result(
        "terminal floor: floor C + attached `p rank` below the shell",
        quantile_sum(samples["tty_floor"], samples["attached"]),
    )
    tty_floor_tab = Result("terminal: cmd + readline completing `p ra` itself (floor C, Tab)", samples["tty_floor_tab"])
    tty_tab_path_floor = Result(
        "terminal floor, Tab: floor C's Tab + attached `p rank` below the shell",
        quantile_sum(samples["tty_floor_tab"], samples["attached"]),
    )
    tty_next = Result(
        "terminal: attached `n`, Enter to prompt (the editor's floor)", samples["tty_next"], floor=floor_a
    )
    results = [
        floor_a,
        floor_b,
        attached,
        Result(
            f"cast ranks(:) `p rank`, {debugger.RANKS} ranks", samples["cast"], floor=floor_b, target=Target(ms=5.0)
        ),
        Result(f"list, {debugger.RANKS} sessions", samples["list"], target=Target(ms=200.0)),
        tty_floor,
        tty_path_floor,
        Result(
            "terminal: attached `p rank`, Enter to prompt",
            samples["tty_attached"],
            floor=tty_path_floor,
            target=Target(ms=terminal.MONARCH_ATTACHED_MS, times_floor=2.0),
        ),
        tty_floor_tab,
        tty_tab_path_floor,
        Result(
            "terminal: Tab completion attached, `p ra` Tab to `p rank` shown",
            samples["tty_tab"],
            floor=tty_tab_path_floor,
            target=Target(times_floor=2.0),
        ),
        Result(
            f"terminal: cast to {debugger.RANKS} ranks, Enter to prompt",
            samples["tty_cast"],
            floor=tty_floor,
            target=Target(ms=terminal.CAST_MS),
        ),
        tty_next,
        Result(
            "editor: `next` on one rank, request to `stopped` event",
            samples["dap_next"],
            floor=tty_next,
            target=Target(times_floor=2.0),
        ),
        Result(
            "editor: Step Over to the new frame's Locals, as VS Code asks",
            samples["dap_step_shown"],
            floor=tty_next,
            target=Target(times_floor=2.0),
        ),
        *breaking,
        *scaled,
    ]
    rows = [result.row() for result in results]
    print(report.table(rows))
    print(
        "\nthe shell's own CPU per line (ms): "
        + ", ".join(f"{k} {v}" for k, v in shell_cpu.items())
        + f" (attached: target < {terminal.CPU_MS_PER_LINE:g} ms, "
        + ("PASS" if shell_cpu.get("attached", math.inf) < terminal.CPU_MS_PER_LINE else "MISS")
        + ")"
    )
    print(
        f"\nidle broker CPU with {idle.RANKS} idle ranks (% of a core): {idle_cpu['broker']:.2f} "
        f"(floor, a bare ROUTER answering libzmq's heartbeats: {idle_cpu['floor']:.2f}; with a Python "
        f"heartbeat a rank a second, as before: {idle_cpu['python_heartbeats']:.2f})"
    )
    print_resources(resources)
    job_rows = [result.row() for result in costs]
    print("\nwhat it costs the job (rows of 1,000 operations: ms read as us each)")
    print(report.table(job_rows))
    report.write_json(
        RESULTS,
        rows,
        {
            "job_cost": job_rows,
            "idle_broker_cpu_percent": idle_cpu,
            "mode": mode,
            "ranks": debugger.RANKS,
            "rounds": ROUNDS[mode],
            "warmup_per_batch": WARMUP,
            "floor_messages": floors.message_sizes(),
            "scale_resources": resources,
            "shell_cpu_ms_per_line": shell_cpu,
        },
    )
    say(f"wrote {RESULTS}")
    return 0


def measure_scale(shapes: list[scale.Shape], profile: Path | None = None) -> tuple[list[Result], list[dict]]:
    """Each shape's results and resource row; a tree's root CPU beside the direct broker's."""
    scaled: list[Result] = []
    resources: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="monarch-pdb-scale-") as workdir:
        for number, shape in enumerate(shapes):
            say(f"scale: {shape.label} emulated ranks")
            try:
                results, row = scale.measure_shape(
                    shape, Path(workdir) / f"shape-{number}", say, profile / f"shape-{number}" if profile else None
                )
            except RuntimeError as failure:  # a shape the product cannot take is a finding, not the end
                say(f"scale: {shape.label} failed: {failure}")
                resources.append({"ranks": shape.ranks, "shape": shape.label, "failed": str(failure)})
                continue
            scaled += results
            resources.append(row)
    scale.compare_with_direct(resources)
    return scaled, resources


def print_resources(resources: list[dict]) -> None:
    if resources:
        print()
        print(report.table(resources, scale.RESOURCE_COLUMNS))


def tree_large(shapes: list[scale.Shape], profile: Path | None = None) -> int:
    """The trees of 131,072 and 1,048,576 ranks emulated at the wire (or one of them), where the
    machine can run them: each row with its wall time here and its critical path, and the verdict
    on the one its target applies to; a measure that failed is a MISS with its reason."""
    biggest = max(shapes, key=lambda shape: shape.ranks)
    lacking = scale.cannot_run(biggest, scale.TREE_LARGE_NEEDS)
    if lacking:
        say(
            f"monarch-pdb benchmark: this machine cannot run the {biggest.ranks:,}-rank tree ({biggest.label}): "
            f"{lacking}. Nothing was run."
        )
        return 2
    results, resources = measure_scale(shapes, profile)
    scale.compare_root_cpu(resources)
    rows = [result.row() for result in results]
    print(report.table(rows, report.TREE_COLUMNS))
    print()
    print(report.table(resources, scale.TREE_RESOURCE_COLUMNS))
    report.write_json(TREE_LARGE_RESULTS, rows, {"mode": "tree-large", "scale_resources": resources})
    say(f"wrote {TREE_LARGE_RESULTS}")
    missed = any(row["verdict"] and row["verdict"] != "PASS" for row in rows) or any(
        row.get("failed") or "MISS" in str(row.get("memory_verdict")) or row.get("root_cpu_verdict") == "MISS"
        for row in resources
    )
    return 1 if missed else 0


if __name__ == "__main__":
    report.run(main)
