"""Two hosts: ranks in two network namespaces, each with its own address and hostname, reach a
broker in a third over that network, with the secret from the environment. The namespaces
(tests/namespaces.py) are made by the test (as root) and removed afterwards; without them the
test is skipped and says why."""

from __future__ import annotations

import os
import re
import sys
import textwrap

import pytest
from namespaces import BROKER_ADDRESS, HOSTS, in_namespace
from programs import DEBUG_SHELL, Program, start_broker, stop_broker

RANK = textwrap.dedent("""
    import os
    import socket

    rank = int(os.environ["RANK"])
    value = rank * rank
    breakpoint()
    print("rank", rank, "on", socket.gethostname(), "done", flush=True)
""")

PER_HOST = 2


@pytest.mark.timeout(120)
def test_ranks_on_two_hosts_reach_a_broker_on_a_third(env, tmp_path, network, shell):
    remote = dict(env, MONARCH_PDB_SECRET="two-hosts-" + os.urandom(16).hex(), MONARCH_DEBUG_SERVER_HOST=BROKER_ADDRESS)
    broker, first = start_broker(remote, launcher=in_namespace(network.broker))
    programs: list[Program] = []
    try:
        port = re.search(rf"listening on tcp://{re.escape(BROKER_ADDRESS)}:(\d+)", first).group(1)
        script = tmp_path / "rank.py"
        script.write_text(RANK)
        for host, namespace in enumerate(network.hosts):
            for local in range(PER_HOST):
                rank = host * PER_HOST + local
                rank_env = dict(
                    remote,
                    MONARCH_DEBUG_SERVER_PORT=port,
                    MONARCH_PDB_RUNTIME_DIR=str(tmp_path / f"host{host}"),
                    PYTHONBREAKPOINT="monarch_pdb.set_trace",
                    MONARCH_PDB_JOB="two-hosts",
                    RANK=str(rank),
                    LOCAL_RANK=str(local),
                    GROUP_RANK=str(host),
                    WORLD_SIZE=str(HOSTS * PER_HOST),
                )
                programs.append(
                    Program(rank_env, script, launcher=[*in_namespace(namespace, f"sim-host-{host}"), sys.executable])
                )
        # The shell runs on the broker's host; this process could not reach that network.
        sh = shell(command=[*in_namespace(network.broker), *DEBUG_SHELL])
        assert "4 ranks of rank stopped" in sh.command("wait rank 4 --timeout 60", timeout=70)
        table = sh.command("list")
        rows = re.findall(r"^\| rank +\| (\d) +\| (\{.*?\}) +\| (\S+) +\|", table, re.M)
        assert rows == [
            (str(r), f"{{'host': {r // PER_HOST}, 'gpu': {r % PER_HOST}}}", f"sim-host-{r // PER_HOST}")
            for r in range(HOSTS * PER_HOST)
        ], table
        assert sh.command("cast rank ranks(host=1) p value") == (
            "rank ranks[2] (1)\n4\nrank ranks[3] (1)\n9\n"
            "numbers: count 2, min 4 (rank 2), max 9 (rank 3), mean 6.5, NaN/Inf 0, beyond 3 sd 0\n"
        )
        assert sh.command("continue").strip() == "Continued 4 ranks: rank ranks[0-3]"
        for rank, program in enumerate(programs):
            code, output = program.finish()
            assert code == 0 and f"rank {rank} on sim-host-{rank // PER_HOST} done" in output, output
    finally:
        for program in programs:
            program.stop()
        stop_broker(broker)
