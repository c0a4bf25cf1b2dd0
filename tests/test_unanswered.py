"""When no broker answers, the broker, a rank and a shell each say what is at its address: a
name that does not resolve, nothing listening, or a broker that refuses us for want of its
secret (naming the setting the secret we sign with came from)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from programs import free_port, run_debug, start_broker, stop_broker

NOWHERE = "nosuch.invalid"
"""A name that never resolves (RFC 6761)."""
UNRESOLVED = f"the name {NOWHERE} does not resolve"
STOPS = textwrap.dedent("""
    x = 1
    breakpoint()
    print("went on")
""")


@pytest.fixture
def impatient(env):
    env.update(MONARCH_PDB_CONNECT_TIMEOUT="1", MONARCH_PDB_GIVE_UP_AFTER="1")
    return env


def rank_output(env: dict[str, str], tmp_path) -> str:
    script = tmp_path / "stops.py"
    script.write_text(STOPS)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace"),
    )
    assert "went on" in done.stdout, done.stdout + done.stderr
    return done.stderr


@pytest.mark.timeout(60)
def test_a_host_name_that_does_not_resolve_is_named_by_broker_rank_and_shell(impatient, tmp_path):
    env = dict(
        impatient, MONARCH_DEBUG_SERVER_HOST=NOWHERE, MONARCH_DEBUG_SERVER_PORT="27123", MONARCH_PDB_SECRET="s" * 64
    )
    broker = subprocess.run(
        [sys.executable, "-m", "monarch_pdb.broker"], env=env, capture_output=True, text=True, timeout=30
    )
    assert broker.returncode != 0
    assert broker.stderr.strip().splitlines() == [
        f"monarch-pdb broker: cannot listen on {NOWHERE}:27123: {UNRESOLVED}: Name or service not known"
    ], broker.stderr
    assert f"no debug broker answers at {NOWHERE}:27123 ({UNRESOLVED}" in rank_output(env, tmp_path)
    shell = run_debug(env, "-c", "list")
    assert shell.returncode == 2
    assert shell.stderr.startswith(f"monarch-pdb: no debug broker answers at {NOWHERE}:27123 ({UNRESOLVED}"), (
        shell.stderr
    )


@pytest.mark.timeout(60)
def test_a_shell_says_nothing_listens_at_the_brokers_address(impatient):
    port = free_port()
    shell = run_debug(dict(impatient, MONARCH_DEBUG_SERVER_PORT=str(port)), "--wait-broker", "1", "-c", "list")
    assert shell.returncode == 2
    assert (
        f"no debug broker answers at 127.0.0.1:{port} (nothing listens at 127.0.0.1:{port}; looked for " in shell.stderr
    ), shell.stderr


@pytest.mark.timeout(60)
def test_a_shell_without_the_brokers_secret_says_so_and_one_with_another_names_where_it_came_from(impatient, tmp_path):
    port = free_port()
    served = dict(impatient, MONARCH_DEBUG_SERVER_PORT=str(port), MONARCH_PDB_SECRET="a" * 64)
    broker, _ = start_broker(served)
    try:
        elsewhere = dict(served, MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "elsewhere"))
        del elsewhere["MONARCH_PDB_SECRET"]
        shell = run_debug(elsewhere, "-c", "list")
        assert shell.returncode == 2
        assert shell.stderr.startswith(
            f"monarch-pdb: no debug broker answers at 127.0.0.1:{port} (a ZeroMQ program "
            f"listens at 127.0.0.1:{port}, but there is no secret to sign with"
        ), shell.stderr
        assert "MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE" in shell.stderr
        wrong = run_debug(dict(elsewhere, MONARCH_PDB_SECRET="b" * 64), "-c", "list")
        assert wrong.returncode == 2
        assert re.search(r"refuses our messages.*\(from MONARCH_PDB_SECRET\)$", wrong.stderr.strip()), wrong.stderr
        secret_file = tmp_path / "secret"
        secret_file.write_text("c" * 64)
        secret_file.chmod(0o600)
        wrong = run_debug(dict(elsewhere, MONARCH_PDB_SECRET_FILE=str(secret_file)), "-c", "list")
        assert wrong.returncode == 2
        assert wrong.stderr.strip().endswith(f"(from MONARCH_PDB_SECRET_FILE, {secret_file})"), wrong.stderr
    finally:
        stop_broker(broker)


@pytest.mark.timeout(90)
def test_a_host_named_is_the_one_used_though_this_hosts_broker_runs_on_the_port(impatient):
    """This host's broker and its file are for the host it listens on: a shell told another
    host (an unresolvable name; a loopback address where nothing listens) looks there, and says
    what it found there, rather than listing this host's ranks with the file's secret."""
    port = free_port()
    served = dict(impatient, MONARCH_DEBUG_SERVER_PORT=str(port))
    broker, _ = start_broker(served)
    try:
        named = run_debug(served, "--host", NOWHERE, "--port", str(port), "-c", "list")
        assert named.returncode == 2, named.stdout + named.stderr
        assert named.stderr.startswith(f"monarch-pdb: no debug broker answers at {NOWHERE}:{port} ({UNRESOLVED}"), (
            named.stderr
        )
        assert len(named.stderr.strip().splitlines()) == 1 and not named.stdout, named.stdout + named.stderr
        from_env = run_debug(dict(served, MONARCH_DEBUG_SERVER_HOST=NOWHERE), "-c", "list")
        assert from_env.returncode == 2 and UNRESOLVED in from_env.stderr, from_env.stdout + from_env.stderr
        unreached = run_debug(served, "--host", "127.0.0.2", "--wait-broker", "1", "-c", "list")
        assert unreached.returncode == 2, unreached.stdout + unreached.stderr
        assert f"no debug broker answers at 127.0.0.2:{port} (nothing listens at 127.0.0.2:{port}" in unreached.stderr
        here = run_debug(served, "--host", "localhost", "-c", "list")
        assert here.returncode == 0, here.stdout + here.stderr
    finally:
        stop_broker(broker)
