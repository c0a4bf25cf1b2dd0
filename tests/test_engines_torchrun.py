"""torchrun, for real: four CPU ranks of examples/train.py all-reduce over gloo and stop at
breakpoint(); the shell lists them with their coordinates, reads each rank's loss, and lets the
collectives complete. Ranks that run without a breakpoint are seen and stopped in their code,
on their main thread. Needs torch (`make test-engines` installs it)."""

from __future__ import annotations

import os
import re
import sys
import textwrap

import pytest
from conftest import wait_for_exit
from programs import DEBUG_SHELL, EXAMPLES, Program, interrupt_running_ranks, wait_for_all_rows, wait_for_sessions

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
    program = Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", TRAIN_TIMEOUT=str(JOB_TIMEOUT)),
                      EXAMPLES / "train.py", launcher=TORCHRUN)
    try:
        rows = wait_for_sessions(env, 4, timeout=120)
        sh = shell(command=DEBUG_SHELL)
        listed = re.findall(r"^\| (\w+) +\| (\d) +\| (\{.*?\}) +\| (\S+) +\| (\S+) +\| (\d+) +\|$", sh.command("list"), re.M)
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
        assert all(alive(pid) for pid in waiting), "a rank waiting for a paused peer was ended by the collective timeout"
        assert "Continued 1 rank: train ranks[3]" in sh.command("continue")

        code, output = program.finish(timeout=60)
        assert code == 0, output
        for rank, loss in losses.items():
            printed = re.search(rf"^rank {rank} step 1 loss ([\d.]+)$", output, re.M)
            assert printed and round(float(printed.group(1)), 4) == loss
        assert "trained: mean loss" in output
    finally:
        program.stop()


LOOP = textwrap.dedent('''
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
''')


@pytest.mark.timeout(120)
def test_running_torchrun_ranks_are_seen_and_stopped_in_their_code(env, tmp_path):
    script = tmp_path / "peers.py"
    script.write_text(LOOP)
    program = Program(env, script, str(tmp_path / "stop"), cwd=tmp_path, launcher=[*TORCHRUN[:-1], "2"])
    try:
        wait_for_all_rows(env, lambda rows: {(r.actor, r.rank) for r in rows} == {("peers", 0), ("peers", 1)}, timeout=90)
        interrupt_running_ranks(env, "peers", "wait_for_peers", script)
        (tmp_path / "stop").touch()
        code, output = program.finish(timeout=60)
        assert code == 0 and "RANK 0 WAITED True" in output and "RANK 1 WAITED True" in output, output
    finally:
        program.stop()
