"""A runtime directory that cannot hold a file (a full disk, a read-only mount): the broker, a
rank and a shell each say so in one line naming the directory and the system's error, and none
leaves a file behind. The directory is a real tmpfs mount, full or read-only, so the errors are
the kernel's own (ENOSPC, EROFS); where mounts cannot be made the tests are skipped."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from programs import free_port, run_debug

BROKEN = {"full": "No space left on device", "read-only": "Read-only file system"}


def mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@pytest.fixture(params=sorted(BROKEN))
def broken_dir(request, tmp_path, env):
    """A runtime directory (tmpfs) that is full or mounted read-only, and the error it gives."""
    where = tmp_path / "rt"
    where.mkdir(mode=0o700)
    made = mount("-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs", str(where))
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        if request.param == "full":
            with open(where / "filler", "wb") as f:
                try:
                    f.write(b"\0" * 65536)
                except OSError:
                    pass
        else:
            assert mount("-o", "remount,ro", str(where)).returncode == 0
        before = sorted(os.listdir(where))
        env["MONARCH_PDB_RUNTIME_DIR"] = str(where)
        env["MONARCH_PDB_CONNECT_TIMEOUT"] = "1"
        yield where, BROKEN[request.param]
        assert sorted(os.listdir(where)) == before, "no file is left behind"
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def said(stderr: str, where, error: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    named = [line for line in lines if f"cannot use {where} as the runtime directory: {error}" in line]
    assert len(named) == 1, stderr
    assert "Traceback" not in stderr, stderr


@pytest.mark.timeout(30)
def test_the_broker_says_in_one_line_why_it_cannot_use_the_runtime_directory(broken_dir, env):
    where, error = broken_dir
    done = subprocess.run(
        [sys.executable, "-m", "monarch_pdb.broker"], env=env, capture_output=True, text=True, timeout=20
    )
    assert done.returncode != 0
    said(done.stderr, where, error)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def rank_stderr(env: dict[str, str], tmp_path) -> str:
    """What a rank that stops at a breakpoint and finds no broker says on its stderr."""
    script = tmp_path / "stops.py"
    script.write_text(
        textwrap.dedent("""
        x = 1
        breakpoint()
        print("went on")
    """)
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=40,
        env=dict(env, PYTHONBREAKPOINT="monarch_pdb.set_trace", MONARCH_PDB_GIVE_UP_AFTER="1"),
    )
    assert "went on" in done.stdout, done.stdout + done.stderr
    return done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("port", ["0", "a port named"])
def test_a_rank_says_why_no_broker_can_start_for_it(broken_dir, env, tmp_path, port):
    """On a port of its own, where nothing listens, too: the directory is why."""
    where, error = broken_dir
    env["MONARCH_DEBUG_SERVER_PORT"] = port if port == "0" else str(free_port())
    said(rank_stderr(env, tmp_path), where, error)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("port", ["0", "a port named"])
def test_a_runtime_directory_under_a_file_is_named_by_rank_and_shell(env, tmp_path, port):
    (tmp_path / "afile").write_text("")
    where = tmp_path / "afile" / "rt"
    env.update(MONARCH_PDB_RUNTIME_DIR=str(where), MONARCH_PDB_CONNECT_TIMEOUT="1")
    env["MONARCH_DEBUG_SERVER_PORT"] = port if port == "0" else str(free_port())
    said(rank_stderr(env, tmp_path), where, "Not a directory")
    done = run_debug(env, "--wait-broker", "1", "-c", "list", timeout=40)
    assert done.returncode != 0
    said(done.stderr, where, "Not a directory")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.timeout(60)
def test_a_shell_says_why_no_broker_answers(broken_dir, env):
    where, error = broken_dir
    done = run_debug(env, "-c", "list", timeout=40)
    assert done.returncode != 0
    said(done.stderr, where, error)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
