"""Where sessions come from and how they end: nested meshes, threads, plain processes,
post-mortem, quitting one rank, and a rank that dies."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import textwrap
import time

import pytest
from conftest import MARKER, processes_with_marker, wait_for_exit
from programs import (
    EXAMPLES,
    RUNS,
    Program,
    debug,
    free_port,
    run_debug,
    settings_for,
    start_broker,
    stop_broker,
    stop_line,
    stop_text,
    wait_for_all_rows,
    wait_for_lines,
    wait_for_sessions,
)
from shell_driver import ShellDriver

from monarch_pdb import discovery, wire
from monarch_pdb.client.connection import GONE_MEANWHILE, NOT_ANSWERING, RESTARTED, BrokerConnection

NESTED = textwrap.dedent("""
    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host


    class Inner(Actor):
        @endpoint
        def work(self):
            value = current_rank().rank * 10
            breakpoint()
            return value


    class Outer(Actor):
        @endpoint
        def run(self):
            procs = this_host().spawn_procs(per_host={"gpu": 2})
            return procs.spawn("inner", Inner).work.call().get().values()


    if __name__ == "__main__":
        outer = this_host().spawn_procs(per_host={"host": 1}).spawn("outer", Outer)
        print("RESULT", outer.run.call().get().values())
""")

RAISES = textwrap.dedent("""
    from monarch_pdb.actor import Actor, endpoint, this_host


    def explode():
        raise KeyError("no such key")


    class Fragile(Actor):
        @endpoint
        def go(self):
            explode()


    if __name__ == "__main__":
        this_host().spawn_procs(per_host={"gpu": 2}).spawn("fragile", Fragile).go.call().get()
""")

THREADS = textwrap.dedent("""
    import threading

    import monarch_pdb


    def rank_main(rank):
        with monarch_pdb.endpoint_call("many", rank, {"host": rank // 8, "gpu": rank % 8}):
            value = "even" if rank % 2 == 0 else "odd"
            breakpoint()
            return value


    monarch_pdb.install()
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("ALL DONE")
""")

INSTALLED_THREADS = textwrap.dedent("""
    import threading

    import monarch_pdb


    def work(n):
        value = f"worker {n}"
        breakpoint()
        return value


    monarch_pdb.install()
    threads = [threading.Thread(target=work, args=(n,), name=f"worker-{n}") for n in (1, 2)]
    for t in threads:
        t.start()
    value = "main"
    breakpoint()
    for t in threads:
        t.join()
    print("ALL DONE")
""")

LOADER = textwrap.dedent("""
    import sys
    import threading


    def load():
        batch = "the loader's"
        breakpoint()


    loader = threading.Thread(target=load, name="loader")
    loader.start()
    with open(sys.argv[1]) as go:  # the test lets the main thread go on once the loader has stopped
        go.read()
    loss = 0.5
    breakpoint()
    loader.join()
    print("ALL DONE")
""")
"""A rank (RANK=5) whose loader thread stops at a breakpoint before its main thread does."""

QUITS = textwrap.dedent("""
    import sys

    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host


    class Worker(Actor):
        @endpoint
        def step(self, n):
            if n == 0:
                breakpoint()
                return n
            print(f"STEP {n} rank {current_rank().rank}", flush=True)
            with open(sys.argv[1]) as fifo:  # until the test lets the call end
                fifo.read()
            return n


    if __name__ == "__main__":
        workers = this_host().spawn_procs(per_host={"gpu": 2}).spawn("worker", Worker)
        try:
            workers.step.call(0).get()
        except Exception as error:
            print("FIRST CALL FAILED", type(error).__name__, flush=True)
        print("SECOND CALL", workers.step.call(1).get().values(), flush=True)
""")

PLAIN = textwrap.dedent("""
    def train_step(step):
        loss = 1.0 / (step + 1)
        breakpoint()
        return loss

    print("LOSS", train_step(3))
""")
PLAIN_STOP_TEXT = stop_text("return loss", "breakpoint()")


def run_train(env, tmp_path, rank: int, **extra):
    """PLAIN as any process outside a mesh runs: PYTHONBREAKPOINT, and a launcher's RANK."""
    return run_script(
        env, tmp_path, "train.py", PLAIN, PYTHONBREAKPOINT="monarch_pdb.set_trace", RANK=str(rank), **extra
    )


def run_script(env, tmp_path, name, text, *args, **extra):
    script = tmp_path / name
    script.write_text(text)
    return Program(dict(env, **extra), script, *args, cwd=tmp_path)


@pytest.mark.timeout(90)
def test_a_rank_given_the_secret_file_and_no_upstream_starts_its_hosts_broker_with_that_secret(env, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("one-secret-for-every-host")
    secret.chmod(0o600)
    given = dict(
        env,
        MONARCH_PDB_SECRET_FILE=str(secret),
        MONARCH_DEBUG_SERVER_PORT=str(free_port()),
        MONARCH_PDB_CONNECT_TIMEOUT="30",
    )  # a slow start of its broker is no failure here
    program = run_train(given, tmp_path, 0)
    try:
        assert [(r.actor, r.rank) for r in wait_for_sessions(given, 1, timeout=30)] == [("train", 0)]
        assert discovery.read_connection_file(settings_for(given)).secret == "one-secret-for-every-host"
        assert run_debug(given, "-c", "continue").returncode == 0
        code, output = program.finish()
        assert code == 0 and "LOSS 0.25" in output
        assert "no debug broker answers" not in output, output
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_breakpoints_in_a_mesh_spawned_by_an_actor(env, tmp_path, shell):
    program = run_script(env, tmp_path, "nested.py", NESTED)
    try:
        rows = wait_for_sessions(env, 2)
        assert [(r.actor, r.rank, r.coords) for r in rows] == [("inner", 0, {"gpu": 0}), ("inner", 1, {"gpu": 1})]
        sh = shell()
        assert sh.command("cast inner ranks(:) p value") == (
            "inner ranks[0] (1)\n0\ninner ranks[1] (1)\n10\n"
            "numbers: count 2, min 0 (rank 0), max 10 (rank 1), mean 5, NaN/Inf 0, beyond 3 sd 0\n"
        )
        assert sh.command("continue").strip() == "Continued 2 ranks: inner ranks[0,1]"
        code, output = program.finish()
        assert code == 0 and "RESULT [[0, 10]]" in output
    finally:
        program.stop()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("policy", ["always", "after-breakpoint"])
def test_post_mortem_without_a_breakpoint_only_when_asked(env, tmp_path, shell, policy):
    program = run_script(env, tmp_path, "fragile.py", RAISES, MONARCH_PDB_POST_MORTEM=policy)
    try:
        if policy == "after-breakpoint":
            code, output = program.finish()
            assert code != 0 and "KeyError: 'no such key'" in output
            return
        rows = wait_for_sessions(env, 2, state="post-mortem")
        assert {r.function for r in rows} == {"fragile.explode"}
        sh = shell()
        assert sh.command("cast fragile ranks(0) up").count("go()") == 1
        assert sh.command("continue").strip() == "Continued 2 ranks: fragile ranks[0,1]"
        code, output = program.finish()
        assert code != 0 and "ranks 0,1: KeyError: 'no such key'" in output
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_quit_in_one_rank_ends_its_call_and_leaves_the_others(env, shell):
    program = Program(env, EXAMPLES / "debugging.py")
    try:
        wait_for_sessions(env, 16)
        sh = shell()
        out = sh.command("cast debugee ranks(0) q")
        assert out == "debugee ranks[0] (1)\n(quit: its endpoint call ends with BdbQuit)\n"
        assert sh.command("list").count("| debugee ") == 15
        sh.command("continue")
        sh.command("continue")
        code, output = program.finish()
        assert code != 0 and "rank" in output and "BdbQuit" in output
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_list_larger_than_a_message_comes_whole_in_parts(env, tmp_path):
    small = dict(env, MONARCH_PDB_MAX_MESSAGE="8192")
    program = run_script(small, tmp_path, "threads.py", THREADS)
    try:
        wait_for_sessions(small, 64)
        done = run_debug(small, "--json", "-c", "list", "-c", "list --all", "-c", "continue")
        assert done.returncode == 0, done.stderr
        paused, every, continued = (json.loads(line) for line in done.stdout.splitlines())
        assert sorted(row["rank"] for row in paused) == list(range(64)), "64 rows of about 200 bytes, 8 KB a message"
        assert sorted(row["rank"] for row in every if row["state"] == "breakpoint") == list(range(64))
        assert continued["count"] == 64
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_list_past_the_rows_a_shell_shows_is_answered_as_groups_by_the_broker(env, tmp_path):
    program = run_script(env, tmp_path, "threads.py", THREADS)
    try:
        rows = wait_for_sessions(env, 64)
        conn = BrokerConnection.open(settings_for(env))
        try:
            few = conn.request(wire.ListSessions(groups_above=64), wire.SessionList, wire.SessionGroups)
            assert isinstance(few, wire.SessionList) and [r.rank for r in few.rows] == list(range(64))
            for ask in (wire.ListSessions(groups_above=63), wire.ListAll(groups_above=0)):
                many = conn.request(ask, wire.SessionList, wire.SessionGroups)
                assert many == wire.SessionGroups(
                    groups=[
                        wire.SessionGroup(
                            rows[0].job,
                            "many",
                            "threads.rank_main",
                            rows[0].lineno,
                            "breakpoint",
                            ranks="0-63",
                            count=64,
                            coords={"host": "0-7", "gpu": "0-7"},
                            hosts=[socket.gethostname()],
                        )
                    ]
                )
            assert isinstance(conn.request(wire.ListAll(), wire.SessionList), wire.SessionList), "rows unless asked"
        finally:
            conn.close()
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_64_sessions_in_one_process_group_into_two_blocks(env, tmp_path, shell):
    program = run_script(env, tmp_path, "threads.py", THREADS)
    try:
        wait_for_sessions(env, 64)
        sh = shell()
        out = sh.command("cast many ranks(:) p value")
        evens = ",".join(str(r) for r in range(0, 64, 2))
        odds = ",".join(str(r) for r in range(1, 64, 2))
        assert out in (f"many ranks[{evens}] (32)\n'even'\nmany ranks[{odds}] (32)\n'odd'\n",)
        sh.command("set cast_output raw")
        raw = sh.command("cast many ranks(host=7, gpu=::4) p value")
        assert raw == "[56] 'even'\n[60] 'even'\n"
        sh.command("continue")
        code, output = program.finish()
        assert code == 0 and "ALL DONE" in output
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_each_paused_thread_of_a_process_is_listed_and_reached_on_its_own(env, tmp_path):
    program = run_script(env, tmp_path, "threads.py", INSTALLED_THREADS)
    try:
        rows = wait_for_sessions(env, 3)
        pid = program.proc.pid
        main, *workers = sorted(rows, key=lambda r: r.instance)
        assert (main.rank, main.instance, main.function) == (pid, "", "threads.<module>")
        assert [w.instance for w in workers] == ["thread worker-1", "thread worker-2"]
        assert len({r.rank for r in rows}) == 3 and all(r.pid == pid for r in rows)
        ranks = [r.rank for r in (main, *workers)]
        listing = run_debug(env, "-c", "list")
        assert [line.split("|")[7].strip() for line in listing.stdout.splitlines() if "| threads " in line] == [
            "",
            "thread worker-1",
            "thread worker-2",
        ], listing.stdout
        done = run_debug(
            env,
            "--json",
            "-c",
            "cast threads ranks(:, threads) p value",
            "-c",
            f"attach threads {ranks[2]}",
            "-c",
            "p value",
            "-c",
            "c",
            "-c",
            f"cast threads ranks({ranks[1]}) c",
            "-c",
            "continue",
        )
        assert done.returncode == 0, done.stderr
        cast, attached, answer, *_, released, continued = [json.loads(line) for line in done.stdout.splitlines()]
        assert [(g["ranks"], g["output"]) for g in cast["groups"]] == [
            ([rank], f"{value!r}\n") for rank, value in zip(ranks, ["main", "worker 1", "worker 2"])
        ]
        assert attached["attached"]["rank"] == ranks[2] and answer["output"] == "'worker 2'\n"
        assert [(g["ranks"], g["outcome"]) for g in released["groups"]] == [([ranks[1]], "continued")]
        assert continued["continued"] == [{"actor": "threads", "ranks": [pid]}]
        code, output = program.finish()
        assert code == 0 and "ALL DONE" in output
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_the_rank_is_its_main_thread_whichever_thread_stops_first_and_a_slice_picks_ranks_only(env, tmp_path):
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    program = run_script(
        env, tmp_path, "train.py", LOADER, str(fifo), PYTHONBREAKPOINT="monarch_pdb.set_trace", RANK="5"
    )
    try:
        [loader] = wait_for_sessions(env, 1)
        assert loader.instance == "thread loader" and loader.rank != 5
        refused = run_debug(env, "-c", "cast train ranks(:) p batch")
        assert refused.returncode != 0 and refused.stderr.strip().endswith(
            f"ranks(:) matches no rank of train with a session: those are other threads' (ranks[{loader.rank}]); "
            "ranks(:, threads) picks them"
        ), refused.stderr
        with open(fifo, "w") as go:
            go.write("go")
        rows = wait_for_sessions(env, 2)
        assert sorted((r.rank, r.instance) for r in rows) == [(5, ""), (loader.rank, "thread loader")]
        done = run_debug(
            env,
            "-c",
            "cast train ranks(:) p loss",
            "-c",
            "cast train ranks(4:8) p loss",
            "-c",
            "cast train ranks(:, threads) p threading.current_thread().name",
            "-c",
            f"cast train ranks({loader.rank}) p batch",
            "-c",
            "continue",
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("Continued")[0] == (
            "train ranks[5] (1)\n0.5\n" * 2
            + f"train ranks[5] (1)\n'MainThread'\ntrain ranks[{loader.rank}] (1)\n'loader'\n"
            + f'train ranks[{loader.rank}] (1)\n"the loader\'s"\n'
        )
        code, output = program.finish()
        assert code == 0 and "ALL DONE" in output
    finally:
        program.stop()


def states(env: dict[str, str]) -> dict[int, str]:
    done = run_debug(env, "--json", "-c", "list --all")
    assert done.returncode == 0, done.stderr
    return {row["rank"]: row["state"] for row in json.loads(done.stdout)}


@pytest.mark.timeout(90)
@pytest.mark.each_python
def test_a_rank_in_post_mortem_stays_in_post_mortem_after_lines_cast_or_typed(env, tmp_path, shell):
    program = run_script(env, tmp_path, "fragile.py", RAISES, MONARCH_PDB_POST_MORTEM="always")
    try:
        wait_for_sessions(env, 2, state="post-mortem")
        sh = shell()
        assert sh.command("cast fragile ranks(0) p 1 + 1").endswith("\n2\n")
        sh.command("attach fragile 1")
        assert sh.command("p 3 + 3").strip() == "6"
        sh.command("detach")
        assert states(env) == {0: "post-mortem", 1: "post-mortem"}
        assert "P post-mortem (2)" in run_debug(env, "-c", "mesh fragile").stdout
        assert sh.command("continue").strip() == "Continued 2 ranks: fragile ranks[0,1]"
        assert program.finish()[0] != 0
    finally:
        program.stop()


FINISHES = textwrap.dedent("""
    import sys

    from monarch_pdb.actor import Actor, endpoint, this_host


    class Worker(Actor):
        @endpoint
        def step(self):
            breakpoint()
            return 1


    if __name__ == "__main__":
        workers = this_host().spawn_procs(per_host={"gpu": 2}).spawn("worker", Worker)
        try:
            workers.step.call().get()
        except Exception as error:
            print("CALL FAILED", type(error).__name__, flush=True)
        print("CALL DONE", flush=True)
        with open(sys.argv[1]) as fifo:  # until the test lets the program end
            fifo.read()
""")


@pytest.mark.timeout(90)
def test_ranks_whose_calls_ended_are_listed_so_after_a_broker_restart(env, tmp_path):
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    program = run_script(env, tmp_path, "finishes.py", FINISHES, str(fifo))
    try:
        wait_for_sessions(env, 2)
        assert run_debug(env, "-c", "attach worker 0", "-c", "q").returncode == 0
        assert run_debug(env, "-c", "continue").returncode == 0
        wait_for_lines(program, "CALL DONE", 1)
        assert states(env) == {0: "quit", 1: "finished"}
        [(pid, _)] = [(p, c) for p, c in processes_with_marker(env[MARKER]) if "monarch_pdb.broker" in c]
        os.kill(pid, signal.SIGKILL)
        wait_for_exit([pid], timeout=10)
        rows = wait_for_all_rows(env, lambda rows: len(rows) == 2)
        assert {row.rank: row.state for row in rows} == {0: "quit", 1: "finished"}
        with open(fifo, "w") as release:
            release.write("go")
        assert program.finish()[0] == 0
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_rank_that_quit_is_listed_as_quit_until_its_next_call(env, tmp_path):
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    program = run_script(env, tmp_path, "quits.py", QUITS, str(fifo))
    try:
        wait_for_sessions(env, 2)
        assert run_debug(env, "-c", "attach worker 0", "-c", "q").returncode == 0
        assert states(env) == {0: "quit", 1: "breakpoint"}
        assert "Q quit (1)" in run_debug(env, "-c", "mesh worker").stdout
        assert run_debug(env, "-c", "continue").returncode == 0
        assert program.proc.stdout.readline() == "FIRST CALL FAILED ActorError\n"
        assert sorted(program.proc.stdout.readline() for _ in range(2)) == ["STEP 1 rank 0\n", "STEP 1 rank 1\n"]
        conn = BrokerConnection.open(settings_for(env))
        try:
            deadline = time.monotonic() + 10  # presence makes no event: ask until the broker has it
            while conn.request(wire.ListAll(), wire.SessionList).rows[0].state != "running":
                assert time.monotonic() < deadline, "rank 0 runs its next call, yet is listed as quit"
        finally:
            conn.close()
        with open(fifo, "w") as release:
            release.write("go")
        code, output = program.finish()
        assert code == 0 and "SECOND CALL [1, 1]" in output
    finally:
        program.stop()


@pytest.mark.timeout(90)
@pytest.mark.each_python
def test_any_process_with_pythonbreakpoint_and_launcher_identity(env, tmp_path, shell):
    program = run_train(env, tmp_path, 3, LOCAL_RANK="1", GROUP_RANK="0", WORLD_SIZE="4")
    try:
        [row] = wait_for_sessions(env, 1)
        assert (row.actor, row.rank, row.coords, row.function) == (
            "train",
            3,
            {"host": 0, "gpu": 1},
            "train.train_step",
        )
        sh = shell()
        assert PLAIN_STOP_TEXT in sh.command("attach train 3")
        assert sh.command("p loss").strip() == "0.25"
        assert "Detached from debug session for train 3" in sh.command("c")
        code, output = program.finish()
        assert code == 0 and "LOSS 0.25" in output
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_rank_killed_while_attached_is_reported_lost(env, tmp_path, shell):
    program = run_train(env, tmp_path, 5)
    try:
        [row] = wait_for_sessions(env, 1)
        sh = shell()
        sh.command("attach train 5")
        os.kill(row.pid, signal.SIGKILL)
        sh.expect(
            r"train 5 was lost: its process or its connection is gone\nDetaching from debug session for train 5 .*\n"
            r"Detached from debug session for train 5 .*\nmonarch_dbg> $",
            timeout=10,
        )
        assert sh.command("list").strip() == "No active breakpoints."
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_running_ranks_whose_processes_die_are_announced_lost_in_one_line(env, tmp_path, shell):
    programs = [
        run_script(env, tmp_path, "train.py", RUNS, RANK=str(rank), WORLD_SIZE="4", MONARCH_PDB_JOB="train")
        for rank in range(4)
    ]
    try:
        for program in programs:
            wait_for_lines(program, "RUNNING", 1)
        wait_for_all_rows(env, lambda rows: [(r.rank, r.state) for r in rows] == [(r, "running") for r in range(4)])
        sh = shell()
        for program in programs:
            os.kill(program.proc.pid, signal.SIGKILL)
        sh.expect(r"train ranks\[0-3\] \(4\) were lost \(their processes or connections are gone\)\n", timeout=20)
        assert "was lost" not in sh.text
        assert [r.state for r in wait_for_all_rows(env, lambda rows: len(rows) == 4)] == ["lost"] * 4
    finally:
        for program in programs:
            program.stop()


@pytest.mark.timeout(90)
def test_attaching_again_replays_a_screenful_and_says_how_to_see_the_rest(env, tmp_path):
    program = run_train(env, tmp_path, 0)
    sh = None
    try:
        wait_for_sessions(env, 1)  # the stop is past, so its event is not typed over
        sh = ShellDriver(dict(env, MONARCH_PDB_PAGER=""))
        sh.wait_prompt()
        sh.command("attach train 0")
        assert "step 2999" in sh.command('for n in range(3000): print(f"step {n}")', timeout=60)
        sh.command("detach")
        again = sh.command("attach train 0").splitlines()
        assert len(again) < 50, "the terminal is 50 lines high"
        assert again[2].startswith("(2,9") and again[2].endswith(
            " characters, not shown; 'detach', then 'attach train 0 --full' shows them)"
        )
        assert "step 2999" in again and "step 0" not in again
        sh.command("detach")
        whole = sh.command("attach train 0 --full", timeout=60).splitlines()
        assert [line for line in whole if line.startswith("step ")] == [f"step {n}" for n in range(3000)]
    finally:
        if sh is not None:
            sh.kill()
        program.stop()


@pytest.mark.timeout(90)
def test_a_crashed_process_that_only_stopped_at_a_breakpoint_stays_listed_as_lost(env, tmp_path):
    job = dict(env, MONARCH_PDB_JOB="run", MONARCH_PDB_HEARTBEAT="0.3", GROUP_RANK="0", WORLD_SIZE="2")
    programs = [run_train(job, tmp_path, rank, LOCAL_RANK=str(rank)) for rank in (0, 1)]
    try:
        rows = wait_for_sessions(env, 2)
        os.kill(next(r.pid for r in rows if r.rank == 0), signal.SIGKILL)
        wait_for_all_rows(
            env, lambda rows: [(r.rank, r.state) for r in rows] == [(0, "lost"), (1, "breakpoint")], timeout=20
        )
        done = debug(env, "mesh train")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[2] == "0  L S"
    finally:
        for program in programs:
            program.stop()


@pytest.mark.timeout(60)
@pytest.mark.each_python
def test_an_event_does_not_break_the_line_being_typed(env, tmp_path, broker, shell):
    sh = shell()
    sh.child.send("li")
    program = run_train(env, tmp_path, 2)
    try:
        sh.expect(rf"train 2 stopped at train\.py:{stop_line(5)}")
        assert sh.command("st", shown="list").count("| train ") == 1
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_detach_while_the_rank_runs_leaves_it_running(env, tmp_path, shell):
    program = run_train(env, tmp_path, 4)
    try:
        wait_for_sessions(env, 1)
        sh = shell()
        sh.command("attach train 4")
        sh.child.sendline("!import threading; threading.Event().wait(60)")
        sh.expect(r"\(train 4 \(.+\) is running; type 'detach' to leave it running\)")
        sh.child.sendline("detach")
        sh.expect(r"Detached from debug session for train 4")
        sh.wait_prompt()
        assert sh.prompt == "monarch_dbg>"
        assert sh.command("list").strip() == "No active breakpoints."
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_a_secret_from_the_environment_reaches_a_broker_by_address_alone(env, tmp_path):
    secret_env = dict(env, MONARCH_PDB_SECRET="s3cret-for-test")
    broker, first = start_broker(secret_env)
    try:
        port = re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", first).group(1)
        elsewhere = dict(secret_env, MONARCH_DEBUG_SERVER_PORT=port, MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "other"))
        program = run_train(elsewhere, tmp_path, 1)
        try:
            wait_for_sessions(elsewhere, 1)
            sh = ShellDriver(elsewhere)
            try:
                sh.wait_prompt()
                assert sh.command("list").count("| train ") == 1
            finally:
                sh.kill()
        finally:
            program.stop()
    finally:
        stop_broker(broker)


@pytest.mark.timeout(90)
def test_torchrun_jobs_named_by_their_run_id_keep_the_list_readable_and_jobs_names_them_whole(env, tmp_path, shell):
    runs = ["6a76c0f1-2d34-4b5e-9f7a-0123456789ab", "9c1de2f3-4a5b-4c6d-8e7f-0123456789ab"]
    programs = [run_train(env, tmp_path, 0, TORCHELASTIC_RUN_ID=run) for run in runs]
    try:
        wait_for_sessions(env, 2)
        sh = shell()
        listing = sh.command("list")
        assert "| train-torchrun-6a76c0... | train " in listing and "| train-torchrun-9c1de2... | train " in listing
        jobs = sh.command("jobs")
        assert all(f"| train-torchrun-{run} |" in jobs for run in runs), jobs
    finally:
        for program in programs:
            program.stop()


@pytest.mark.timeout(90)
def test_two_jobs_share_one_broker_and_are_told_apart(env, tmp_path, shell):
    first = run_train(env, tmp_path, 0, MONARCH_PDB_JOB="alpha")
    second = run_train(env, tmp_path, 0, MONARCH_PDB_JOB="beta")
    try:
        wait_for_sessions(env, 2)
        sh = shell()
        listing = sh.command("list")
        assert "| Job " in listing and "| alpha " in listing and "| beta " in listing
        jobs = sh.command("jobs")
        assert re.search(r"\| alpha +\| 1 +\| 1/1 +\|", jobs) and re.search(r"\| beta +\| 1 +\| 1/1 +\|", jobs)
        ambiguous = "Error processing command: actor train exists in 2 jobs (alpha, beta); name it as job:train"
        assert sh.command("attach train 0").strip() == ambiguous
        assert sh.command("cast train ranks(0) p 1").strip() == ambiguous
        assert sh.command("cast beta:train ranks(0) p loss") == "train ranks[0] (1)\n0.25\n"
        assert "Attached to debug session for train 0" in sh.command("attach alpha:train 0")
        sh.command("c")
        assert first.finish()[0] == 0
        assert sh.command("list").count("| train ") == 1 and "| Job " not in sh.command("list")
        sh.command("continue")
        assert second.finish()[0] == 0
    finally:
        first.stop()
        second.stop()


@pytest.mark.timeout(90)
def test_one_holder_per_session_force_takes_over_and_a_killed_shell_lets_go(env, tmp_path, shell):
    program = run_train(env, tmp_path, 0)
    try:
        wait_for_sessions(env, 1)
        first, second = shell(), shell()
        first.command("attach train 0")
        refused = second.command("attach train 0").strip()
        assert re.fullmatch(
            r"Error processing command: train 0 is attached in another shell \(\w+@.+ pid \d+\); "
            r"use 'attach --force' to take it over",
            refused,
        )
        taking = second.command("attach train 0 --force")
        assert re.match(
            r"Attached to debug session for train 0 \(.+\), taken over from another shell "
            r"\(\w+@.+ pid \d+\)\n",
            taking,
        ), taking
        first.expect(
            r"another shell \(\w+@.+ pid \d+\) took over train 0 \(attach --force\)\n"
            r"Detaching from debug session for train 0 .*\nDetached from debug session for train 0 .*\n"
            r"monarch_dbg> $",
            timeout=10,
        )
        assert first.command("jobs").startswith("+"), "the shell that lost the rank is back at its own prompt"
        second.child.send("c")
        second.expect("c")
        first.command("attach train 0 --force")
        second.expect(r"another shell \(.+\) took over train 0 \(attach --force\)\n(.*\n){2}monarch_dbg> c$")
        out = second.command("", shown="c")
        assert re.fullmatch(
            r"Error processing command: not sent: 'c' was typed for train 0 \(.+\), which another "
            r"shell took over\n",
            out,
        ), "a line begun for the rank is never a top-level continue"
        first.expect_absent("was taken over by", 1.5)
        second.expect_absent("was taken over by", 0)
        assert first.command("p loss").strip() == "0.25"

        third = shell()
        first.kill()
        third.expect(r"train 0 is free again \(the shell attached to it went away\)", timeout=10)
        out = third.command("attach train 0")
        assert "<last pdb output for train 0 follows>\n0.25\n" in out
        third.child.send("detach")
        second.command("cast train ranks(0) c")
        third.expect(r"Detached from debug session for train 0 .*\nmonarch_dbg> detach$", timeout=10)
        third.command("", shown="detach")
        assert "Error" not in third.text, "a detach that meets its session's end has nothing to say"
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_a_new_shell_attaches_at_once_where_a_killed_shell_held_the_rank(env, tmp_path, shell):
    """No --force, and no waiting for the broker to miss the killed shell's heartbeats (made
    too long here to be what frees the rank): the holder's process is gone from this host."""
    env["MONARCH_PDB_HEARTBEAT"] = "60"
    program = run_train(env, tmp_path, 0)
    try:
        wait_for_sessions(env, 1)
        first = shell()
        assert "Attached to debug session for train 0" in first.command("attach train 0")
        os.kill(first.child.pid, signal.SIGKILL)
        first.child.wait()
        second = shell()
        out = second.command("attach train 0")
        assert "Attached to debug session for train 0" in out, out
        assert "free again" not in second.text, "freed by the heartbeats, not by the holder being gone"
        assert second.command("p loss").strip() == "0.25"
    finally:
        program.stop()


@pytest.mark.timeout(90)
@pytest.mark.each_python
def test_paused_ranks_and_shells_survive_a_broker_restart(env, tmp_path, shell):
    program = run_train(env, tmp_path, 6)
    try:
        wait_for_sessions(env, 1)
        sh = shell()
        assert sh.command("list").count("| train ") == 1
        [(pid, _)] = [(p, c) for p, c in processes_with_marker(env[MARKER]) if "monarch_pdb.broker" in c]
        os.kill(pid, signal.SIGKILL)
        wait_for_exit([pid], timeout=10)
        wait_for_sessions(env, 1, timeout=30)
        assert sh.command("list").count("| train ") == 1, "the shell found the new broker by itself"
        assert PLAIN_STOP_TEXT in sh.command("attach train 6")
        assert sh.command("p loss").strip() == "0.25"
        sh.command("c")
        assert program.finish()[0] == 0
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_a_request_sent_to_a_broker_that_just_died_is_answered_by_the_next(env, tmp_path):
    program = run_train(env, tmp_path, 6)
    try:
        wait_for_sessions(env, 1)
        conn = BrokerConnection.open(settings_for(env))
        try:
            [(pid, _)] = [(p, c) for p, c in processes_with_marker(env[MARKER]) if "monarch_pdb.broker" in c]
            os.kill(pid, signal.SIGKILL)
            wait_for_exit([pid], timeout=10)
            asked = conn.request(wire.ListAll(), wire.SessionList, timeout=60)  # sent before the link can tell
            assert [(r.actor, r.rank) for r in asked.rows] in ([], [("train", 6)]), "as the rank has joined it or not"
            rows = conn.wait_for_rows(lambda rows: len(rows) == 1, timeout=30)
            assert [(r.actor, r.rank) for r in rows] == [("train", 6)]
        finally:
            conn.close()
    finally:
        program.stop()


WAITS = textwrap.dedent("""
    import sys

    import monarch_pdb

    monarch_pdb.install()
    print("RUNNING", flush=True)
    with open(sys.argv[1]) as go:  # until the test lets it go on
        go.read()
    loss = 0.5
    breakpoint()
""")


@pytest.mark.timeout(90)
def test_a_job_that_just_died_leaves_its_actor_name_to_the_job_that_runs(env, tmp_path, shell):
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    first = run_train(env, tmp_path, 6, MONARCH_PDB_JOB="first")
    second = None
    try:
        wait_for_sessions(env, 1)
        second = run_script(
            env, tmp_path, "waits.py", WAITS, str(fifo), MONARCH_PDB_JOB="second", MONARCH_PDB_ACTOR="train", RANK="0"
        )
        wait_for_lines(second, "RUNNING", 1)
        wait_for_all_rows(env, lambda rows: len(rows) == 2)
        sh = shell()
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        assert re.search(r"waits\.py:\d+ <module>  ranks\[0\]", sh.command("stacks train")), "the live job's rank"
        sh.child.sendline("wait train 1")
        sh.expect_absent(r"ranks of train stopped", 1.0)
        with open(fifo, "w") as go:
            go.write("go")
        sh.expect(r"1 ranks of train stopped")
        sh.wait_prompt()
        assert "Continued 1 rank" in sh.command("continue")
        assert second.finish()[0] == 0
    finally:
        first.stop()
        if second is not None:
            second.stop()


@pytest.mark.timeout(90)
def test_the_embedded_broker_outlives_the_job_that_started_it(env, tmp_path, shell):
    first = run_train(env, tmp_path, 0, MONARCH_PDB_JOB="first")
    second = None
    try:
        wait_for_sessions(env, 1)
        second = run_train(env, tmp_path, 1, MONARCH_PDB_JOB="second")
        wait_for_sessions(env, 2)
        sh = shell()
        sh.command("cast first:train ranks(0) c")
        assert first.finish()[0] == 0
        assert "| second " in sh.command("jobs") and "| first " not in sh.command("jobs")
        assert "Attached to debug session for train 1" in sh.command("attach second:train 1")
        sh.command("c")
        assert second.finish()[0] == 0
    finally:
        first.stop()
        if second is not None:
            second.stop()


@pytest.mark.timeout(120)
def test_a_broker_killed_and_restarted_on_its_port_loses_nothing(env, shell):
    # The ranks wait for a broker longer than the restart can take on a loaded machine, so
    # that none starts one of its own on the port first.
    env = dict(env, MONARCH_DEBUG_SERVER_PORT=str(free_port()), MONARCH_PDB_CONNECT_TIMEOUT="60")
    broker, _ = start_broker(env)
    program = Program(env, EXAMPLES / "debugging.py")
    sh = ShellDriver(env)
    try:
        before = wait_for_sessions(env, 16)
        sh.wait_prompt()
        sh.command("attach debugee 13")
        broker.kill()
        broker.wait()
        broker, _ = start_broker(env)
        after = wait_for_sessions(env, 16, timeout=5)
        assert [(r.rank, r.lineno, r.state) for r in after] == [(r.rank, r.lineno, r.state) for r in before]
        out = sh.command("p rank")
        assert "(the broker restarted; attached again to debugee 13" in out and out.endswith("13\n")
        sh.command("detach")
        assert sh.command("cast debugee ranks(0,1) p rank").startswith(
            "debugee ranks[0] (1)\n0\ndebugee ranks[1] (1)\n1\n"
        )
    finally:
        sh.kill()
        program.stop()
        stop_broker(broker)


@pytest.mark.timeout(120)
def test_a_cast_whose_broker_restarts_names_the_ranks_whose_answers_were_lost(env):
    env = dict(env, MONARCH_DEBUG_SERVER_PORT=str(free_port()), MONARCH_PDB_CONNECT_TIMEOUT="60")  # as above
    broker, _ = start_broker(env)
    program = Program(env, EXAMPLES / "debugging.py")
    try:
        wait_for_sessions(env, 16)
        sh = ShellDriver(env)
        try:
            sh.wait_prompt()
            sh.child.sendline("cast debugee ranks(0:3) p __import__('time').sleep(3) or rank")
            wait_for_all_rows(env, lambda rows: {r.rank for r in rows if r.state == "running"} == {0, 1, 2})
            broker.kill()
            broker.wait()
            broker, _ = start_broker(env)
            sh.expect(
                r"the broker restarted during the cast; the answers of debugee ranks\[0-2\] \(3\) were lost "
                r"\(the line may have run there\)"
            )
            sh.wait_prompt()
            wait_for_sessions(env, 16)
            after = sh.command("cast debugee ranks(0,1) p rank")
            assert re.search(r"(?m)^debugee ranks\[0\] \(1\)\n0\ndebugee ranks\[1\] \(1\)\n1\n", after), after
        finally:
            sh.kill()
    finally:
        program.stop()
        stop_broker(broker)


@pytest.mark.timeout(120)
def test_a_broker_restart_is_said_once_and_the_ranks_paused_before_are_no_news(env, tmp_path):
    """The ranks are held still (SIGSTOP) while the broker restarts, so the new one does not know
    them when it answers the cast typed meanwhile; once they rejoin it, they are listed as they
    were, and no event calls them stopped before the next ones, of their continue."""
    env = dict(env, MONARCH_DEBUG_SERVER_PORT=str(free_port()), MONARCH_PDB_CONNECT_TIMEOUT="60")  # as above
    broker, _ = start_broker(env)
    programs = [run_train(env, tmp_path, rank) for rank in (0, 1)]
    sh = ShellDriver(env)
    try:
        wait_for_sessions(env, 2)
        sh.wait_prompt()
        broker.kill()
        broker.wait()
        for program in programs:
            os.killpg(program.proc.pid, signal.SIGSTOP)
        sh.child.sendline("cast train ranks(0:2) p loss")
        sh.expect(re.escape(NOT_ANSWERING))
        broker, _ = start_broker(env)
        sh.expect(re.escape(f"Error processing command: {GONE_MEANWHILE}"))
        sh.wait_prompt()
        for program in programs:
            os.killpg(program.proc.pid, signal.SIGCONT)
        wait_for_sessions(env, 2)
        assert "Continued 2 ranks" in sh.command("continue")
        for _ in programs:
            sh.expect(r"train [01] (is running again \(continued\)|finished)")  # as its process ends first or not
        assert sh.text.count(RESTARTED) == 1, sh.text
        assert "stopped at" not in sh.text, sh.text
        assert [program.finish()[0] for program in programs] == [0, 0]
    finally:
        sh.kill()
        for program in programs:
            program.stop()
        stop_broker(broker)


@pytest.mark.timeout(90)
def test_history_and_sessions_per_connection_are_bounded_and_say_so(env, tmp_path, shell):
    limited = dict(env, MONARCH_PDB_SESSION_HISTORY="20000", MONARCH_PDB_MAX_SESSIONS_PER_CONNECTION="60")
    program = run_script(limited, tmp_path, "threads.py", THREADS)
    try:
        rows = wait_for_sessions(limited, 60)
        held = rows[0].rank  # which 60 of the 64 ranks got a session depends on thread timing
        program_text = ""
        sh = ShellDriver(dict(limited, MONARCH_PDB_PAGER=""))  # answers taller than the terminal, read here whole
        try:
            sh.wait_prompt()
            assert sh.command("list --rows").count("| many ") == 60
            answer = sh.command(f"cast many ranks({held}) !for i in range(100): print(str(i).rjust(199, '.'))")
            assert answer.count("\n") == 1 + 100, "a cast's answer holds all it printed, up to the limit"
            assert "not kept" not in answer
            sh.command(f"cast many ranks({held}) !for i in range(100): print(str(i).rjust(999, '.'))")
            out = sh.command(f"attach many {held}")
            assert "*** 80000 earlier characters not kept (MONARCH_PDB_SESSION_HISTORY)" in out
            assert out.count("....99\n") == 1 and "....80\n" in out and "....79\n" not in out
            sh.command("detach")
            sh.command("continue")
        finally:
            sh.kill()
        code, program_text = program.finish()
        assert "refused a session of many" in program_text and "MONARCH_PDB_MAX_SESSIONS_PER_CONNECTION" in program_text
        assert len(rows) == 60
    finally:
        program.stop()


@pytest.mark.timeout(60)
def test_a_rank_told_of_a_broker_above_but_not_its_secret_says_so_instead_of_starting_a_broker(env, tmp_path):
    told = dict(env, MONARCH_PDB_UPSTREAM="127.0.0.1:9", MONARCH_PDB_CONNECT_TIMEOUT="1", MONARCH_PDB_GIVE_UP_AFTER="1")
    program = run_train(told, tmp_path, 0)
    code, output = program.finish()
    assert (
        "MONARCH_PDB_UPSTREAM names 127.0.0.1:9, but this host's broker needs that broker's secret to "
        "register: set MONARCH_PDB_SECRET_FILE"
    ) in output
    assert code == 0 and "LOSS 0.25" in output
    assert not list((tmp_path / "run").glob("broker-*.json")), "no broker was started to fail in its log"


@pytest.mark.timeout(60)
def test_a_rank_with_no_broker_says_where_it_looked_and_can_give_up(env, tmp_path):
    nowhere = dict(
        env,
        MONARCH_DEBUG_SERVER_HOST="127.0.0.2",
        MONARCH_DEBUG_SERVER_PORT=str(free_port()),
        MONARCH_PDB_CONNECT_TIMEOUT="1",
        MONARCH_PDB_GIVE_UP_AFTER="1",
    )
    program = run_train(nowhere, tmp_path, 0)
    code, output = program.finish()
    port = nowhere["MONARCH_DEBUG_SERVER_PORT"]
    assert (
        f"train rank 0 (pid {program.proc.pid}) is paused at a breakpoint, but no debug broker answers at 127.0.0.2:{port}"
        in output
    )
    assert f"(nothing listens at 127.0.0.2:{port})" in output and "Start one with `monarch-pdb broker`" in output
    assert "no broker after 1 s; continuing without stopping." in output
    assert code == 0 and "LOSS 0.25" in output


SQUATTER = textwrap.dedent("""
    import socket
    import sys

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", int(sys.argv[1])))
    server.listen()
    print("listening", flush=True)
    held = []
    while True:
        held.append(server.accept()[0])  # says nothing, as an HTTP server waits for a request
""")


@pytest.mark.timeout(60)
def test_another_program_on_a_stale_brokers_port_is_named_by_rank_and_shell(env, tmp_path):
    port = free_port()
    fixed = dict(
        env, MONARCH_DEBUG_SERVER_PORT=str(port), MONARCH_PDB_CONNECT_TIMEOUT="1", MONARCH_PDB_GIVE_UP_AFTER="1"
    )
    broker, _ = start_broker(fixed)
    broker.kill()
    broker.wait()
    assert os.path.exists(os.path.join(env["MONARCH_PDB_RUNTIME_DIR"], f"broker-{port}.json")), "a stale file"
    squatter = run_script(env, tmp_path, "squatter.py", SQUATTER, str(port))
    try:
        assert squatter.proc.stdout.readline() == "listening\n"
        note = f"(another program listens on port {port}: it does not speak ZeroMQ, so it is not a debug broker)"
        code, output = run_train(fixed, tmp_path, 0).finish()
        assert f"no debug broker answers at 127.0.0.1:{port} {note}" in output
        assert code == 0 and "LOSS 0.25" in output
        done = run_debug(fixed, "-c", "list")
        assert done.returncode == 2
        assert done.stderr == (
            f"monarch-pdb: no debug broker answers at 127.0.0.1:{port} {note}. Stop that program, "
            "or give the broker and the ranks another port (MONARCH_DEBUG_SERVER_PORT).\n"
        )
    finally:
        squatter.stop()


@pytest.mark.timeout(60)
def test_a_runtime_directory_that_cannot_be_made_is_named_and_the_rank_runs_on(env, tmp_path):
    (tmp_path / "file").write_text("not a directory")
    runtime = tmp_path / "file" / "run"
    program = run_train(
        dict(env, MONARCH_PDB_RUNTIME_DIR=str(runtime), MONARCH_PDB_CONNECT_TIMEOUT="1", MONARCH_PDB_GIVE_UP_AFTER="1"),
        tmp_path,
        0,
    )
    code, output = program.finish()
    assert (
        f"and none can start on this host: cannot use {runtime} as the runtime directory: Not a directory; "
        "set MONARCH_PDB_RUNTIME_DIR" in output
    )
    assert "Traceback" not in output and "no broker after 1 s; continuing without stopping." in output
    assert code == 0 and "LOSS 0.25" in output
