"""What keeps a broker's sessions to their owner: a private secret, signatures that a wrong
secret cannot make, encryption on request, no listening beyond loopback without a secret, and a
record of every command sent to ranks."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import zmq
from programs import EXAMPLES, Program, settings_for, start_broker, stop_broker, wait_for_sessions

from monarch_pdb import discovery, wire

DEBUG = [os.path.join(os.path.dirname(sys.executable), "monarch-pdb"), "debug"]


@pytest.mark.timeout(30)
def test_the_connection_file_is_private(env, broker):
    settings = settings_for(env)
    assert os.stat(settings.runtime_dir).st_mode & 0o777 == 0o700
    assert os.stat(discovery.connection_file(settings)).st_mode & 0o777 == 0o600


@pytest.mark.timeout(30)
def test_a_shell_with_the_wrong_secret_is_told_at_once(env, broker):
    """Told, not timed out: the shell would wait two minutes for a broker that says nothing,
    and this run may take only a fraction of that."""
    wrong = dict(env, MONARCH_PDB_SECRET="not-the-secret", MONARCH_PDB_CONNECT_TIMEOUT="120")
    done = subprocess.run([*DEBUG, "-c", "list"], env=wrong, capture_output=True, text=True, timeout=20)
    assert done.returncode == 2
    assert done.stderr.startswith("monarch-pdb: authentication failed: the broker refuses our messages")
    assert "not-the-secret" not in done.stderr + done.stdout


@pytest.mark.timeout(30)
def test_a_refused_shell_is_told_which_setting_gave_its_secret(env, broker, tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text("not-the-secret\n")
    os.chmod(secret_file, 0o600)
    done = subprocess.run(
        [*DEBUG, "-c", "list"],
        env=dict(env, MONARCH_PDB_SECRET_FILE=str(secret_file)),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "monarch-pdb: authentication failed: the broker refuses our messages; its "
        f"secret is not the one we use (from MONARCH_PDB_SECRET_FILE, {secret_file})"
    )


@pytest.mark.timeout(30)
def test_a_secret_readable_by_others_is_refused_with_the_fix(env, broker, tmp_path):
    settings = settings_for(env)
    os.chmod(discovery.connection_file(settings), 0o644)
    done = subprocess.run([*DEBUG, "-c", "list"], env=env, capture_output=True, text=True, timeout=20)
    path = discovery.connection_file(settings)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"monarch-pdb: {path} may be read by other users, so it cannot hold a secret; run: chmod 600 {path}"
    )
    os.chmod(path, 0o600)
    secret_file = tmp_path / "secret"
    secret_file.write_text(discovery.read_connection_file(settings).secret + "\n")
    os.chmod(secret_file, 0o640)
    done = subprocess.run(
        [*DEBUG, "-c", "list"],
        env=dict(env, MONARCH_PDB_SECRET_FILE=str(secret_file)),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 2 and f"run: chmod 600 {secret_file}" in done.stderr
    os.chmod(secret_file, 0o600)
    done = subprocess.run(
        [*DEBUG, "-c", "list"],
        env=dict(env, MONARCH_PDB_SECRET_FILE=str(secret_file)),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 0 and done.stdout.strip() == "No active breakpoints."


@pytest.mark.timeout(60)
def test_the_audit_log_names_every_command_sent_to_ranks(env, tmp_path):
    audit = tmp_path / "audit.log"
    broker, _ = start_broker(env, "--audit", str(audit))
    program = Program(env, EXAMPLES / "debugging.py")
    try:
        wait_for_sessions(env, 16)
        done = subprocess.run(
            [
                *DEBUG,
                "-c",
                "cast debugee ranks(host=1) p rank",
                "-c",
                "attach debugee 2",
                "-c",
                "!x = 1",
                "-c",
                "detach",
                "-c",
                "continue",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
    finally:
        program.stop()
        stop_broker(broker)
    lines = audit.read_text().splitlines()
    who = r"\S+ \S+@\S+ pid \d+ job=debugging-\d+ actor=debugee"
    assert len(lines) == 3
    assert re.fullmatch(rf"{who} ranks=4-7 command='p rank'", lines[0])
    assert re.fullmatch(rf"{who} ranks=2 command='!x = 1'", lines[1])
    assert re.fullmatch(rf"{who} ranks=0-15 command='continue \(top level\)'", lines[2])


@pytest.mark.timeout(60)
def test_curve_encrypts_every_connection_and_refuses_plaintext(env, tmp_path):
    broker, first = start_broker(env, "--curve")
    assert "encrypted with CURVE" in first
    script = tmp_path / "secretive.py"
    script.write_text("token = 'classified-value-123'\nbreakpoint()\n")
    program = Program(dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", RANK="0"), script, cwd=tmp_path)
    try:
        [row] = wait_for_sessions(env, 1)
        done = subprocess.run(
            [*DEBUG, "-c", "cast secretive ranks(0) p token"], env=env, capture_output=True, text=True, timeout=30
        )
        assert done.stdout == "secretive ranks[0] (1)\n'classified-value-123'\n", done.stderr
        conn = discovery.read_connection_file(settings_for(env))
        assert conn.curve
        ctx = zmq.Context()
        plain = ctx.socket(zmq.DEALER)
        plain.setsockopt(zmq.SNDTIMEO, 1500)
        plain.connect(conn.router)
        try:
            plain.send_multipart(
                wire.Codec(conn.key).encode(wire.Hello(role="shell", client=wire.Client.SHELL, host="h", pid=1))
            )
        except zmq.Again:
            pass  # the broker dropped its connection at the handshake before the message was queued
        assert plain.poll(1500) == 0, "a peer without CURVE gets nothing back"
        plain.close(linger=0)
        ctx.term()
    finally:
        program.stop()
        stop_broker(broker)


@pytest.mark.timeout(30)
def test_listening_beyond_loopback_without_a_secret_is_refused(env):
    done = subprocess.run(
        [sys.executable, "-m", "monarch_pdb.broker", "--host", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "monarch-pdb broker: refusing to listen on 0.0.0.0 without a secret: "
        "set MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE"
    )
