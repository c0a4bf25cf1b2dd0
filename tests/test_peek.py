"""Reading running ranks without stopping them: `peek` evaluates an expression in each rank's
own frame while the rank waits in a C call (a lock, a sleep, a socket read), and `stacks
--locals` shows that frame's locals; nothing of the ranks changes, and they finish as if
nobody had looked."""

from __future__ import annotations

import json
import re
import signal
import socket
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from programs import Program, debug, settings_for, wait_for_all_rows, wait_for_lines
from shell_driver import ShellDriver

from monarch_pdb import wire
from monarch_pdb.client.connection import BrokerConnection

PEERS = textwrap.dedent("""
    import select
    import socket
    import sys
    import threading
    import time

    import monarch_pdb

    monarch_pdb.install()
    rank = int(sys.argv[1])
    monarch_pdb.set_identity(actor="train", rank=rank, job="peers")
    peer = socket.create_connection(("127.0.0.1", int(sys.argv[2])))


    def all_reduce(loss):
        if rank == 0:
            done = threading.Event()
            threading.Thread(target=lambda: (peer.recv(1), done.set()), daemon=True).start()
            done.wait()
        elif rank == 1:
            while not select.select([peer], [], [], 0)[0]:
                time.sleep(0.05)
        else:
            peer.recv(1)
        return loss


    def train_step(step):
        loss = float("nan") if rank == 2 else 1.0 + rank / 10
        print("WAITING", rank, flush=True)
        return all_reduce(loss)


    print("RANK", rank, "DONE", train_step(3), flush=True)
""")
"""A rank of four that waits for its peer (the test) as ranks wait in a collective: rank 0 on
an Event, rank 1 in a sleep, ranks 2 and 3 in a socket read; rank 2's loss is NaN."""

GIL = textwrap.dedent("""
    import ctypes
    import os
    import sys
    import time

    import monarch_pdb

    monarch_pdb.install()
    monarch_pdb.set_identity(actor="train", rank=0)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    print("HOLDING", flush=True)
    import signal
    signal.signal(signal.SIGUSR1, lambda *_: None)  # a SIGUSR1 ends the hold
    def hold(seconds):
        holding = "the GIL"
        while not ctypes.PyDLL(None).sleep(seconds): pass  # C calls that keep the GIL, until a signal


    hold(int(sys.argv[2]))
    print("DONE", flush=True)
""")


class Job:
    """Four PEERS ranks, the test their peer: `release` lets each return from its wait."""

    def __init__(self, env: dict[str, str], tmp_path) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        script = tmp_path / "peers.py"
        script.write_text(PEERS)
        port = str(self.listener.getsockname()[1])
        self.ranks = [Program(env, script, str(rank), port, cwd=tmp_path) for rank in range(4)]
        self.links = [self.listener.accept()[0] for _ in self.ranks]
        for rank, program in enumerate(self.ranks):
            wait_for_lines(program, "WAITING", 1)
        wait_for_all_rows(
            env,
            lambda rows: (
                sorted((r.actor, r.rank, r.state) for r in rows) == [("train", rank, "running") for rank in range(4)]
            ),
        )

    def release(self) -> list[tuple[int, str]]:
        """Every rank let go; each one's exit status and what it printed."""
        for link in self.links:
            link.sendall(b"x")
        return [program.finish(timeout=30) for program in self.ranks]

    def stop(self) -> None:
        for program in self.ranks:
            program.stop()
        for link in self.links:
            link.close()
        self.listener.close()


@pytest.fixture
def job(env, tmp_path):
    started = Job(env, tmp_path)
    try:
        yield started
    finally:
        started.stop()


def finished_as_if_unread(job: Job) -> None:
    for rank, (code, output) in enumerate(job.release()):
        assert code == 0 and f"RANK {rank} DONE {'nan' if rank == 2 else 1.0 + rank / 10}" in output, output


@pytest.mark.timeout(120)
def test_peek_reads_ranks_waiting_in_c_calls_and_names_the_nan(env, job):
    sh = ShellDriver(env)
    try:
        sh.wait_prompt()
        assert sh.command("peek train ranks(:) loss") == (
            "train ranks[0] (1)\n1.0\ntrain ranks[1] (1)\n1.1\ntrain ranks[2] (1)\nnan\ntrain ranks[3] (1)\n1.3\n"
            "numbers: count 4, min 1 (rank 0), max 1.3 (rank 3), mean 1.13333, NaN/Inf 1 ranks[2], beyond 3 sd 0\n"
        )
        assert sh.command("peek train ranks(:) loss if loss != 1.3 else nope").endswith(
            "train ranks[3] (1)\n*** NameError: name 'nope' is not defined\n"
            "numbers: count 3, min 1 (rank 0), max 1.1 (rank 1), mean 1.05, NaN/Inf 1 ranks[2], beyond 3 sd 0, "
            "no number 1 ranks[3]\n"
        )
        assert sh.command("peek --frame train_step train ranks(:) step * 2") == "train ranks[0-3] (4)\n6\n"
        assert sh.command("peek --up 1 train ranks(:) (step, rank)") == "".join(
            f"train ranks[{rank}] (1)\n(3, {rank})\n" for rank in range(4)
        ), "train_step, one frame out of all_reduce"
        assert sh.command("peek --frame all_reduce --up 3 train ranks(1) step") == (
            "train ranks[1] (1)\n*** --up 3: only 2 frames above all_reduce\n"
        )
        doc = json.loads(sh.command("peek --json train ranks(:) loss"))
        assert [(g["ranks"], g["output"]) for g in doc["groups"]] == [
            ([0], "1.0\n"),
            ([1], "1.1\n"),
            ([2], "nan\n"),
            ([3], "1.3\n"),
        ]
        assert doc["numbers"]["nonfinite"] == [2] and doc["missing"] == []

        local = sh.command("stacks train --locals")
        assert (
            "locals of peers.py:25 all_reduce  ranks[2,3] (2)\n  loss = nan  ranks[2] (1)\n  loss = 1.3  ranks[3] (1)\n"
            "  loss numbers: count 2, min 1.3 (rank 3), max 1.3 (rank 3), mean 1.3, NaN/Inf 1 ranks[2], beyond 3 sd 0\n"
            in local
        )
        assert "locals of peers.py:23 all_reduce  ranks[1] (1)\n  loss = 1.1\n" in local
        assert "locals of peers.py:20 all_reduce  ranks[0] (1)\n  done = <threading.Event at 0x" in local
        listed = sh.command("list --all")
        assert listed.count("| running |") == 4, "nobody was stopped"
    finally:
        sh.kill()
    finished_as_if_unread(job)


@pytest.mark.timeout(120)
def test_peek_answers_what_raises_cuts_what_runs_long_and_changes_nothing(env, job):
    done = debug(
        env,
        "peek train ranks(:) 1 / (rank - 1)",
        "peek --timeout 1 train ranks(0,3) __import__('time').sleep(20)",
        "peek train ranks(0) [rank for _ in range(2)]",
        "peek train ranks(:) (rank := 99)",
        "peek train ranks(:) rank",
        "list --all",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    outputs = done.stdout
    assert outputs.startswith(
        "train ranks[0] (1)\n-1.0\ntrain ranks[1] (1)\n*** ZeroDivisionError: division by zero\n"
    ), "an expression that raises answers with what it raised, as pdb's p does"
    assert (
        "train ranks[0,3] (2)\n*** still evaluating after 1 s (the rank runs on; the answer is dropped when it comes)\n"
        "train ranks[0] (1)\n[0, 0]\n"
    ) in outputs, "the next peek is answered while the slow one still runs"
    assert (
        "train ranks[0-3] (4)\n99\n" in outputs and "".join(f"train ranks[{r}] (1)\n{r}\n" for r in range(4)) in outputs
    ), "an assignment expression binds nothing in the rank"
    assert outputs.count("| running |") == 4

    for statement, why in (
        ("rank = 5", "peek evaluates an expression, not a statement ('rank = 5'): it assigns nothing"),
        ("import os", "peek evaluates an expression, not a statement ('import os')"),
        ("loss +", "peek needs a Python expression: invalid syntax in 'loss +'"),
    ):
        refused = debug(env, f"peek train ranks(:) {statement}")
        assert refused.returncode == 1 and refused.stdout == "" and why in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and "-c:1:" in refused.stderr, (
            "one line, naming the script's line"
        )
    for line, why in (
        ("peek train", "usage: peek [--frame FUNC | --up N] [--timeout S] [--json] <actor> ranks(<ranks>)"),
        ("peek --up one train ranks(:) rank", "--up must be a non-negative whole number, not 'one'"),
        ("peek --timeout 0 train ranks(:) rank", "--timeout needs a positive number of seconds, not '0'"),
        ("peek --deep train ranks(:) rank", "peek has no option --deep"),
        ("peek nosuch ranks(:) rank", "No running rank of actor nosuch is known to the broker"),
    ):
        refused = debug(env, line)
        assert refused.returncode == 1 and refused.stdout == "" and why in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and "-c:1:" in refused.stderr, (
            "one line, naming the script's line"
        )
    assert debug(env, 'peek train ranks(2) "a  b" + str(rank)').stdout == "train ranks[2] (1)\n'a  b2'\n", (
        "sent as typed"
    )
    finished_as_if_unread(job)


@pytest.mark.timeout(90)
@pytest.mark.each_python  # 3.14+ reads from outside with its own remote unwinder, earlier ones with py-spy
def test_a_rank_holding_the_gil_is_named_by_peek_and_shown_by_stacks_read_from_outside(env, tmp_path):
    script = tmp_path / "gil.py"
    script.write_text(GIL)
    go = tmp_path / "go"
    program = Program(env, script, str(go), "20", cwd=tmp_path)  # held until SIGUSR1, however slow the reads
    try:
        wait_for_all_rows(env, lambda rows: [(r.actor, r.state) for r in rows] == [("train", "running")])
        assert debug(env, "peek train ranks(0) 1 + 1").stdout == "train ranks[0] (1)\n2\n"
        go.touch()
        wait_for_lines(program, "HOLDING", 1)
        held = debug(env, "peek --timeout 1 train ranks(0) 1 + 1")
        assert held.returncode == 1, held.stdout + held.stderr
        assert (
            held.stdout
            == "no answer from train ranks[0] (1): holds the GIL in C code (its process sent nothing in time)\n"
        )
        stacks = debug(env, "stacks train")
        assert stacks.returncode == 0, stacks.stdout + stacks.stderr
        assert stacks.stdout.splitlines()[1:] == [
            "gil.py:21 <module>  ranks[0] (1)",
            "gil.py:18 hold  ranks[0] (1)",
            "train ranks[0] (1): read from outside their processes (frames only): their agents did not answer, "
            "C code holding the GIL",
        ], "where the rank is, read by its host's broker without running code in it"
        deeper = debug(env, "stacks --locals --native train")
        assert deeper.returncode == 0, deeper.stdout + deeper.stderr
        assert re.search(r"^\S+ \(libc\.so\.6\)  ranks\[0\] \(1\)$", deeper.stdout, re.M), deeper.stdout
        assert deeper.stdout.endswith(
            "locals of gil.py:18 hold  ranks[0] (1)\n"
            '  holding = "the GIL"\n'
            "  seconds = 20\n"
            "train ranks[0] (1): read from outside their processes (frames only): native frames asked for\n"
        ), deeper.stdout
        program.proc.send_signal(signal.SIGUSR1)
        code, output = program.finish(timeout=30)
        assert code == 0 and "DONE" in output, output
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_interrupt_of_a_rank_holding_the_gil_never_says_peek_reads_it(env, tmp_path):
    """peek cannot read a rank whose C call holds the GIL; interrupt, which cannot stop it
    either, names it so and does not send the user to peek."""
    script = tmp_path / "gil.py"
    script.write_text(GIL)
    go = tmp_path / "go"
    program = Program(env, script, str(go), "3600", cwd=tmp_path)
    try:
        wait_for_all_rows(env, lambda rows: [(r.actor, r.state) for r in rows] == [("train", "running")])
        go.touch()
        wait_for_lines(program, "HOLDING", 1)
        stuck = debug(env, "interrupt train ranks(0) --timeout 1")
        assert stuck.returncode == 1, stuck.stdout + stuck.stderr
        assert "\ngil.py:18 hold  ranks[0] (1)\n" in stuck.stdout, stuck.stdout
        assert stuck.stdout.endswith(
            "train ranks[0] is in a C call (gil.py:18 hold) that holds the GIL; it stops when it returns; "
            "only `stacks` reads it until then\n"
        ), stuck.stdout
        assert "`peek` reads" not in stuck.stdout
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_two_shells_reading_a_rank_that_holds_the_gil_at_once_both_get_its_stack(env, tmp_path):
    """py-spy cannot read a process another py-spy holds stopped: the broker reads one process
    once at a time, so neither shell (nor the stall watcher) is told the read failed."""
    script = tmp_path / "gil.py"
    script.write_text(GIL)
    go = tmp_path / "go"
    program = Program(env, script, str(go), "3600", cwd=tmp_path)
    try:
        wait_for_all_rows(env, lambda rows: [(r.actor, r.state) for r in rows] == [("train", "running")])
        go.touch()
        wait_for_lines(program, "HOLDING", 1)
        conns = [BrokerConnection.open(settings_for(env)) for _ in range(4)]
        try:
            together = threading.Barrier(len(conns))

            def read(conn: BrokerConnection) -> wire.StacksResult:
                together.wait(timeout=30)
                return conn.stacks("train", "ranks(0)", wire.Threads.MAIN, 30)

            with ThreadPoolExecutor(len(conns)) as pool:
                results = list(pool.map(read, conns))
        finally:
            for conn in conns:
                conn.close()
        for result in results:
            assert result.missing == [] and [f.function for f in result.groups[0].threads[0].frames] == [
                "<module>",
                "hold",
            ], result
    finally:
        program.stop()


def test_the_frame_read_and_the_expression_run_in_it_change_nothing_in_process():
    import sys

    from monarch_pdb.rank.peek import choose_frame, evaluate

    def inner(step):
        loss = 0.5
        return sys._getframe(), [sys._getframe(1)]

    frame, outer = inner(3)
    frames = [frame, *outer]
    assert choose_frame(frames) is frame and choose_frame(frames, up=1) is outer[0]
    assert (
        choose_frame(frames, "inner") is frame
        and choose_frame(frames, "nosuch") == "*** no frame of nosuch on the rank's stack"
    )
    assert choose_frame(frames, up=-1) == "*** --up -1: a number of frames, not below 0", (
        "never a frame from the other end"
    )
    assert choose_frame(frames, up=2) == "*** --up 2: only 1 frame above inner"
    assert evaluate("[loss * s for s in range(step)]", frame) == "[0.0, 0.5, 1.0]", (
        "a comprehension sees the frame's locals"
    )
    assert evaluate("(loss := 7)", frame) == "7" and frame.f_locals["loss"] == 0.5
    assert evaluate("undefined", frame) == "*** NameError: name 'undefined' is not defined"
    assert evaluate("x = 1", frame).startswith("*** SyntaxError: invalid syntax"), (
        "a statement sent anyway is refused there too"
    )


@pytest.mark.timeout(90)
def test_samples_of_a_rank_nothing_can_read_stop_at_the_first_and_never_say_it_stood_still(env, tmp_path):
    """A rank whose C call holds the GIL and that its broker cannot read from outside (here: no
    time for py-spy) gives no stack: `stacks --samples` and `hang` take one sample, not three of
    nothing, and say that nothing was read instead of "no rank moved"."""
    script = tmp_path / "gil.py"
    script.write_text(GIL)
    go = tmp_path / "go"
    program = Program(dict(env, MONARCH_PDB_READ_TIMEOUT="0.001"), script, str(go), "3600", cwd=tmp_path)
    try:
        wait_for_all_rows(env, lambda rows: [(r.actor, r.state) for r in rows] == [("train", "running")])
        go.touch()
        wait_for_lines(program, "HOLDING", 1)
        sampled = debug(env, "stacks train --samples 3 --json")
        assert sampled.returncode == 1, sampled.stdout + sampled.stderr
        motion = json.loads(sampled.stdout)["motion"]
        assert (motion["samples"], motion["moved"], motion["still"]) == (1, [], []), motion
        said = debug(env, "stacks train --samples 3")
        assert said.stdout.endswith("train: no rank's stack was read, so nothing tells which ranks move\n"), said.stdout
        story = debug(env, "hang train")
        assert story.stdout.startswith("== train: no rank's stack was read:\n"), story.stdout
        assert "moved" not in story.stdout
    finally:
        program.stop()
