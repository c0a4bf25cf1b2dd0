"""A stall says so by itself, and stacks over time and by progress show who is behind: three
ranks train on, one stands in next_batch."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
from programs import Program, debug, wait_for_lines

from monarch_pdb import wire
from monarch_pdb.broker.events import EventLog
from monarch_pdb.broker.stalls import Stalls
from monarch_pdb.client.commands.event_lines import describe_events
from monarch_pdb.ranks import RankSet

STALLING = textwrap.dedent("""
    import time
    import types

    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host

    step = 0


    def work():
        time.sleep(0.01)


    def next_batch():
        print("STUCK", flush=True)
        time.sleep(3600)


    class Trainer(Actor):
        @endpoint
        def train(self):
            global step
            rank = current_rank().rank
            print("WAITING", rank, flush=True)
            while True:
                if rank == 3 and step == 5:
                    next_batch()
                step += 1
                types.FunctionType(work.__code__.replace(co_name=f"work_{step}"), globals())()


    if __name__ == "__main__":
        this_host().spawn_procs(per_host={"gpu": 4}).spawn("train", Trainer).train.call().get()
""")
"""Ranks 0-2 move on: each step runs in a function named for it (`work_812`), so two samples
find a rank at one place only if it took no step between them. Rank 3 stands in next_batch
from its fifth step."""
STALL_AFTER = "2"


@pytest.mark.timeout(120)
def test_a_stall_is_told_once_and_stacks_over_time_and_by_step_name_the_rank_behind(env, tmp_path, shell):
    script = tmp_path / "stalling.py"
    script.write_text(STALLING)
    program = Program(dict(env, MONARCH_PDB_STALL_AFTER=STALL_AFTER), script, cwd=tmp_path)
    try:
        wait_for_lines(program, "STUCK", 1)
        sh = shell()
        told = sh.expect(
            r"train 3 has been at stalling\.py:\d+ next_batch for (\d+) s; ranks\[0-2\] moved\r?$", timeout=60
        )
        assert int(told[1]) >= int(STALL_AFTER), "told once it stood still that long, and how long it has"

        over_time = debug(env, "stacks train --samples 4 --every 0.5").stdout
        assert re.search(
            r"^train: 4 samples 0\.5 s apart \(1\.5 s\):\n  moved: ranks\[0-2\] \(3\)\n"
            r"  still: ranks\[3\] \(1\) at stalling\.py:\d+ next_batch$",
            over_time,
            re.M,
        ), over_time

        by_step = debug(env, "stacks train --by step").stdout
        least = re.search(
            r"^train by step, least first:\n  step = (\d+)  ranks\[3\] \(1\) at stalling\.py:\d+ next_batch$",
            by_step,
            re.M,
        )
        assert least and least[1] == "5", by_step

        assert len(re.findall(r"has been at", sh.text)) == 1, "told once, though every sample since finds it still"
        story = debug(env, "hang train").stdout
        assert story.startswith("== train: ranks moved in 1 s; where they are:\ntrain ranks[0-3] (4): "), story
        assert re.search(
            r"^== least progressed: train ranks\[3\] \(1\) at stalling\.py:\d+ next_batch: stood still while "
            r"ranks\[0-2\] moved\n== next:\n  stacks train ranks\(3\) --locals +their locals",
            story,
            re.M,
        ), story
        assert "  interrupt train ranks(3)          stop them where they are, then `attach train 3`" in story, story
        assert "== collectives" not in story, "no process group: nothing to say of collectives"
        doc = json.loads(debug(env, "stacks train --samples 3 --every 0.2 --by step --json").stdout)
        assert doc["motion"]["moved"] == [0, 1, 2] and doc["motion"]["still"][0]["ranks"] == [3], doc["motion"]
        assert doc["by"]["groups"][0] == {"ranks": [3], "where": doc["motion"]["still"][0]["where"], "values": ["5"]}
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_bad_samples_every_and_by_are_one_line_errors(env, tmp_path):
    script = tmp_path / "stalling.py"
    script.write_text(STALLING)
    program = Program(env, script, cwd=tmp_path)
    try:
        wait_for_lines(program, "STUCK", 1)
        for line, why in (
            ("stacks train --samples 0", "--samples needs one sample at least, not '0'"),
            ("stacks train --every -1 --samples 2", "--every needs a positive number of seconds, not '-1'"),
            ("stacks train --by 'step = 1'", "peek evaluates an expression, not a statement"),
        ):
            refused = debug(env, line)
            assert refused.returncode == 1 and refused.stdout == "" and why in refused.stderr, refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    finally:
        program.stop()


class Running:
    """The registry as the stall watcher reads it: four ranks of one actor that run."""

    def running(self) -> dict[tuple[str, str], set[int]]:
        return {("job", "train"): {0, 1, 2, 3}}


@pytest.mark.timeout(10)
def test_a_stall_says_how_long_the_ranks_have_stood_still_though_nobody_watched_until_late():
    """Rank 3 stands still from the first sample while ranks 0-2 move; nobody watches for 15
    minutes, then a shell connects: the event says how long rank 3 has stood there, not the
    window after which a stall is told. Driven with the samples' own clock, nothing waits."""
    events = EventLog()
    asked: list[wire.Stacks] = []
    stalls = Stalls(Running(), events, lambda _peer, msg: asked.append(msg), stall_after=60)

    def frame(line: int, function: str) -> list[wire.ThreadStack]:
        return [wire.ThreadStack("MainThread", [wire.Frame("train.py", line, function)])]

    start = stalls.next_at
    for sample in range(62):  # one each 15 s: 915 s
        stalls.tick(start + 15 * sample, watching=sample == 61)
        groups = [
            wire.StackGroup(frame(10 + sample, f"work_{sample}"), RankSet.of([0, 1, 2])),
            wire.StackGroup(frame(41, "next_batch"), RankSet.of([3])),
        ]
        stalls.take(wire.StacksResult(ref=asked[-1].ref, actor="train", groups=groups, missing=[]))
        if sample < 61:
            assert events.take() == [], "nobody to tell"
    [event] = events.take()
    assert (event.kind, event.ranks, event.where) == (wire.EventKind.STALLED, "3", "train.py:41 next_batch")
    assert event.detail == "for 915 s; ranks[0-2] moved", event.detail
    assert describe_events([event]) == ["train 3 has been at train.py:41 next_batch for 915 s; ranks[0-2] moved"]
