"""Many sessions at once: nothing a rank printed is lost, even with two shells casting together."""

from __future__ import annotations

import textwrap
import threading

import pytest
from programs import Program, settings_for, wait_for_sessions

from monarch_pdb import wire
from monarch_pdb.client.connection import BrokerConnection

EMULATED = textwrap.dedent("""
    import sys
    import threading

    import monarch_pdb

    first, count = int(sys.argv[1]), int(sys.argv[2])


    def rank_main(rank):
        with monarch_pdb.endpoint_call("emu", rank, {"proc": rank // count, "thread": rank % count}):
            breakpoint()


    monarch_pdb.install()
    threading.stack_size(256 * 1024)
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(first, first + count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("DONE", first)
""")

PROCESSES, PER_PROCESS = 4, 1024
RANKS = PROCESSES * PER_PROCESS
COMMAND = "p (str(rank) + ':').ljust(1024, '#')"


def expected(rank: int) -> str:
    return repr((str(rank) + ":").ljust(1024, "#")) + "\n"


@pytest.mark.timeout(240)
def test_two_shells_casting_to_4096_sessions_and_a_third_following_get_every_byte_in_order(env, tmp_path):
    script = tmp_path / "emulated.py"
    script.write_text(EMULATED)
    job = dict(env, MONARCH_PDB_JOB="emulated")
    programs = [Program(job, script, str(p * PER_PROCESS), str(PER_PROCESS), cwd=tmp_path) for p in range(PROCESSES)]
    try:
        wait_for_sessions(env, RANKS, timeout=120)
        follower = BrokerConnection.open(settings_for(env))
        followed: dict[int, list[str]] = {}
        both_heard: set[int] = set()
        all_followed = threading.Event()

        def seen(actor: str, rank: int, text: str) -> None:
            """Counts the ranks heard twice as they come: a check of every rank at each chunk
            kept the connection's thread from reading for seconds past the casts' end."""
            parts = followed.setdefault(rank, [])
            parts.append(text)
            if len(parts) == 2:
                both_heard.add(rank)
                if len(both_heard) == RANKS:
                    all_followed.set()

        follower.follow("emu", "ranks(:)", "", seen)
        results: dict[str, object] = {}

        def cast_from(name: str) -> None:
            conn = BrokerConnection.open(settings_for(env))
            try:
                results[name] = conn.cast("emu", "ranks(:)", COMMAND, timeout=120)
            except Exception as error:  # the assertion below shows which shell failed and how
                results[name] = error
            finally:
                conn.close()

        shells = [threading.Thread(target=cast_from, args=(name,)) for name in ("first", "second")]
        for shell in shells:
            shell.start()
        for shell in shells:
            shell.join()
        for name, result in results.items():
            assert not isinstance(result, Exception), f"{name} shell: {result}"
            assert result.missing == [], f"{name} shell: {result.missing[:5]}"
            answers = {g.ranks.first: g.output for g in result.groups}
            assert len(result.groups) == RANKS and sorted(answers) == list(range(RANKS)), name
            wrong = [r for r, output in answers.items() if output != expected(r)]
            assert not wrong, f"{name} shell: rank {wrong[0]} answered {answers[wrong[0]][:80]!r}..."
        assert all_followed.wait(60), (
            f"the following shell heard both casts' answers of {len(both_heard)} of {RANKS} ranks"
        )
        follower.close()
        wrong = [r for r, parts in followed.items() if "".join(parts) != 2 * expected(r)]
        assert not wrong, f"the following shell heard rank {wrong[0]} say {''.join(followed[wrong[0]])[:80]!r}..."

        conn = BrokerConnection.open(settings_for(env))
        try:
            conn.request(wire.Continue(), wire.Continued, timeout=60)
        finally:
            conn.close()
        for program in programs:
            code, output = program.finish(timeout=120)
            assert code == 0 and "DONE" in output
    finally:
        for program in programs:
            program.stop()
