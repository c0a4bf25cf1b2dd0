"""A tree of brokers: a root, and a broker per host registered with it (`--upstream`), ranks
under each; a shell on the root sees and drives every rank below, and a lost or restarted broker
is told once and mended."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import zmq
from conftest import wait_for_exit
from namespaces import BROKER_ADDRESS, HOSTS, in_namespace, named
from programs import (
    DEBUG_SHELL,
    PDB_STOPS_ON_BREAKPOINT,
    RUNS,
    BrokerLog,
    Program,
    free_port,
    settings_for,
    start_broker,
    stop_broker,
    stop_line,
    wait_for_all_rows,
    wait_for_lines,
    wait_for_sessions,
)

from monarch_pdb import discovery, wire
from monarch_pdb.client.connection import BrokerConnection
from monarch_pdb.ranks import RankSet

RANK = textwrap.dedent("""
    import os
    import time

    import monarch_pdb

    monarch_pdb.install()
    rank = int(os.environ["RANK"])
    value = rank * rank


    def spin():
        print("SPINNING", rank, flush=True)
        time.sleep(3600)


    breakpoint()
    value += 1
    if rank % 2:
        raise ValueError(f"rank {rank} fails")
    spin()
""")
"""One rank of a torchrun-like job: it stops at a breakpoint; after `continue`, odd ranks stop
again in post-mortem and even ranks run on in `spin` until interrupted."""

JOB = "tree"
MONARCH_PDB = [os.path.join(os.path.dirname(sys.executable), "monarch-pdb")]


@dataclass
class Tree:
    """A root broker, the host brokers registered with it and the ranks below them. `env` is
    the root's environment, the one shells use."""

    env: dict[str, str]
    tmp: Path
    root: subprocess.Popen | None = None
    port: str = ""
    brokers: list[subprocess.Popen] = field(default_factory=list)
    ports: dict[subprocess.Popen, str] = field(default_factory=dict)
    programs: list[Program] = field(default_factory=list)

    def start_root(self, *args: str, launcher: list[str] | None = None) -> None:
        """The root broker; shells on `env` reach it at its port."""
        self.root, first = start_broker(self.env, *args, launcher=launcher)
        self.port = re.search(r"listening on tcp://[^ ]+:(\d+) ", first).group(1)
        self.env["MONARCH_DEBUG_SERVER_PORT"] = self.port

    @property
    def upstream(self) -> str:
        return f"{self.env['MONARCH_DEBUG_SERVER_HOST']}:{self.port}"

    def host_env(self, host: str) -> dict[str, str]:
        """A host of its own: its runtime directory, its broker on its loopback at port 0, and
        no secret."""
        values = {k: v for k, v in self.env.items() if k not in ("MONARCH_PDB_SECRET", "MONARCH_PDB_SECRET_FILE")}
        return dict(
            values,
            MONARCH_PDB_RUNTIME_DIR=str(self.tmp / host),
            MONARCH_DEBUG_SERVER_HOST="127.0.0.1",
            MONARCH_DEBUG_SERVER_PORT="0",
        )

    def host_broker(self, host: str, launcher: list[str] | None = None, upstream: str = "") -> subprocess.Popen:
        """`monarch-pdb broker --upstream ROOT` (or another broker's HOST:PORT) for one host,
        with the secret; its port is `ports[proc]`."""
        proc, first = start_broker(
            dict(self.host_env(host), MONARCH_PDB_SECRET=self.env["MONARCH_PDB_SECRET"]),
            "--upstream",
            upstream or self.upstream,
            launcher=launcher,
        )
        self.brokers.append(proc)
        self.ports[proc] = re.search(r"listening on tcp://[^ ]+:(\d+) ", first).group(1)
        return proc

    def ranks(
        self, host: str, group: int, ranks: list[int], world: int, launcher: list[str] | None = None, **extra: str
    ) -> list[Program]:
        """One process per rank on `host`, as torchrun starts them (`group`: its node rank)."""
        script = self.tmp / "rank.py"
        if not script.exists():  # written again, it would be news to the pdb of ranks running it
            script.write_text(RANK)
        started = [
            Program(
                dict(
                    self.host_env(host),
                    MONARCH_PDB_JOB=JOB,
                    RANK=str(rank),
                    LOCAL_RANK=str(local),
                    GROUP_RANK=str(group),
                    WORLD_SIZE=str(world),
                    **extra,
                ),
                script,
                cwd=self.tmp,
                launcher=launcher,
            )
            for local, rank in enumerate(ranks)
        ]
        self.programs += started
        return started

    def two_hosts(self) -> list[Program]:
        """A root, a host broker on host0 and host1, and ranks 0-1 and 2-3 of four below them,
        each listed at the root."""
        self.start_root()
        self.host_broker("host0")
        self.host_broker("host1")
        programs = self.ranks("host0", 0, [0, 1], 4) + self.ranks("host1", 1, [2, 3], 4)
        wait_for_sessions(self.env, 4)
        return programs

    def embedded(self) -> dict[str, str]:
        """What ranks need to start a host broker of their own that registers with the root:
        its address, and the secret in a file only we may read."""
        secret = self.tmp / "secret"
        secret.write_text(self.env["MONARCH_PDB_SECRET"])
        secret.chmod(0o600)
        return {"MONARCH_PDB_UPSTREAM": self.upstream, "MONARCH_PDB_SECRET_FILE": str(secret)}

    def broker_of(self, host: str) -> int:
        """The pid of the broker that serves `host` now."""
        return discovery.read_connection_file(settings_for(self.host_env(host))).pid

    def stop(self) -> None:
        for program in self.programs:
            program.stop()
        for proc in self.brokers:
            if proc.poll() is None:
                stop_broker(proc)
        if self.root is not None and self.root.poll() is None:
            stop_broker(self.root)


@pytest.fixture
def tree(env, tmp_path):
    """The brokers and ranks of one test, stopped at its end; `env` gets the cluster's secret."""
    env["MONARCH_PDB_SECRET"] = "tree-" + os.urandom(16).hex()
    made = Tree(env, tmp_path)
    try:
        yield made
    finally:
        made.stop()


def listed(table: str) -> list[tuple[str, str, str]]:
    """(rank, coordinates, state or function) of each row of `list` or `list --all`."""
    return [
        (rank, coords, last)
        for rank, coords, last in re.findall(r"^\| rank +\| (\d+) +\| (\{.*?\}) +\|.*?\| ([^|]*?) +\|$", table, re.M)
    ]


@pytest.mark.timeout(120)
@pytest.mark.each_python
def test_a_shell_on_the_root_drives_ranks_below_two_host_brokers(tree, env, shell):
    programs = tree.two_hosts()
    sh = shell()
    stop = str(stop_line(18))
    assert listed(sh.command("list")) == [(str(r), f"{{'host': {r // 2}, 'gpu': {r % 2}}}", stop) for r in range(4)]
    sh.command("set list_rows 3")
    grouped = sh.command("list")  # grouped by the root, over the sessions of both brokers below
    assert re.search(
        rf"^\| rank +\| 0-3 \(4\) +\| {{'host': 0,1, 'gpu': 0,1}} +\| {socket.gethostname()} +\| .* \| {stop} +\|$",
        grouped,
        re.M,
    ), grouped
    assert grouped.endswith("\n4 ranks in 1 group; 'list --rows' shows each rank\n")
    sh.command("set list_rows 40")
    # A broker below tells its processes up at most every half heartbeat, after its sessions.
    wait_for_all_rows(
        env, lambda rows: [(r.job, r.processes) for r in rows] == [(JOB, 4)], ask=wire.ListJobs(), answer=wire.JobList
    )
    jobs = sh.command("jobs")
    assert re.search(rf"^\| {JOB} +\| 4 +\| 4/4 +\| {socket.gethostname()} +\|$", jobs, re.M), jobs

    assert sh.command("cast rank ranks(:) p value") == (
        "rank ranks[0] (1)\n0\nrank ranks[1] (1)\n1\nrank ranks[2] (1)\n4\nrank ranks[3] (1)\n9\n"
        "numbers: count 4, min 0 (rank 0), max 9 (rank 3), mean 3.5, NaN/Inf 0, beyond 3 sd 0\n"
    )
    assert sh.command("cast rank ranks(:) p rank % 2").startswith("rank ranks[0,2] (2)\n0\nrank ranks[1,3] (2)\n1\n"), (
        "identical answers from both hosts are one group"
    )
    assert (
        sh.command("stacks rank") == f"rank ranks[0-3] (4): 1 distinct stack\nrank.py:{stop} <module>  ranks[0-3] (4)\n"
    )
    native = json.loads(sh.command("stacks rank --native --json"))
    assert sorted(r for g in native["groups"] for r in g["ranks"]) == [0, 1, 2, 3], "each host broker read its own"
    assert all(g["outside"] for g in native["groups"]) and not native["missing"], native
    frames = [f for g in native["groups"] for t in g["threads"] for f in native["common"] + t["frames"]]
    assert any(f.get("native") and ".so" in f["file"] for f in frames), "C frames among the Python ones"
    assert any(f["function"] == "<module>" and f["file"].endswith("rank.py") for f in frames)

    assert sh.command("follow rank ranks(1,2)").strip() == "Following rank ranks[1,2] (2); 'follow off' stops."
    shell().command("cast rank ranks(:) p rank * 7")
    sh.expect(r"(?s)(?=.*\[rank 1\] 7\n).*\[rank 2\] 14\n|(?=.*\[rank 2\] 14\n).*\[rank 1\] 7\n")
    assert "[rank 0]" not in sh.text and "[rank 3]" not in sh.text
    assert sh.command("follow off").strip() == "Not following any rank."

    assert sh.command("attach rank 3").startswith("Attached to debug session for rank 3 (")
    assert sh.prompt == "(Pdb)"
    assert sh.command("p value").strip() == "9"
    assert f"rank.py({int(stop) + 1})<module>()" in sh.command("n")
    assert sh.command("p value").strip() == ("9" if PDB_STOPS_ON_BREAKPOINT else "10")
    assert "Detached from debug session for rank 3" in sh.command("detach")
    assert sh.prompt == "monarch_dbg>"
    assert sh.command("stacks rank") == (
        f"rank ranks[0-3] (4): 2 distinct stacks\nrank 3 is elsewhere: rank.py:{int(stop) + 1} <module>\n"
        f"├─ rank.py:{stop} <module>  ranks[0-2] (3)\n└─ rank.py:{int(stop) + 1} <module>  ranks[3] (1)\n"
    )

    assert "Continued 4 ranks: rank ranks[0-3]" in sh.command("continue").splitlines()
    post_mortem = r"\brank (\d) entered post-mortem at rank.py:20: ValueError: rank \1 fails$"
    assert {sh.expect(post_mortem).group(1), sh.expect(post_mortem).group(1)} == {"1", "3"}
    for program in (programs[0], programs[2]):
        wait_for_lines(program, "SPINNING", 1)
    wait_for_all_rows(env, lambda rows: [r.state for r in rows] == ["running", "post-mortem"] * 2)
    assert "Interrupted 2 ranks: rank ranks[0,2] (2)" in sh.command("interrupt rank ranks(:)").splitlines()
    sh.expect(r"\brank ranks\[0,2\] \(2\) stopped by interrupt at rank.py:14$")
    assert listed(sh.command("list")) == [
        (str(r), f"{{'host': {r // 2}, 'gpu': {r % 2}}}", "20" if r % 2 else "14") for r in range(4)
    ]
    assert sh.command("stacks rank") == (  # as a broker with the ranks of both hosts says it
        "rank ranks[0-3] (4): 2 distinct stacks\n"
        "├─ rank.py:20 <module>  ranks[1,3] (2)\n"  # post-mortem: where they raised
        "└─ rank.py:21 <module>  ranks[0,2] (2)\n   rank.py:14 spin  ranks[0,2] (2)\n"
    )


@pytest.mark.timeout(120)
@pytest.mark.each_python
def test_peek_and_stacks_locals_at_the_root_read_ranks_below_every_host_broker(tree, env, shell):
    programs = tree.two_hosts()
    sh = shell()
    squares = "".join(f"rank ranks[{r}] (1)\n{r * r}\n" for r in range(4))
    numbers = "numbers: count 4, min 0 (rank 0), max 9 (rank 3), mean 3.5, NaN/Inf 0, beyond 3 sd 0\n"
    assert sh.command("peek rank ranks(:) value") == squares + numbers, "paused ranks answer where they stopped"
    assert sh.command("peek rank ranks(:) rank % 2").startswith("rank ranks[0,2] (2)\n0\nrank ranks[1,3] (2)\n1\n"), (
        "identical answers from both hosts are one group"
    )
    local = sh.command("stacks rank --locals")
    assert f"locals of rank.py:{stop_line(18)} <module>  ranks[0-3] (4)\n" in local
    assert "  value " + numbers in local, "each host's locals folded at the root into one numbers line"

    assert "Continued 4 ranks: rank ranks[0-3]" in sh.command("continue").splitlines()
    announced: set[str] = set()
    while announced != {"1", "3"}:  # read before the next command, whose answer they would follow
        told = sh.expect(r"\brank (?:(\d)|ranks\[([\d,]+)\] \(\d\)) entered post-mortem at rank\.py:20")
        announced.update((told.group(1) or told.group(2)).split(","))
    for program in (programs[0], programs[2]):
        wait_for_lines(program, "SPINNING", 1)
    wait_for_all_rows(env, lambda rows: [r.state for r in rows] == ["running", "post-mortem"] * 2)
    assert sh.command("peek rank ranks(:) value") == "".join(
        f"rank ranks[{r}] (1)\n{r * r + 1}\n" for r in range(4)
    ) + ("numbers: count 4, min 1 (rank 0), max 10 (rank 3), mean 4.5, NaN/Inf 0, beyond 3 sd 0\n"), (
        "running ranks answer from their program's frame, ranks in post-mortem from the frame that raised"
    )
    assert sh.command("peek --frame spin --up 1 rank ranks(0,2) rank").startswith(
        "rank ranks[0] (1)\n0\nrank ranks[2] (1)\n2\n"
    )
    assert [r.state for r in wait_for_all_rows(env, lambda rows: len(rows) == 4)] == ["running", "post-mortem"] * 2


@pytest.mark.timeout(120)
@pytest.mark.each_python
def test_a_tree_three_deep_serves_the_root_as_two_deep_does(tree, env, shell):
    tree.start_root()
    rack = tree.host_broker("rack")
    tree.host_broker("host0", upstream=f"127.0.0.1:{tree.ports[rack]}")
    programs = tree.ranks("host0", 0, [0, 1], 2)
    wait_for_sessions(env, 2)
    sh = shell()
    stop = str(stop_line(18))
    assert listed(sh.command("list")) == [(str(r), f"{{'host': 0, 'gpu': {r}}}", stop) for r in range(2)]
    assert sh.command("cast rank ranks(:) p rank % 2 + 5").startswith("rank ranks[0] (1)\n5\nrank ranks[1] (1)\n6\n")
    assert sh.command("attach rank 1").startswith("Attached to debug session for rank 1 (")
    assert sh.command("p value").strip() == "1"
    assert "Detached from debug session for rank 1" in sh.command("detach")
    assert "Continued 2 ranks: rank ranks[0,1]" in sh.command("continue").splitlines()
    sh.expect(r"\brank 1 entered post-mortem at rank.py:20: ValueError: rank 1 fails$")
    wait_for_lines(programs[0], "SPINNING", 1)
    wait_for_all_rows(env, lambda rows: [r.state for r in rows] == ["running", "post-mortem"])
    assert sh.command("stacks rank ranks(0)") == (
        "rank ranks[0] (1): 1 distinct stack\nrank.py:21 <module>  ranks[0] (1)\nrank.py:14 spin  ranks[0] (1)\n"
    )
    assert "Interrupted 1 rank: rank ranks[0] (1)" in sh.command("interrupt rank ranks(0)").splitlines()
    sh.expect(r"\brank 0 stopped by interrupt at rank.py:14$")


def command_line(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


@pytest.mark.timeout(120)
def test_ranks_start_host_brokers_of_their_own_that_register_with_the_root(tree, env, shell):
    tree.start_root()
    sh = shell()
    tree.ranks("host0", 0, [0, 1], 4, **tree.embedded())
    tree.ranks("host1", 1, [2, 3], 4, **tree.embedded())
    joined = "the broker on " + re.escape(socket.gethostname()) + " joined: its ranks are here"
    sh.expect(joined)
    sh.expect(joined)
    wait_for_sessions(env, 4)
    hosts = [tree.broker_of("host0"), tree.broker_of("host1")]
    assert hosts[0] != hosts[1] and all("monarch_pdb.broker --embedded" in command_line(pid) for pid in hosts)
    assert "rank ranks[0,2] (2)\n0\nrank ranks[1,3] (2)\n1\n" in sh.command("cast rank ranks(:) p rank % 2")
    assert "Continued 4 ranks: rank ranks[0-3]" in sh.command("continue")


@pytest.mark.timeout(120)
def test_brokers_ranks_and_shells_talk_over_ipv6_loopback_written_either_way(tree, env, shell):
    env["MONARCH_DEBUG_SERVER_HOST"] = "[::1]"
    tree.start_root()
    assert tree.upstream == f"[::1]:{tree.port}"
    tree.ranks("host0", 0, [0, 1], 4, **tree.embedded())
    tree.ranks("host1", 1, [2, 3], 4, MONARCH_DEBUG_SERVER_HOST="::1", **tree.embedded())
    wait_for_sessions(env, 4)
    assert discovery.read_connection_file(settings_for(tree.host_env("host1"))).router.startswith("tcp://[::1]:")
    sh = shell()
    assert [row[0] for row in listed(sh.command("list"))] == ["0", "1", "2", "3"]
    bare = shell("--host", "::1")
    assert "rank ranks[0,2] (2)\n0\nrank ranks[1,3] (2)\n1\n" in bare.command("cast rank ranks(:) p rank % 2")
    assert "Continued 4 ranks: rank ranks[0-3]" in bare.command("continue")


@pytest.mark.timeout(120)
def test_a_lost_host_broker_is_one_line_its_ranks_lost_and_they_return_with_a_new_one(tree, env, shell):
    tree.start_root()
    tree.ranks("host0", 0, [0, 1], 4, **tree.embedded())
    held = tree.ranks("host1", 1, [2, 3], 4, **tree.embedded())
    wait_for_sessions(env, 4)
    sh = shell()
    sh.command("set cast_timeout 60")
    broker = tree.broker_of("host1")
    # Its ranks are held still until the root has declared their broker lost: they would
    # otherwise start a new one at once, and the root might hear it first.
    for program in held:
        os.kill(program.proc.pid, signal.SIGSTOP)
    os.kill(broker, signal.SIGSTOP)
    sh.child.sendline("cast rank ranks(:) p rank")
    sh.expect("answered 2/4")
    os.kill(broker, signal.SIGKILL)
    wait_for_exit([broker], timeout=10)
    host = socket.gethostname()
    during = sh.expect(r"(?s)rank ranks\[0\] \(1\)\n0\nrank ranks\[1\] \(1\)\n1\n.*?\nno answer from .*\n")
    assert during.group().endswith(f"\nno answer from rank ranks[2,3] (2): lost with the broker on {host}\n"), (
        "the cast in flight is answered once the broker is lost, long before its 60 s, naming its ranks"
    )
    sh.wait_prompt()
    lost = sh.expect(rf"the broker on {re.escape(host)} stopped answering: its 2 ranks are lost\n")
    after = sh.command("cast rank ranks(0,1,2,3) p rank", timeout=30)
    assert after.startswith("rank ranks[0] (1)\n0\nrank ranks[1] (1)\n1\n") and after.endswith(
        "no answer from rank ranks[2,3] (2): lost\n"
    ), after
    assert listed(sh.command("list --all")) == [
        ("0", "{'host': 0, 'gpu': 0}", "breakpoint"),
        ("1", "{'host': 0, 'gpu': 1}", "breakpoint"),
        ("2", "{'host': 1, 'gpu': 0}", "lost"),
        ("3", "{'host': 1, 'gpu': 1}", "lost"),
    ]
    assert sh.text.count("ranks are lost") == 1 and not re.search("w(as|ere) lost", sh.text), (
        f"one line for the broker, none per rank:\n{sh.text[lost.start() :]}"
    )

    for program in held:
        os.kill(program.proc.pid, signal.SIGCONT)
    sh.expect(rf"the broker on {re.escape(host)} joined: its ranks are here")
    wait_for_sessions(env, 4)
    assert tree.broker_of("host1") != broker, "the ranks started a new broker for their host"
    assert [row[0] for row in listed(sh.command("list"))] == ["0", "1", "2", "3"]
    assert "rank ranks[0,2] (2)\n0\nrank ranks[1,3] (2)\n1\n" in sh.command("cast rank ranks(:) p rank % 2")


@pytest.mark.timeout(120)
def test_a_host_broker_that_stalls_leaves_its_ranks_unreachable_then_as_they_were(tree, env, shell):
    env["MONARCH_PDB_HEARTBEAT"] = "0.5"  # silent for 1.5 s, a broker does not answer
    tree.start_root()
    tree.host_broker("host0")
    stalled = tree.host_broker("host1")
    tree.ranks("host0", 0, [0, 1], 4)
    tree.ranks("host1", 1, [2, 3], 4)
    wait_for_sessions(env, 4)
    host = re.escape(socket.gethostname())
    unreachable = f"unreachable (the broker on {socket.gethostname()} does not answer)"
    attached, other = shell(), shell()
    assert attached.command("attach rank 3").startswith("Attached to debug session for rank 3 (")
    os.kill(stalled.pid, signal.SIGSTOP)
    try:
        attached.child.sendline("p value")
        other.expect(rf"the broker on {host} does not answer: its 2 ranks are unreachable until it does\n")
        cast = other.command("cast rank ranks(:) p rank")
        assert cast.startswith("rank ranks[0] (1)\n0\nrank ranks[1] (1)\n1\n") and cast.endswith(
            f"no answer from rank ranks[2,3] (2): {unreachable}\n"
        ), cast
        assert other.command("attach rank 2").strip() == f"Error processing command: rank 2 is {unreachable}"
        assert other.command("stacks rank").endswith(f"\nno answer from rank ranks[2,3] (2): {unreachable}\n")
        assert other.command("stacks rank ranks(2,3)") == f"no answer from rank ranks[2,3] (2): {unreachable}\n", (
            "no header over no stacks"
        )
        assert [state for _, _, state in listed(other.command("list --all"))] == ["breakpoint"] * 4
    finally:
        os.kill(stalled.pid, signal.SIGCONT)
    answer = attached.expect(r"^9$|was lost|took over|Detach")
    assert answer.group() == "9", f"the line typed during the stall is answered:\n{attached.text}"
    assert attached.wait_prompt() == "(Pdb)"
    other.expect(rf"the broker on {host} answers again: its ranks are as they were\n")
    assert "rank ranks[0,2] (2)\n0\nrank ranks[1,3] (2)\n1\n" in other.command("cast rank ranks(:) p rank % 2")
    assert "Detached from debug session for rank 3" in attached.command("detach")
    assert "Continued 4 ranks: rank ranks[0-3]" in other.command("continue").splitlines()
    assert not re.search(r"lost|finished", attached.text + other.text), "no rank was announced gone"


def upstream_connection(pid: int, port: str, not_: str = "", timeout: float = 10.0) -> str:
    """The local `address:port` of process `pid`'s one established TCP connection to `port`, as
    ss shows it, once it is one other than `not_`."""
    deadline = time.monotonic() + timeout
    while True:
        shown = subprocess.run(
            ["ss", "-Htnp", "state", "established", "dport", "=", f":{port}"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        local = [line.split()[2] for line in shown.splitlines() if f"pid={pid}," in line]
        if len(local) == 1 and local[0] != not_:
            return local[0]
        assert time.monotonic() < deadline, f"no connection from {pid} to port {port} but {local}"
        time.sleep(0.05)


@pytest.mark.timeout(120)
def test_a_host_broker_whose_connection_drops_reconnects_as_the_same_broker_with_nothing_lost(tree, env, shell):
    if os.geteuid() != 0:
        pytest.skip("closing another process's TCP connection (ss -K) needs root")
    tree.two_hosts()
    below = tree.brokers[1]
    sh = shell()
    sh.command("set cast_timeout 60")
    before = upstream_connection(below.pid, tree.port)
    address, port = before.rsplit(":", 1)
    killed = subprocess.run(
        ["ss", "-HK", "src", address, "sport", "=", f":{port}", "dport", "=", f":{tree.port}"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    if killed.returncode != 0 or not killed.stdout.strip():
        pytest.skip(f"this kernel cannot close a TCP connection from outside (ss -K): {killed.stderr.strip()}")
    upstream_connection(below.pid, tree.port, not_=before)  # libzmq makes it again
    assert "rank ranks[0,2] (2)\n0\nrank ranks[1,3] (2)\n1\n" in sh.command("cast rank ranks(:) p rank % 2"), (
        "each rank below the broker whose connection dropped answers through its new one"
    )
    assert [state for _, _, state in listed(sh.command("list --all"))] == ["breakpoint"] * 4
    assert not re.search(r"lost|joined|does not answer|stopped answering", sh.text), (
        f"the root took the new connection as the broker it knew:\n{sh.text}"
    )


@pytest.mark.timeout(120)
def test_ranks_that_move_to_a_new_host_broker_before_the_old_is_declared_lost_are_listed_once(tree, env, shell):
    # The root, on a host of its own name, cannot see the broker's process gone: it takes 12 s
    # for its connection not to come back; the ranks find theirs gone at once and start a new
    # one, which the root hears first.
    if os.geteuid() != 0:
        pytest.skip("a root under a hostname of its own (unshare --uts) needs root")
    tree.start_root(launcher=[*named("the-root"), "env", "MONARCH_PDB_HEARTBEAT=4"])
    tree.ranks("host0", 0, [0, 1], 4, **tree.embedded())
    tree.ranks("host1", 1, [2, 3], 4, **tree.embedded())
    wait_for_sessions(env, 4)
    watcher = shell()
    attached = shell()
    attached.command("attach rank 2")
    broker = tree.broker_of("host1")
    os.kill(broker, signal.SIGKILL)
    wait_for_exit([broker], timeout=10)
    host = socket.gethostname()
    watcher.expect(rf"the broker on {re.escape(host)} joined: its ranks are here")
    wait_for_sessions(env, 4)
    assert [row[0] for row in listed(watcher.command("list"))] == ["0", "1", "2", "3"], "each rank once"
    watcher.expect(rf"the broker on {re.escape(host)} stopped answering \(its ranks had moved to a new broker\)\n")
    answer = attached.command("p value")
    assert "(the broker restarted; attached again to rank 2" in answer and answer.endswith("\n4\n"), answer
    assert listed(watcher.command("list --all")) == [
        ("0", "{'host': 0, 'gpu': 0}", "breakpoint"),
        ("1", "{'host': 0, 'gpu': 1}", "breakpoint"),
        ("2", "{'host': 1, 'gpu': 0}", "breakpoint"),
        ("3", "{'host': 1, 'gpu': 1}", "breakpoint"),
    ]
    assert "ranks are lost" not in watcher.text and not re.search("w(as|ere) lost", watcher.text)


@pytest.mark.timeout(120)
def test_running_ranks_below_a_host_broker_whose_processes_die_are_announced_at_the_root(tree, env, shell):
    tree.start_root()
    tree.host_broker("host0")
    script = tree.tmp / "train.py"
    script.write_text(RUNS)
    programs = [
        Program(dict(tree.host_env("host0"), MONARCH_PDB_JOB=JOB, RANK=str(rank)), script, cwd=tree.tmp)
        for rank in range(2)
    ]
    tree.programs += programs
    for program in programs:
        wait_for_lines(program, "RUNNING", 1)
    wait_for_all_rows(env, lambda rows: [(r.rank, r.state) for r in rows] == [(0, "running"), (1, "running")])
    sh = shell()
    for program in programs:
        os.kill(program.proc.pid, signal.SIGKILL)
    sh.expect(r"train ranks\[0,1\] \(2\) were lost \(their processes or connections are gone\)\n", timeout=20)
    assert [r.state for r in wait_for_all_rows(env, lambda rows: {r.state for r in rows} == {"lost"})] == ["lost"] * 2


@pytest.mark.timeout(120)
@pytest.mark.each_python
def test_a_rank_started_again_under_another_host_broker_is_listed_twice_and_named_once(tree, env, shell):
    tree.start_root()
    tree.host_broker("host0")
    tree.host_broker("host1")
    [first] = tree.ranks("host0", 0, [5], 8)
    wait_for_sessions(env, 1)
    sh = shell()
    [second] = tree.ranks("host1", 1, [5], 8)
    twice = sh.expect(
        r"\brank 5 is run by two processes \(pid (\d+) on \S+ and pid (\d+) on \S+\); both are listed, "
        r"attach and cast reach the second\n"
    )
    assert twice.groups() == (str(first.proc.pid), str(second.proc.pid))
    stop = str(stop_line(18))
    assert listed(sh.command("list")) == [("5", "{'host': 0, 'gpu': 0}", stop), ("5", "{'host': 1, 'gpu': 0}", stop)]
    wait_for_all_rows(
        env,
        lambda rows: [(r.processes, r.sessions, r.paused) for r in rows] == [(2, 2, 2)],
        ask=wire.ListJobs(),
        answer=wire.JobList,
    )
    assert "Continued 2 ranks: rank ranks[5]" in sh.command("continue").splitlines()
    sh.expect(r"\brank 5 entered post-mortem at rank.py:20: ValueError: rank 5 fails\n")
    wait_for_sessions(env, 2, state="post-mortem")
    assert sh.text.count("is run by two processes") == 1


@pytest.mark.timeout(120)
@pytest.mark.each_python
def test_a_restarted_root_is_rebuilt_from_the_brokers_below(tree, env, shell):
    tree.start_root("--port", str(free_port()))  # its port stays ours while it restarts
    tree.host_broker("host0")
    tree.host_broker("host1")
    tree.ranks("host0", 0, [0, 1], 4)
    tree.ranks("host1", 1, [2, 3], 4)
    wait_for_sessions(env, 4)
    sh = shell()
    assert "rank ranks[0,2] (2)\n0\nrank ranks[1,3] (2)\n1\n" in sh.command("cast rank ranks(:) p rank % 2")
    stop_broker(tree.root)
    tree.start_root("--port", tree.port)
    assert "4 ranks of rank stopped" in sh.command("wait rank 4 --timeout 30", timeout=40).splitlines()
    assert listed(sh.command("list")) == [
        (str(r), f"{{'host': {r // 2}, 'gpu': {r % 2}}}", str(stop_line(18))) for r in range(4)
    ]
    assert "rank ranks[0,2] (2)\n0\nrank ranks[1,3] (2)\n1\n" in sh.command("cast rank ranks(:) p rank % 2")


def round_trip(sock: zmq.Socket, codec: wire.Codec, msg: wire.Message, answer: type[wire.Message]) -> None:
    """Send `msg` and wait for the broker's `answer`: it answers a peer in order, so all that
    peer sent before has been handled."""
    sock.send_multipart(codec.encode(msg))
    while True:
        assert sock.poll(30_000), "the broker stopped answering"
        if any(isinstance(got, answer) for got in codec.decode(sock.recv_multipart())):
            return


@contextlib.contextmanager
def a_third_broker_below(env: dict[str, str], tree: Tree) -> Iterator[tuple[zmq.Socket, wire.Codec]]:
    """A third broker below the root of `two_hosts`, played here at the wire to see what the
    root sends it, with rank 9 (host 2, gpu 1) paused below it."""
    ctx = zmq.Context()
    try:
        codec = wire.Codec(env["MONARCH_PDB_SECRET"].encode())
        below = ctx.socket(zmq.DEALER)
        below.setsockopt(zmq.LINGER, 0)
        below.connect(f"tcp://{tree.upstream}")
        round_trip(below, codec, wire.Hello(role=wire.Role.BROKER, host="host2", pid=1), wire.Welcome)
        row = wire.SessionRow(
            JOB, "rank", 9, {"host": 2, "gpu": 1}, "host2", 1, "<module>", "rank.py", 18, wire.RankState.BREAKPOINT, ""
        )
        below.send_multipart(codec.encode(wire.BranchSessions(sessions=[wire.BranchSession(1, row, "(Pdb) ", True)])))
        wait_for_sessions(env, 5)
        yield below, codec
    finally:
        ctx.destroy(linger=0)


def first_sent(below: zmq.Socket, codec: wire.Codec, kind: type[wire.Message]) -> wire.Message:
    """The first message of `kind` the root sends the broker played below."""
    while True:
        assert below.poll(30_000), f"the root sent the broker below no {kind.__name__}"
        sent = [m for m in codec.decode(below.recv_multipart()) if isinstance(m, kind)]
        if sent:
            return sent[0]


@pytest.mark.timeout(120)
def test_a_cast_goes_down_as_its_selector_and_each_broker_below_picks_its_own_ranks(tree, env, shell):
    env["MONARCH_PDB_HEARTBEAT"] = "10"  # the broker below that this test plays is not lost however slow we are
    tree.two_hosts()
    sh = shell()
    assert sh.command("cast rank ranks(host=1, gpu=0) p rank").startswith("rank ranks[2] (1)\n2\n")
    assert sh.command("cast rank ranks(1:3) p rank").startswith("rank ranks[1] (1)\n1\nrank ranks[2] (1)\n2\n")
    assert sh.command("cast rank ranks(gpu=5) p rank").strip() == (
        "Error processing command: ranks(gpu=5) matches no rank of rank with a session (those are ranks[0-3])"
    )
    assert sh.command("cast rank ranks(zone=1) p rank").strip() == (
        "Error processing command: no dimension 'zone' in rank (its dimensions: host, gpu)"
    )
    with a_third_broker_below(env, tree) as (below, codec):
        sh.child.sendline("cast rank ranks(gpu=1) p rank")
        down = first_sent(below, codec, wire.CastDown)
        assert (down.selector, down.ranks) == ("ranks(gpu=1)", RankSet()), "the selector, not a list of ranks"
        below.send_multipart(
            codec.encode(
                wire.CastResult(
                    ref=down.ref, actor="rank", missing=[], groups=[wire.CastGroup("9\n", "", RankSet.of([9]))]
                )
            )
        )
        sh.expect(r"\nrank ranks\[1\] \(1\)\n1\nrank ranks\[3\] \(1\)\n3\nrank ranks\[9\] \(1\)\n9\n")
        sh.wait_prompt()


@pytest.mark.timeout(120)
def test_stacks_go_down_as_their_selector_and_each_broker_below_picks_its_own_live_ranks(tree, env, shell):
    env["MONARCH_PDB_HEARTBEAT"] = "10"  # the broker below that this test plays is not lost however slow we are
    tree.two_hosts()
    sh = shell()
    stop = stop_line(18)
    assert sh.command("stacks rank ranks(host=1, gpu=0)") == (
        f"rank ranks[2] (1): 1 distinct stack\nrank.py:{stop} <module>  ranks[2] (1)\n"
    )
    assert sh.command("stacks rank ranks(1:3)") == (
        f"rank ranks[1,2] (2): 1 distinct stack\nrank.py:{stop} <module>  ranks[1,2] (2)\n"
    )
    assert sh.command("stacks rank ranks(gpu=5)").strip() == (
        "Error processing command: ranks(gpu=5) matches no rank of rank that runs (those are ranks[0-3])"
    )
    assert sh.command("stacks rank ranks(zone=1)").strip() == (
        "Error processing command: no dimension 'zone' in rank (its dimensions: host, gpu)"
    )
    with a_third_broker_below(env, tree) as (below, codec):
        sh.child.sendline("stacks rank ranks(gpu=1)")
        down = first_sent(below, codec, wire.TakeStacks)
        assert (down.selector, down.ranks) == ("ranks(gpu=1)", RankSet()), "the selector, not a list of ranks"
        elsewhere = [wire.ThreadStack("MainThread", [wire.Frame("rank.py", 30, "<module>")])]
        below.send_multipart(
            codec.encode(
                wire.StacksResult(
                    ref=down.ref, actor="rank", missing=[], groups=[wire.StackGroup(elsewhere, RankSet.of([9]))]
                )
            )
        )
        sh.expect(r"\nrank 9 is elsewhere: rank.py:30 <module>\n")
        sh.wait_prompt()


@pytest.mark.timeout(120)
@pytest.mark.each_python
def test_hostile_input_on_the_upstream_link_is_dropped_and_the_tree_serves_on(tree, env, shell):
    env["MONARCH_PDB_HEARTBEAT"] = "10"  # the broker below, stopped a moment, is not lost however slow we are
    tree.start_root()
    below = tree.host_broker("host0")
    tree.ranks("host0", 0, [0, 1], 2)
    rows = wait_for_sessions(env, 2)
    sh = shell()
    for junk in (os.urandom(4096), b"GET / HTTP/1.1\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", int(tree.port))) as raw:
            raw.sendall(junk)
    key = env["MONARCH_PDB_SECRET"].encode()
    forged_row = dataclasses.replace(rows[0], function="forged", rank=7)
    forged = [
        wire.BranchSessions(sessions=[wire.BranchSession(id=1, row=forged_row, prompt="(Pdb) ", news=True)]),
        wire.BranchRanks(rows=[dataclasses.replace(forged_row, state=wire.RankState.RUNNING, rank=8)], jobs=[]),
    ]
    ctx = zmq.Context()
    try:
        stranger = ctx.socket(zmq.DEALER)
        stranger.setsockopt(zmq.LINGER, 0)
        stranger.connect(f"tcp://{tree.upstream}")
        codec, wrong = wire.Codec(key), wire.Codec(b"wrong key")
        as_broker = wire.Hello(role=wire.Role.BROKER, host="elsewhere", pid=1)
        wrongly_signed = [wrong.encode(msg) for msg in (as_broker, *forged)]
        unsigned = [codec.encode(msg)[1:] for msg in (as_broker, *forged)]
        bad = [[b"one"], [os.urandom(32), os.urandom(200)], *wrongly_signed, *unsigned]
        for frames in bad:
            stranger.send_multipart(frames)
        # A peer with the secret that says hello as a rank process may not speak for a broker.
        posing = ctx.socket(zmq.DEALER)
        posing.setsockopt(zmq.LINGER, 0)
        posing.connect(f"tcp://{tree.upstream}")
        round_trip(posing, codec, wire.Hello(role=wire.Role.RANK, job=JOB, host="elsewhere", pid=1), wire.Welcome)
        os.kill(below.pid, signal.SIGSTOP)  # so that a cast waits on it while the impostor answers
        try:
            sh.child.sendline("cast rank ranks(:) p rank")
            sh.expect("answered 0/2")
            for ref in range(1, 9):
                posing.send_multipart(
                    codec.encode(
                        wire.CastResult(
                            ref=ref,
                            actor="rank",
                            missing=[],
                            groups=[wire.CastGroup(output="forged\n", outcome="", ranks=RankSet.of([0, 1]))],
                        )
                    )
                )
            for msg in (
                *forged,
                wire.CastDown(ref=1, job=JOB, actor="rank", ranks=[0, 1], line="!import os; os._exit(3)", timeout=5.0),
            ):
                posing.send_multipart(codec.encode(msg))
            round_trip(posing, codec, wire.Heartbeat(), wire.Heartbeat)
        finally:
            os.kill(below.pid, signal.SIGCONT)
        sh.expect("numbers: count 2")
        sh.wait_prompt()
        answer = sh.text[sh.text.rindex("cast rank ranks(:) p rank") :]
        assert "rank ranks[0] (1)\n0\nrank ranks[1] (1)\n1\n" in answer and "forged" not in answer, answer
    finally:
        ctx.destroy(linger=0)
    assert listed(sh.command("list")) == [
        ("0", "{'host': 0, 'gpu': 0}", str(stop_line(18))),
        ("1", "{'host': 0, 'gpu': 1}", str(stop_line(18))),
    ]
    assert "forged" not in sh.command("list --all")
    assert sh.command("cast rank ranks(:) p rank % 2").startswith("rank ranks[0] (1)\n0\nrank ranks[1] (1)\n1\n")
    log = stop_broker(tree.root)
    summaries = [line for line in log.splitlines() if "bad messages so far" in line]
    assert 1 <= len(summaries) <= 3, f"one summary at once, one at exit, none per message:\n{log}"
    assert int(re.search(r"dropped (\d+) bad messages", summaries[-1]).group(1)) >= len(bad)
    assert "forged" not in log


@pytest.mark.timeout(60)
@pytest.mark.parametrize("given", ["flag", "environment"])
def test_a_broker_with_an_upstream_and_no_secret_says_so_in_one_line(tree, given):
    tree.start_root()
    args, env = ["--upstream", tree.upstream], tree.host_env("host0")
    if given == "environment":
        args, env = [], dict(env, MONARCH_PDB_UPSTREAM=tree.upstream)
    done = subprocess.run([*MONARCH_PDB, "broker", *args], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr == (
        f"monarch-pdb broker: cannot register with the broker above ({tree.upstream}) without the "
        "secret it was given: set MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE\n"
    )
    assert not (tree.tmp / "host0" / "broker-0.json").exists()


@pytest.mark.timeout(90)
def test_a_host_broker_the_root_refuses_says_why_at_a_slow_pace_and_the_root_names_it_once(tree):
    tree.start_root()
    root_log = BrokerLog(tree.root)
    env = dict(tree.host_env("host0"), MONARCH_PDB_SECRET="not-the-root-s", MONARCH_PDB_HEARTBEAT="0.2")
    below, _ = start_broker(env, "--upstream", tree.upstream)
    tree.brokers.append(below)
    below_log = BrokerLog(below)
    said = below_log.wait_for("monarch-pdb broker: the broker above ", timeout=10)
    assert said == (
        f"monarch-pdb broker: the broker above ({tree.upstream}) refused our signature: is the secret "
        "the same? (MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE)\n"
    )
    named = root_log.wait_for("monarch-pdb broker: refused a peer ")
    assert named == (
        "monarch-pdb broker: refused a peer at 127.0.0.1: what it sends is not signed with our secret "
        "(is the secret the same?)\n"
    )
    quiet = below_log.during(3.0)  # fifteen heartbeats, each a hello the root refuses
    assert "the broker above" not in quiet, quiet
    below_log.stop()
    root_log.stop()
    assert "refused a peer" not in "".join(root_log.lines[root_log.seen :])


@pytest.mark.timeout(90)
def test_a_host_broker_whose_upstream_does_not_answer_says_so_and_tries_on(tree):
    upstream = f"127.0.0.1:{free_port()}"
    env = dict(
        tree.host_env("host0"), MONARCH_PDB_SECRET=tree.env["MONARCH_PDB_SECRET"], MONARCH_PDB_CONNECT_TIMEOUT="2"
    )
    below, _ = start_broker(env, "--upstream", upstream)
    tree.brokers.append(below)
    below_log = BrokerLog(below)
    said = below_log.wait_for("monarch-pdb broker: the broker above ", timeout=20)
    assert said == f"monarch-pdb broker: the broker above ({upstream}) does not answer; trying again every 1 s\n"
    tree.env["MONARCH_DEBUG_SERVER_PORT"] = upstream.rpartition(":")[2]
    tree.root, _ = start_broker(tree.env)
    assert (
        below_log.wait_for("monarch-pdb broker: registered with the broker above at ")
        == f"monarch-pdb broker: registered with the broker above at {upstream}\n"
    )
    below_log.stop()


@pytest.mark.timeout(60)
def test_an_upstream_that_is_not_host_and_port_says_so_in_one_line(tree):
    tree.start_root()
    done = subprocess.run(
        [*MONARCH_PDB, "broker", "--upstream", "root-broker"],
        env=tree.host_env("host0"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert done.stderr == "monarch-pdb: --upstream must be HOST:PORT (the broker above), not 'root-broker'\n"


@pytest.mark.timeout(120)
def test_host_brokers_in_their_own_network_namespaces_register_with_a_root_on_a_third(tree, env, network, shell):
    env["MONARCH_DEBUG_SERVER_HOST"] = BROKER_ADDRESS
    tree.start_root(launcher=in_namespace(network.broker))
    hostnames = [f"sim-host-{host}" for host in range(HOSTS)]
    brokers = []
    for host, namespace in enumerate(network.hosts):
        brokers.append(tree.host_broker(f"host{host}", launcher=in_namespace(namespace, hostnames[host])))
        tree.ranks(
            f"host{host}",
            host,
            [2 * host, 2 * host + 1],
            2 * HOSTS,
            launcher=[*in_namespace(namespace, hostnames[host]), sys.executable],
        )
    sh = shell(command=[*in_namespace(network.broker), *DEBUG_SHELL])
    assert "4 ranks of rank stopped" in sh.command("wait rank 4 --timeout 60", timeout=70).splitlines()
    table = sh.command("list")
    rows = re.findall(r"^\| rank +\| (\d) +\| \{.*?\} +\| (\S+) +\|", table, re.M)
    assert rows == [(str(r), hostnames[r // 2]) for r in range(4)], table
    assert "rank ranks[0,2] (2)\n0\nrank ranks[1,3] (2)\n1\n" in sh.command("cast rank ranks(:) p rank % 2")
    brokers[1].kill()
    brokers[1].wait()
    sh.expect(r"the broker on sim-host-1 stopped answering: its 2 ranks are lost")
    assert sh.command("cast rank ranks(0,1,2,3) p rank").endswith("no answer from rank ranks[2,3] (2): lost\n")


@pytest.mark.timeout(120)
def test_a_host_broker_whose_host_vanishes_without_closing_its_connection_is_lost_after_libzmqs_heartbeats(
    tree, env, network, shell
):
    env["MONARCH_DEBUG_SERVER_HOST"] = BROKER_ADDRESS
    env["MONARCH_PDB_HEARTBEAT"] = "0.5"  # unreachable after 3 beats (1.5 s); dropped after 30 (15 s)
    tree.start_root(launcher=in_namespace(network.broker))
    for host, namespace in enumerate(network.hosts):
        tree.host_broker(f"host{host}", launcher=in_namespace(namespace, f"sim-host-{host}"))
        tree.ranks(
            f"host{host}",
            host,
            [2 * host, 2 * host + 1],
            2 * HOSTS,
            launcher=[*in_namespace(namespace, f"sim-host-{host}"), sys.executable],
        )
    sh = shell(command=[*in_namespace(network.broker), *DEBUG_SHELL])
    assert "4 ranks of rank stopped" in sh.command("wait rank 4 --timeout 60", timeout=70).splitlines()
    network.cut(1)
    sh.expect(r"the broker on sim-host-1 does not answer: its 2 ranks are unreachable until it does\n")
    sh.expect(r"the broker on sim-host-1 stopped answering: its 2 ranks are lost\n", timeout=60)
    assert sh.command("cast rank ranks(0,1,2,3) p rank").endswith("no answer from rank ranks[2,3] (2): lost\n")


@pytest.mark.timeout(120)
def test_a_cast_whose_shell_shows_no_progress_hears_none_from_the_root_or_the_brokers_below(tree, env):
    """A script's cast (no terminal to show `answered 2/4` on) costs no broker a word of progress."""
    tree.two_hosts()
    conn = BrokerConnection.open(settings_for(env))
    try:
        for shown in (True, False):
            heard: list[wire.CastProgress] = []
            ref = conn.start_cast("rank", "ranks(:)", "!import time; time.sleep(1.5); print(rank)", 60, progress=shown)
            result = conn._parts(ref, wire.CastResult, 60, "finish the cast", heard.append)
            assert sorted(rank for group in result.groups for rank in group.ranks) == [0, 1, 2, 3]
            assert bool(heard) == shown, heard
    finally:
        conn.close()
