"""torchrun, for real: four CPU ranks of examples/train.py all-reduce over gloo and stop at
breakpoint(); the shell lists them with their coordinates, reads each rank's loss, and lets the
collectives complete. Ranks that run without a breakpoint are seen and stopped in their code,
on their main thread, and read without stopping them where they wait in a collective (peek).
Needs torch (`make test-engines` installs it)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap

import pytest
from conftest import wait_for_exit
from programs import (
    DEBUG_SHELL,
    EXAMPLES,
    Program,
    debug,
    interrupt_running_ranks,
    wait_for_all_rows,
    wait_for_lines,
    wait_for_sessions,
)

pytest.importorskip("torch", reason="torch is not installed (make test-engines installs monarch-pdb[torch])")

TORCHRUN = [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--nproc-per-node", "4"]
JOB_TIMEOUT = 3


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(180)
def test_torchrun_ranks_are_listed_cast_to_and_continued(env, shell):
    program = Program(
        dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", TRAIN_TIMEOUT=str(JOB_TIMEOUT)),
        EXAMPLES / "train.py",
        launcher=TORCHRUN,
    )
    try:
        rows = wait_for_sessions(env, 4, timeout=120)
        sh = shell(command=DEBUG_SHELL)
        listed = re.findall(
            r"^\| (\w+) +\| (\d) +\| (\{.*?\}) +\| (\S+) +\| (\S+) +\| (\d+) +\|$", sh.command("list"), re.M
        )
        assert [row[:3] for row in listed] == [("train", str(r), f"{{'host': 0, 'gpu': {r}}}") for r in range(4)]
        assert {row[4] for row in listed} == {"train.main"}

        cast = sh.command("cast train ranks(:) p loss")
        groups = re.findall(r"^train ranks\[(\d)\] \(1\)\ntensor\(([\d.]+), grad_fn=<MseLossBackward0>\)$", cast, re.M)
        assert [rank for rank, _ in groups] == ["0", "1", "2", "3"], cast
        losses = {int(rank): float(value) for rank, value in groups}

        # Ranks 0-2 go on into the next all-reduce and wait there for rank 3, which stays paused
        # for longer than the job's own collective timeout: none of them may be ended for it.
        assert sh.command("cast train ranks(0:3) c") == "train ranks[0-2] (3)\n(continued; no longer traced)\n"
        waiting = [row.pid for row in rows if row.rank < 3]
        wait_for_exit(waiting, timeout=3 * JOB_TIMEOUT)
        assert all(alive(pid) for pid in waiting), (
            "a rank waiting for a paused peer was ended by the collective timeout"
        )
        assert "Continued 1 rank: train ranks[3]" in sh.command("continue")

        code, output = program.finish(timeout=60)
        assert code == 0, output
        for rank, loss in losses.items():
            printed = re.search(rf"^rank {rank} step 1 loss ([\d.]+)$", output, re.M)
            assert printed and round(float(printed.group(1)), 4) == loss
        assert "trained: mean loss" in output
    finally:
        program.stop()


LOOP = textwrap.dedent("""
    import os
    import sys
    import time

    import monarch_pdb

    monarch_pdb.install()


    def wait_for_peers(stop):
        polls = 0
        while not os.path.exists(stop):
            time.sleep(0.05)
            polls += 1
        return polls >= 0


    print("RANK", os.environ["RANK"], "WAITED", wait_for_peers(sys.argv[1]), flush=True)
""")


@pytest.mark.timeout(120)
def test_running_torchrun_ranks_are_seen_and_stopped_in_their_code(env, tmp_path):
    script = tmp_path / "peers.py"
    script.write_text(LOOP)
    program = Program(env, script, str(tmp_path / "stop"), cwd=tmp_path, launcher=[*TORCHRUN[:-1], "2"])
    try:
        wait_for_all_rows(
            env, lambda rows: {(r.actor, r.rank) for r in rows} == {("peers", 0), ("peers", 1)}, timeout=90
        )
        interrupt_running_ranks(env, "peers", "wait_for_peers", script)
        (tmp_path / "stop").touch()
        code, output = program.finish(timeout=60)
        assert code == 0 and "RANK 0 WAITED True" in output and "RANK 1 WAITED True" in output, output
    finally:
        program.stop()


DDP = textwrap.dedent("""
    import os
    import sys
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import monarch_pdb

    monarch_pdb.install()


    def next_batch(rank, step, release):
        if rank == 3 and step == 3:
            while not os.path.exists(release):  # a data loader that stalls
                time.sleep(0.1)
        return torch.randn(32, 8), torch.randn(32, 1)


    def train_step(model, optimizer, batch, rank, step):
        inputs, targets = batch
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        if rank == 2 and step == 3:
            loss = loss * float("nan")
        optimizer.zero_grad()
        sys.stdout.write(f"BACKWARD {rank} {step}\\n")  # one write: the ranks share the launcher's output
        sys.stdout.flush()
        loss.backward()  # DDP all-reduces the gradients in here
        optimizer.step()
        return loss


    def main():
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        torch.manual_seed(rank)
        model = DistributedDataParallel(torch.nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(5):
            train_step(model, optimizer, next_batch(rank, step, sys.argv[1]), rank, step)
        dist.destroy_process_group()
        sys.stdout.write(f"RANK {rank} FINISHED\\n")
        sys.stdout.flush()


    main()
""")
"""Four DDP ranks over gloo: at step 3 rank 2's loss goes NaN and rank 3 stalls in next_batch,
so ranks 0-2 wait for it in the gradients' all-reduce, inside loss.backward()."""


@pytest.mark.timeout(240)
def test_peek_finds_the_nan_while_ranks_wait_in_the_all_reduce_for_a_hung_one(env, tmp_path, shell):
    script = tmp_path / "train.py"
    script.write_text(DDP)
    release = tmp_path / "release"
    program = Program(env, script, str(release), cwd=tmp_path, launcher=TORCHRUN)
    try:
        wait_for_lines(program, "BACKWARD", 4 * 4 - 1, timeout=150)  # ranks 0-2 at step 3, rank 3 past step 2
        wait_for_all_rows(
            env, lambda rows: [(r.actor, r.state) for r in rows] == [("train", "running")] * 4, timeout=60
        )
        sh = shell(command=DEBUG_SHELL)
        hung = sh.command("stacks train")
        assert re.search(r"^rank 3 is elsewhere: train\.py:\d+ next_batch$", hung, re.M), hung

        nan = sh.command("peek --frame train_step train ranks(:) loss")
        assert "\ntrain ranks[2] (1)\ntensor(nan, grad_fn=<MulBackward0>)\n" in nan, nan
        for rank in (0, 1):
            assert re.search(
                rf"^train ranks\[{rank}\] \(1\)\ntensor\([\d.]+, grad_fn=<MseLossBackward0>\)$", nan, re.M
            ), nan
        assert "train ranks[3] (1)\n*** no frame of train_step on the rank's stack\n" in nan
        assert re.search(
            r"^numbers: count 3, min [\d.]+ \(rank [01]\), max [\d.]+ \(rank [01]\), mean [\d.]+, "
            r"NaN/Inf 1 ranks\[2\], beyond 3 sd 0, no number 1 ranks\[3\]$",
            nan,
            re.M,
        ), nan

        stuck = sh.command("interrupt train ranks(0:3) --timeout 2")
        assert re.search(
            r"^train ranks\[0-2\] are in a C call \(torch/\S+\.py:\d+ \w+\); they stop when it returns; "
            r"`peek` reads them now$",
            stuck,
            re.M,
        ), stuck
        release.touch()
        wait_for_sessions(env, 3, timeout=60)  # the all-reduce returned: the interrupt takes them
        assert "Continued 3 ranks: train ranks[0-2]" in sh.command("continue")
        code, output = program.finish(timeout=90)
        assert code == 0 and all(f"RANK {rank} FINISHED" in output for rank in range(4)), output
    finally:
        program.stop()


SKIPS = textwrap.dedent("""
    import sys
    import time

    import torch
    import torch.distributed as dist

    import monarch_pdb

    monarch_pdb.install()


    def next_batch(rank, step):
        if rank == 3 and step == 2:
            while True:
                time.sleep(0.1)  # a data loader that never comes back
        return torch.ones(8)


    def main():
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        for step in range(5):
            batch = next_batch(rank, step)
            dist.all_reduce(batch)
            sys.stdout.write(f"STEP {rank} {step}\\n")  # one write: the ranks share the launcher's output
            sys.stdout.flush()


    main()
""")
"""Four ranks over gloo with torch's Flight Recorder on: rank 3 never comes back from its third
batch, so it never enters the third all_reduce, which ranks 0-2 wait in."""


@pytest.mark.timeout(240)
def test_collectives_names_the_collective_a_rank_never_entered_and_where_it_is(env, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SKIPS)
    program = Program(dict(env, TORCH_FR_BUFFER_SIZE="2000"), script, cwd=tmp_path, launcher=TORCHRUN)
    rows = []
    try:
        wait_for_lines(program, "STEP", 4 * 2, timeout=150)  # every rank past its second step
        rows = wait_for_all_rows(env, lambda rows: [(r.actor, r.state) for r in rows] == [("train", "running")] * 4)
        seen = debug(env, "collectives train")
        assert seen.returncode == 0, seen.stdout + seen.stderr
        lines = seen.stdout.splitlines()
        assert lines[0] == (
            "train: group 0 (world, 4 ranks): ranks[3] (1) never entered #3 all_reduce, which ranks[0-2] (3) entered"
        ), seen.stdout
        assert re.fullmatch(
            r"  ranks\[0-2\] \(3\): #3 all_reduce \[\[8\]\], scheduled [\d.]+(-[\d.]+)? s ago, not completed; at train\.py:\d+ main",
            lines[1],
        ), seen.stdout
        assert re.fullmatch(
            r"  ranks\[3\] \(1\): #2 all_reduce \[\[8\]\], completed; at train\.py:\d+ next_batch", lines[2]
        )
        assert len(lines) == 3, "nothing else: the Flight Recorder is on, every rank answered"

        story = debug(env, "hang train")
        assert story.returncode == 0, story.stdout + story.stderr
        assert "== collectives:\n" + seen.stdout.splitlines()[0] + "\n" in story.stdout, story.stdout
        assert re.search(
            r"^== least progressed: train ranks\[3\] \(1\) at train\.py:\d+ next_batch: never entered #3 "
            r"all_reduce of group 0$",
            story.stdout,
            re.M,
        ), story.stdout
        assert "  interrupt train ranks(3)" in story.stdout, story.stdout
        doc = json.loads(debug(env, "hang train --json").stdout)
        assert doc["least_progressed"]["ranks"] == [3]
        assert doc["collectives"]["groups"][0]["disagreement"]["never_entered"] == [3]
    finally:
        for row in rows:  # hung for good, in a session of torchrun's own: killed one by one
            os.kill(row.pid, signal.SIGKILL)
        program.stop()


HOLDS = textwrap.dedent("""
    import ctypes
    import os
    import sys
    import time

    import torch
    import torch.distributed as dist

    import monarch_pdb

    monarch_pdb.install()


    def next_batch(rank, step):
        if rank == 3 and step == 2:
            while not os.path.exists(sys.argv[1]):  # until the test has seen every rank join
                time.sleep(0.1)
            sys.stdout.write("HOLDING\\n")
            sys.stdout.flush()
            ctypes.PyDLL(None).sleep(3600)  # C code that never lets go of the GIL
        return torch.ones(8)


    def main():
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        for step in range(5):
            batch = next_batch(rank, step)
            dist.all_reduce(batch)
            sys.stdout.write(f"STEP {rank} {step}\\n")  # one write: the ranks share the launcher's output
            sys.stdout.flush()


    main()
""")
"""As SKIPS, but rank 3 never comes back from C code that holds the GIL: its agent cannot
answer, so the ranks that did agree on the collective they entered."""


@pytest.mark.timeout(240)
def test_collectives_and_hang_name_the_rank_that_holds_the_gil_and_never_say_every_rank_entered(env, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(HOLDS)
    go = tmp_path / "go"
    program = Program(dict(env, TORCH_FR_BUFFER_SIZE="2000"), script, str(go), cwd=tmp_path, launcher=TORCHRUN)
    rows = []
    try:
        wait_for_lines(program, "STEP", 4 * 2, timeout=150)  # every rank past its second step
        rows = wait_for_all_rows(env, lambda rows: [(r.actor, r.state) for r in rows] == [("train", "running")] * 4)
        go.touch()
        wait_for_lines(program, "HOLDING", 1)
        silent = "ranks[3] (1) did not answer: holds the GIL in C code (its process sent nothing in time)"
        seen = debug(env, "collectives train").stdout
        assert seen.splitlines()[0] == f"train: group 0 (world, 4 ranks): ranks[0-2] (3) entered #3; {silent}", seen
        assert "every rank entered" not in seen and "no answer from" not in seen, "rank 3 is named once, in its group"

        story = debug(env, "hang train").stdout
        assert "every rank entered" not in story, story
        assert f"== collectives:\n{seen.splitlines()[0]}\n" in story, story
        assert re.search(
            r"^== least progressed: train ranks\[3\] \(1\)( at \S+ \S+)?: did not answer in group 0: holds the GIL",
            story,
            re.M,
        ), story
        doc = json.loads(debug(env, "hang train --json").stdout)
        group = doc["collectives"]["groups"][0]
        assert group["every_rank_entered"] is None and group["disagreement"] is None, group
        assert [(d["ranks"], d["reason"].split(" (")[0]) for d in group["did_not_answer"]] == [
            ([3], "holds the GIL in C code")
        ], group
        assert f"train: group 0 (world, 4 ranks): {group['verdict']}" == seen.splitlines()[0], "JSON and text agree"
        assert doc["least_progressed"]["ranks"] == [3], doc["least_progressed"]
    finally:
        for row in rows:  # hung for good, in a session of torchrun's own: killed one by one
            os.kill(row.pid, signal.SIGKILL)
        program.stop()
