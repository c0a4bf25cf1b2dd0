"""Fixtures every test shares: a private runtime directory, ephemeral ports, and a check that
the test left no process of its own behind."""

from __future__ import annotations

import os
import select
import signal
import time

import pytest

MARKER = "MONARCH_PDB_TEST_ID"


def processes_with_marker(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose environment carries the marker."""
    found = []
    needle = f"{MARKER}={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
        except OSError:
            continue
        found.append((int(entry), cmd))
    return found


def wait_for_exit(pids: list[int], timeout: float) -> None:
    """Wait until every process in `pids` has exited, or the deadline passes (pidfd, no polling)."""
    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    try:
        while fds:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            done, _, _ = select.select(fds, [], [], left)
            for fd in done:
                os.close(fd)
                fds.remove(fd)
    finally:
        for fd in fds:
            os.close(fd)


@pytest.fixture
def env(tmp_path, request):
    """Environment for the processes a test starts: private runtime dir, port 0, a marker."""
    marker = f"{os.getpid()}-{request.node.nodeid}"
    runtime = tmp_path / "run"
    values = dict(os.environ)
    for name in list(values):
        if name.startswith(("MONARCH_PDB_", "MONARCH_DEBUG_")):
            del values[name]
    values.update(
        {
            MARKER: marker,
            "MONARCH_PDB_RUNTIME_DIR": str(runtime),
            "MONARCH_DEBUG_SERVER_HOST": "127.0.0.1",
            "MONARCH_DEBUG_SERVER_PORT": "0",
            "PYTHONUNBUFFERED": "1",
            "TERM": "dumb",
            "COLUMNS": "200",
            "LINES": "50",
        }
    )
    yield values
    stop_brokers(marker)
    survivors = reap(marker, timeout=10)
    report = getattr(request.node, "call_report", None)
    if report is not None and report.failed:
        for log in sorted(runtime.glob("broker-*.log")):
            print(f"--- {log.name}, written by the brokers the ranks started ---\n{log.read_text(errors='replace')}")
    assert not survivors, f"processes left behind: {survivors}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep the test's own outcome on its item, so a fixture's teardown can tell it failed."""
    report = yield
    if report.when == "call":
        item.call_report = report
    return report


def reap(marker: str, timeout: float) -> list[tuple[int, str]]:
    """Give the marked processes `timeout` to exit, kill those that did not, and name them."""
    wait_for_exit([pid for pid, _ in processes_with_marker(marker)], timeout=timeout)
    survivors = processes_with_marker(marker)
    for pid, _ in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return survivors


def stop_brokers(marker: str) -> None:
    """A broker outlives the job that started it by design; the test ends it politely."""
    for pid, cmd in processes_with_marker(marker):
        if "monarch_pdb.broker" in cmd or "monarch-pdb broker" in cmd:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


@pytest.fixture
def shell(env):
    """Opens `monarch debug` shells on the test's environment (extra arguments and a command
    to run it with, as ShellDriver takes them) and kills them at the end."""
    from shell_driver import ShellDriver

    drivers = []

    def open_shell(*args: str, command: list[str] | None = None) -> ShellDriver:
        driver = ShellDriver(env, *args, command=command)
        drivers.append(driver)
        driver.wait_prompt()
        return driver

    yield open_shell
    for driver in drivers:
        driver.kill()


@pytest.fixture
def example(env):
    """The guide's program with its 16 ranks paused at their breakpoints."""
    from programs import EXAMPLES, Program, wait_for_sessions

    program = Program(env, EXAMPLES / "debugging.py")
    try:
        wait_for_sessions(env, 16)
        yield program
    finally:
        program.stop()


@pytest.fixture
def broker(env):
    """A standalone broker, as `monarch-pdb broker` runs one, so a shell can open first."""
    from programs import start_broker, stop_broker

    proc, _ = start_broker(env)
    yield proc
    stop_broker(proc)


@pytest.fixture
def network():
    """Two hosts and a broker's, as network namespaces (namespaces.py); skipped, saying why,
    where they cannot be made."""
    from namespaces import Network

    net = Network()
    try:
        reason = net.make()
        if reason:
            pytest.skip(f"cannot simulate two hosts here: {reason}")
        yield net
    finally:
        net.remove()
