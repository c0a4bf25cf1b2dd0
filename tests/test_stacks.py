"""Seeing the whole job at once: every rank known from its start (`list --all`), merged stacks
of running ranks, interrupting ranks that hang without a breakpoint(), and the mesh picture."""

from __future__ import annotations

import json
import os
import re
import textwrap

import pytest
from programs import NAMED_RANKS, Program, debug, stop_line, wait_for_all_rows, wait_for_lines, wait_for_sessions
from shell_driver import ShellDriver

RUNPY = r"(?:<frozen runpy>|runpy\.py):\d+ _run_module_as_main"
"""The outermost frame of a worker process (runpy is frozen from Python 3.11)."""
BREAKPOINT_STOP = stop_line(12)
"""Where SHIPPED's breakpoint() stops."""

HANG = textwrap.dedent("""
    import signal
    import threading
    import time

    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host


    def all_reduce(loss):
        print("WAITING", current_rank().rank, flush=True)
        time.sleep(3600)


    def next_batch(loss):
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        print("WAITING", current_rank().rank, flush=True)
        threading.Event().wait()


    class Trainer(Actor):
        @endpoint
        def step(self):
            rank = current_rank().rank
            loss = float("nan") if rank == 5 else 1.0 + rank / 100
            if rank == 3:
                next_batch(loss)
            else:
                all_reduce(loss)


    if __name__ == "__main__":
        this_host().spawn_procs(per_host={"host": 4, "gpu": 4}).spawn("trainer", Trainer).step.call().get()
""")

STATES = textwrap.dedent("""
    import os
    import signal
    import sys
    import threading
    import time

    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host


    class Mixed(Actor):
        @endpoint
        def go(self):
            row, rank = current_rank().rank // 4, current_rank().rank
            if row == 0:
                breakpoint()
            elif row == 1:
                time.sleep(3600)
            elif row == 2:
                raise ValueError(f"rank {rank} fails")
            elif rank < 14:
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                sys.exit(0)


    if __name__ == "__main__":
        mesh = this_host().spawn_procs(per_host={"host": 4, "gpu": 4}).spawn("mixed", Mixed)
        open("go").read()  # a FIFO: blocks until the test has seen every rank running
        try:
            mesh.go.call().get()
        except Exception:
            pass
        threading.Event().wait()
""")

THREADS = textwrap.dedent("""
    import threading
    import time

    import monarch_pdb

    started = threading.Barrier(5)


    def wait_for_peers(event):
        started.wait()
        event.wait()


    def load_shard(event):
        started.wait()
        polls = 0
        while not event.wait(0.05):
            polls += 1


    def rank_main(rank, event):
        with monarch_pdb.endpoint_call("worker", rank, {"gpu": rank}):
            if rank == 3:
                load_shard(event)
            else:
                wait_for_peers(event)


    monarch_pdb.install()
    event = threading.Event()
    for rank in range(4):
        threading.Thread(target=rank_main, args=(rank, event), daemon=True).start()
    started.wait()
    print("WAITING", flush=True)
    time.sleep(3600)
""")

ASYNC = textwrap.dedent("""
    import asyncio

    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host


    async def gather_grads():
        await asyncio.Event().wait()


    async def fetch():
        await asyncio.sleep(3600)


    class Waiter(Actor):
        @endpoint
        async def step(self):
            print("WAITING", flush=True)
            if current_rank().rank == 3:
                await fetch()
            else:
                await gather_grads()


    if __name__ == "__main__":
        this_host().spawn_procs(per_host={"host": 2, "gpu": 2}).spawn("waiter", Waiter).step.call().get()
""")

POLLER = textwrap.dedent("""
    import asyncio

    from monarch_pdb.actor import Actor, endpoint, this_host


    async def poll_queue():
        polls = 0
        while True:
            await asyncio.sleep(0.05)
            polls += 1


    class Poller(Actor):
        @endpoint
        async def run(self):
            print("WAITING", flush=True)
            await poll_queue()


    if __name__ == "__main__":
        this_host().spawn_procs(per_host={"gpu": 2}).spawn("poller", Poller).run.call().get()
""")

SHIPPED = textwrap.dedent("""
    import ast
    import threading
    import time

    import monarch_pdb


    def load_checkpoint(path):
        step = len(path)
        breakpoint()
        return step / 0


    if __name__ == "__main__":
        monarch_pdb.install()
        monarch_pdb.set_identity(actor="train", rank=0)
        # Run this function as Monarch's procs run a script's code: shipped by value (by
        # cloudpickle), so compiled under the name <dynamic-code>, in globals naming the script.
        with open(__file__) as f:
            tree = ast.parse(f.read())
        functions = ast.Module([node for node in tree.body if isinstance(node, ast.FunctionDef)], type_ignores=[])
        shipped = {"__name__": "__main__", "__file__": __file__}
        exec(compile(functions, "<dynamic-code>", "exec"), shipped)
        threading.Thread(target=shipped["load_checkpoint"], args=("ckpt",), daemon=True).start()
        while True:
            time.sleep(0.05)
""")

PLAIN = textwrap.dedent("""
    import time

    import monarch_pdb

    monarch_pdb.install()
    monarch_pdb.set_identity(actor="train", rank=0)


    def read_socket(seconds):
        print("WAITING", flush=True)
        time.sleep(seconds)
        return seconds


    total = read_socket(3600)
""")


NAP = textwrap.dedent("""
    import time

    import monarch_pdb

    monarch_pdb.install()
    monarch_pdb.set_identity(actor="train", rank=0)


    def nap():
        print("WAITING", flush=True)
        time.sleep(3600)
        print("WOKE", flush=True)


    nap()
""")


def run_program(env, tmp_path, name: str, text: str, **extra: str) -> Program:
    script = tmp_path / name
    script.write_text(text)
    return Program(dict(env, **extra), script, cwd=tmp_path)


@pytest.mark.timeout(120)
def test_a_hang_merged_stacks_interrupt_and_numbers(env, tmp_path):
    program = run_program(env, tmp_path, "hang.py", HANG)
    try:
        wait_for_lines(program, "WAITING", 16)
        listed = debug(env, "list --all", "stacks trainer")
        assert listed.returncode == 0, listed.stderr
        table, stacks = listed.stdout.split("trainer ranks[0-15] (16): 2 distinct stacks\n")
        assert table.count("| running |") == 16
        lines = stacks.splitlines()
        assert lines[0] == "rank 3 is elsewhere: hang.py:17 next_batch"
        assert "├─ hang.py:28 step  ranks[0-2,4-15] (15)" in lines
        assert "│  hang.py:11 all_reduce  ranks[0-2,4-15] (15)" in lines
        assert "└─ hang.py:26 step  ranks[3] (1)" in lines
        assert "   hang.py:17 next_batch  ranks[3] (1)" in lines

        shell = ShellDriver(env)
        try:
            shell.wait_prompt()
            out = shell.command("interrupt trainer ranks(0,1,2,4,5,6,7,8,9,10,11,12,13,14,15)")
            assert out.strip() == "Interrupted 15 ranks: trainer ranks[0-2,4-15] (15)"
            listing = shell.command("list")
            assert listing.count("hang.all_reduce") == 15 and "| trainer    | 3 " not in listing
            paused = shell.command("stacks trainer")
            assert "│  hang.py:11 all_reduce  ranks[0-2,4-15] (15)\n└─ hang.py:26 step  ranks[3] (1)\n" in paused, (
                "a paused rank's stack ends where its program stopped, not inside the debugger"
            )
            numbers = shell.command("cast trainer ranks(:) p loss")
            assert numbers.splitlines()[-1] == (
                "numbers: count 15, min 1 (rank 0), max 1.15 (rank 15), mean 1.08, NaN/Inf 1 ranks[5], beyond 3 sd 0"
            )
            assert "trainer ranks[5] (1)\nnan\n" in numbers
            shell.command("attach trainer 9")
            backtrace = shell.command("bt")
            assert backtrace.rstrip().endswith("all_reduce()\n-> time.sleep(3600)")
            assert "-> all_reduce(loss)" in backtrace
            assert shell.command("p loss").strip() == "1.09"
            shell.command("detach")
            stuck = shell.command("interrupt trainer ranks(3) --timeout 1")
            assert stuck.startswith("Interrupted 0 ranks\ntrainer ranks[3] (1) did not stop within 1 s")
            assert "\nhang.py:17 next_batch  ranks[3] (1)\n" in stuck
            assert re.search(
                r"^trainer ranks\[3\] is in a C call \(threading\.py:\d+ wait\); it stops when it returns; "
                r"`peek` reads it now$",
                stuck,
                re.M,
            ), stuck
            assert shell.command("continue").strip() == "Continued 15 ranks: trainer ranks[0-2,4-15]"
            after = shell.command("stacks trainer --thread main ranks(host=0)")
            assert after.startswith(
                "trainer ranks[0-3] (4): 2 distinct stacks\nrank 3 is elsewhere: hang.py:17 next_batch\n"
            )
        finally:
            shell.kill()
    finally:
        program.stop()


@pytest.mark.timeout(120)
def test_mesh_picture_of_a_4x4_mesh_in_every_state(env, tmp_path):
    os.mkfifo(tmp_path / "go")
    program = run_program(
        env, tmp_path, "states.py", STATES, MONARCH_PDB_POST_MORTEM="always", MONARCH_PDB_HEARTBEAT="0.3"
    )
    try:
        wait_for_all_rows(env, lambda rows: [r.state for r in rows] == ["running"] * 16)
        os.close(os.open(tmp_path / "go", os.O_WRONLY | os.O_NONBLOCK))  # the program reads it: go
        wait_for_all_rows(
            env,
            lambda rows: (
                [r.state for r in rows]
                == ["breakpoint"] * 4 + ["running"] * 4 + ["post-mortem"] * 4 + ["lost"] * 2 + ["finished"] * 2
            ),
        )
        done = debug(env, "mesh", "mesh mixed")
        assert done.returncode == 0, done.stderr
        picture = (
            "mixed: host (rows) x gpu (columns)\n"
            "   0 1 2 3\n"
            "0  S S S S\n"
            "1  R R R R\n"
            "2  P P P P\n"
            "3  L L F F\n"
            "S stopped (4)  R running (4)  P post-mortem (4)  L lost (2)  F finished (2)  . no rank\n"
        )
        assert done.stdout == picture + picture
        doc = json.loads(debug(env, "mesh", flags=("--json",)).stdout)
        assert doc["dims"] == ["host", "gpu"] and doc["counts"] == {
            "breakpoint": 4,
            "running": 4,
            "post-mortem": 4,
            "lost": 2,
            "finished": 2,
        }
        terminal = ShellDriver(env)
        try:
            terminal.wait_prompt()
            coloured = terminal.command("mesh")
            assert "\x1b[33mS\x1b[0m" in terminal.raw and "3  L L F F" in coloured
        finally:
            terminal.kill()
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_mesh_wider_than_the_terminal_pages_its_columns(env, tmp_path, shell):
    script = tmp_path / "named.py"
    script.write_text(NAMED_RANKS)
    program = Program(env, script, ",".join(["gpus"] * 100), "-1", cwd=tmp_path)
    try:
        wait_for_sessions(env, 100, timeout=60)
        lines = shell().command("mesh gpus").splitlines()
        assert max(len(line) for line in lines) <= 220, "the terminal is 220 columns wide"
        first, second = lines.index("gpu=0-71:"), lines.index("gpu=72-99:")
        assert lines[first + 1] == "   " + " ".join(f"{c:2}" for c in range(72))
        assert lines[first + 2] == "0  " + " ".join([" S"] * 72)
        assert lines[second + 2] == "0  " + " ".join([" S"] * 28)
        assert lines[second + 3].startswith("S stopped (100)")
    finally:
        program.stop()


@pytest.mark.timeout(90)
@pytest.mark.each_python
def test_ranks_that_are_threads_stop_at_their_next_line_unless_blocked_for_good(env, tmp_path):
    program = run_program(env, tmp_path, "threads.py", THREADS)
    try:
        wait_for_lines(program, "WAITING", 1)
        wait_for_all_rows(env, lambda rows: len(rows) == 4)
        done = debug(
            env,
            "list --all",
            "stacks",
            "stacks worker --thread all --json",
            "interrupt worker ranks(3)",
            "cast worker ranks(3) bt",
            "continue",
            "interrupt worker ranks(1) --timeout 1",
        )
        assert done.returncode == 1, "an interrupt that stops nothing fails the script"
        assert done.stdout.count("| running |") == 4 and "| threads" not in done.stdout
        text = done.stdout
        assert "worker ranks[0-3] (4): 2 distinct stacks\nrank 3 is elsewhere: threads.py:18 load_shard\n" in text
        assert "threads.py:12 wait_for_peers  ranks[0-2] (3)" in text
        doc = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
        assert [g["ranks"] for g in doc["groups"]] == [[0, 1, 2], [3]]
        names = [t["name"] for t in doc["groups"][1]["threads"]]
        assert names[0].startswith("Thread-") and "MainThread" in names and not any("monarch-pdb" in n for n in names)
        assert doc["elsewhere"] == [{"ranks": [3], "where": "threads.py:18 load_shard"}]
        # A rank waiting on a lock in a loop stops in its own code once the wait returns, not in threading's.
        assert "Interrupted 1 rank: worker ranks[3] (1)\n" in text
        assert (
            f"\n> {tmp_path / 'threads.py'}(19)load_shard()\n-> polls += 1\nContinued 1 rank: worker ranks[3]" in text
        )
        # One blocked for good is named with its stack.
        assert "Interrupted 0 ranks\nworker ranks[1] (1) did not stop within 1 s" in text
        assert "\nthreads.py:12 wait_for_peers  ranks[1] (1)\n" in text.rsplit("did not stop", 1)[1]
    finally:
        program.stop()


@pytest.mark.timeout(90)
@pytest.mark.each_python
def test_a_rank_waiting_in_an_await_stops_in_its_coroutine(env, tmp_path):
    program = run_program(env, tmp_path, "poller.py", POLLER)
    try:
        wait_for_lines(program, "WAITING", 2)
        done = debug(env, "interrupt poller ranks(0)", "cast poller ranks(0) bt", "stacks poller", "continue")
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.startswith("Interrupted 1 rank: poller ranks[0] (1)\npoller ranks[0] (1)\n")
        assert f"\n> {tmp_path / 'poller.py'}(11)poll_queue()\n-> polls += 1\n" in done.stdout
        assert (
            "   poller.py:10 poll_queue  ranks[1] (1)\n" in done.stdout
            and "poller.py:11 poll_queue  ranks[0] (1)\n" in done.stdout
        )
    finally:
        program.stop()


@pytest.mark.timeout(90)
@pytest.mark.each_python
def test_a_thread_paused_in_shipped_code_is_the_ranks_and_named_by_its_script(env, tmp_path):
    program = run_program(env, tmp_path, "checkpoint.py", SHIPPED)
    script = str(tmp_path / "checkpoint.py")
    try:
        [row] = wait_for_sessions(env, 1)
        assert (row.function, row.filename, row.lineno) == ("checkpoint.load_checkpoint", script, BREAKPOINT_STOP)
        done = debug(env, "stacks train", "stacks train --json", "cast train ranks(0) bt", "continue")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "<dynamic-code>" not in done.stdout
        assert "train ranks[0] (1): 1 distinct stack\nthreading.py:" in done.stdout
        assert f"\ncheckpoint.py:{BREAKPOINT_STOP} load_checkpoint  ranks[0] (1)\n" in done.stdout, "the paused thread"
        doc = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
        assert doc["groups"][0]["threads"][0]["frames"][-1] == {
            "file": script,
            "line": BREAKPOINT_STOP,
            "function": "load_checkpoint",
        }
        assert f"\n> {script}({BREAKPOINT_STOP})load_checkpoint()\n" in done.stdout
        [row] = wait_for_sessions(env, 1, state="post-mortem")
        assert (row.filename, row.lineno) == (script, 12)
        where = debug(env, "cast train ranks(0) where")
        assert f"\n> {script}(12)load_checkpoint()\n" in where.stdout and "<dynamic-code>" not in where.stdout
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_plain_process_is_known_from_its_start_and_can_be_interrupted(env, tmp_path):
    program = run_program(env, tmp_path, "plain.py", PLAIN)
    try:
        wait_for_lines(program, "WAITING", 1)
        wait_for_all_rows(env, lambda rows: [(r.actor, r.rank) for r in rows] == [("train", 0)])
        done = debug(env, "interrupt train ranks(0)", "list", "cast train ranks(0) p seconds", "continue", "list --all")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Interrupted 1 rank: train ranks[0] (1)\n")
        assert "| train      | 0    | {}     |" in done.stdout and "plain.read_socket" in done.stdout
        assert "train ranks[0] (1)\n3600\n" in done.stdout
        assert re.search(r"\| running \|\n\+-+", done.stdout)
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_rank_interrupted_in_a_sleep_and_continued_is_told_and_listed_as_running_in_its_sleep(env, tmp_path, shell):
    program = run_program(env, tmp_path, "nap.py", NAP)
    try:
        wait_for_lines(program, "WAITING", 1)
        wait_for_all_rows(env, lambda rows: [(r.actor, r.state) for r in rows] == [("train", "running")])
        sh = shell()
        assert sh.command("interrupt train ranks(0)").strip() == "Interrupted 1 rank: train ranks[0] (1)"
        assert re.search(r"^Continued 1 rank: train ranks\[0\]", sh.command("continue"), re.M)
        sh.expect(r"train 0 is running again \(continued\)$")
        assert "finished" not in sh.text
        assert re.search(r"\| train +\| 0 +\|.*\| running \|$", sh.command("list --all"), re.M)
        assert "nap.py:12 nap  ranks[0] (1)" in sh.command("stacks train"), "Python resumes the sleep after the signal"
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_ranks_waiting_in_an_await_show_the_coroutines_they_await(env, tmp_path):
    program = run_program(env, tmp_path, "waiter.py", ASYNC)
    try:
        wait_for_lines(program, "WAITING", 4)
        done = debug(env, "stacks waiter")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[:2] == ["waiter ranks[0-3] (4): 2 distinct stacks", "rank 3 is elsewhere: waiter.py:12 fetch"]
        assert (
            "├─ waiter.py:22 step  ranks[0-2] (3)" in lines and "│  waiter.py:8 gather_grads  ranks[0-2] (3)" in lines
        )
        assert "└─ waiter.py:20 step  ranks[3] (1)" in lines and "   waiter.py:12 fetch  ranks[3] (1)" in lines
        assert not any("base_events.py" in line or "selectors.py" in line for line in lines), "no event loop frames"
    finally:
        program.stop()


@pytest.mark.timeout(90)
@pytest.mark.each_python
def test_the_trunk_every_rank_shares_is_one_line_and_full_shows_each_frame(example, shell):
    sh = shell()
    lines = sh.command("stacks debugee").splitlines()
    assert lines[0] == "debugee ranks[0-15] (16): 4 distinct stacks"
    trunk = re.fullmatch(rf"{RUNPY} … debugging\.py:31 to_debug \((\d+) frames\)  ranks\[0-15\] \(16\)", lines[1])
    assert trunk, "no stack holds most ranks: no line says who is elsewhere, the tree says it once"
    branches = [
        f"{connector}debugging.py:{stop_line(line)} _debugee_actor_internal  ranks[{ranks}] (4)"
        for connector, line, ranks in (
            ("├─ ", 11, "0,4,8,12"),
            ("├─ ", 15, "1,5,9,13"),
            ("├─ ", 19, "2,6,10,14"),
            ("└─ ", 23, "3,7,11,15"),
        )
    ]
    assert lines[2:] == branches, "the frames every rank shares, down to where they differ, are one line"

    full = sh.command("stacks debugee --full").splitlines()
    frames = full[1:-4]
    assert len(frames) == int(trunk.group(1)) and full[-4:] == branches
    assert re.match(RUNPY, frames[0]) and frames[-1] == "debugging.py:31 to_debug  ranks[0-15] (16)"
    assert any(line.startswith("worker.py:") for line in frames) and any("base_events.py" in line for line in frames)

    one = sh.command("stacks debugee ranks(5)").splitlines()
    assert re.fullmatch(rf"{RUNPY} … worker\.py:\d+ \w+ \(\d+ frames\)  ranks\[5\] \(1\)", one[1]), (
        "stacks that do not differ are folded down to the program's own code"
    )
    assert one[2:] == [
        "debugging.py:31 to_debug  ranks[5] (1)",
        f"debugging.py:{stop_line(15)} _debugee_actor_internal  ranks[5] (1)",
    ]

    doc = json.loads(sh.command("stacks debugee --json"))
    assert len(doc["common"]) == int(trunk.group(1)) and doc["elsewhere"] == []
    assert doc["common"][0]["function"] == "_run_module_as_main" and doc["common"][-1]["function"] == "to_debug"
    assert [[f["line"] for f in g["threads"][0]["frames"]] for g in doc["groups"]] == [
        [stop_line(line)] for line in (11, 15, 19, 23)
    ]
    whole = json.loads(sh.command("stacks debugee --json --full"))
    assert whole["common"] == [] and whole["groups"][0]["threads"][0]["frames"][: len(doc["common"])] == doc["common"]


@pytest.mark.each_python
@pytest.mark.timeout(120)
def test_a_post_mortem_ranks_stack_is_its_tracebacks_down_to_the_raise_with_its_locals(env, example):
    assert debug(env, "continue").returncode == 0
    wait_for_sessions(env, 4, state="post-mortem")
    shown = debug(env, "stacks debugee ranks(2,6,10,14) --locals")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "debugee ranks[2,6,10,14] (4): 1 distinct stack"
    assert re.fullmatch(rf"{RUNPY} … worker\.py:\d+ _awaited \(\d+ frames\)  ranks\[2,6,10,14\] \(4\)", lines[1]), (
        "the runtime's frames down to the one that awaited the endpoint, not those that caught its exception"
    )
    assert lines[2:] == [
        f"debugging.py:{line} {function}  ranks[2,6,10,14] (4)"
        for line, function in ((31, "to_debug"), (20, "_debugee_actor_internal"), (5, "_bad_rank"))
    ] + ["locals of debugging.py:5 _bad_rank  ranks[2,6,10,14] (4)", "  (locals) = none"]


@pytest.mark.timeout(90)
def test_ranks_that_are_process_ids_draw_a_row_each_not_the_ranks_between(env, tmp_path):
    script = tmp_path / "solo.py"
    script.write_text("breakpoint()\nprint('resumed')\n")
    programs = [Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace"), script, cwd=tmp_path) for _ in range(3)]
    try:
        pids = sorted(r.rank for r in wait_for_sessions(env, 3))
        assert pids == sorted(p.proc.pid for p in programs), "with no launcher, a rank is its process id"
        shown = debug(env, "mesh")
        assert shown.returncode == 0, shown.stderr
        pictures = shown.stdout.split("\n\n")
        assert len(pictures) == 3 and len(shown.stdout.splitlines()) == 3 * 4 + 2, shown.stdout
        for picture in pictures:
            pid = int(re.match(r"solo-(\d+):solo: ranks, 16 a row \(rank = row \+ column\)", picture).group(1))
            row = str(pid - pid % 16)
            assert picture.splitlines()[1:3] == [
                " " * (len(row) + 2) + " ".join(f"{c:2}" for c in range(16)),
                f"{row}  " + " ".join(f" {'S' if c == pid % 16 else '.'}" for c in range(16)),
            ]
    finally:
        for program in programs:
            program.stop()
