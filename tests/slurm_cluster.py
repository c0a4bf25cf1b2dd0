"""A private one-node Slurm cluster for one test, so ranks get the variables a real srun sets
rather than ones a test invents.

slurmctld and slurmd run as the test's children, with their configuration, state and spool in
the test's temporary directory and ports chosen at run time. Authentication is auth/none, which
Slurm 22.05 still ships, so there is no munge daemon to run. Needs root (slurmd starts the ranks
as the user who ran srun) and Debian's slurm-wlm.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from conftest import MARKER, processes_with_marker, reap, wait_for_exit

SRUN, SLURMCTLD, SLURMD = (shutil.which(name) for name in ("srun", "slurmctld", "slurmd"))
SKIP_REASON = (
    "srun, slurmctld or slurmd is not installed (Debian: apt-get install slurm-wlm)"
    if None in (SRUN, SLURMCTLD, SLURMD)
    else "slurmd must run as root to start the ranks"
    if os.geteuid() != 0
    else None
)
PARTITION = "test"

# SlurmctldDebug=debug: slurmctld then logs the node's registration, the event the fixture waits on.
# config_overrides: the node offers 4 CPUs, for 4 ranks, on a machine with fewer.
CONF = """\
ClusterName=test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmctldDebug=debug
SlurmdParameters=config_overrides
StateSaveLocation={directory}/state
SlurmdSpoolDir={directory}/spool
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile={directory}/slurmd.pid
NodeName={node} NodeAddr=127.0.0.1 CPUs=4
PartitionName={partition} Nodes={node} Default=YES State=UP
"""


class SlurmCluster:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        """The test's environment plus SLURM_CONF, for srun and Slurm's other commands."""

    def run(self, *command: str) -> str:
        """A Slurm command (squeue, scancel ...) against this cluster; returns what it printed."""
        return subprocess.run(command, env=self.env, check=True, capture_output=True, text=True, timeout=30).stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _copy_log(stream: IO[str], path: Path, wanted: str, seen: threading.Event) -> None:
    """Keep a daemon's log in a file, and tell when it logs `wanted`."""
    with open(path, "w") as log:
        for line in stream:
            log.write(line)
            log.flush()
            if wanted in line:
                seen.set()


@pytest.fixture
def slurm(env: dict[str, str], tmp_path: Path) -> Iterator[SlurmCluster]:
    """The cluster with its node idle; afterwards no job step of it, nor daemon, is left.

    The daemons and their job steps carry a marker of their own, so the cluster's teardown can
    wait for exactly them, while the ranks carry the test's, which the conftest checks.
    """
    directory = tmp_path / "slurm"
    for sub in ("state", "spool"):
        (directory / sub).mkdir(parents=True)
    node = socket.gethostname().split(".")[0]
    conf = directory / "slurm.conf"
    conf.write_text(
        CONF.format(
            node=node, ctld_port=_free_port(), slurmd_port=_free_port(), directory=directory, partition=PARTITION
        )
    )
    cluster = SlurmCluster(dict(env, SLURM_CONF=str(conf)))
    daemons_marker = f"{env[MARKER]} slurm"
    daemon_env = dict(cluster.env, **{MARKER: daemons_marker})
    ctld = subprocess.Popen(
        [SLURMCTLD, "-D", "-f", str(conf)],
        env=daemon_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    registered = threading.Event()
    ctld_log = directory / "slurmctld.log"
    copier = threading.Thread(
        target=_copy_log, args=(ctld.stdout, ctld_log, f"node {node} registered", registered), daemon=True
    )
    copier.start()
    with open(directory / "slurmd.log", "w") as slurmd_log:
        slurmd = subprocess.Popen(
            [SLURMD, "-D", "-f", str(conf)],
            env=daemon_env,
            stdin=subprocess.DEVNULL,
            stdout=slurmd_log,
            stderr=subprocess.STDOUT,
        )
    try:
        assert registered.wait(30), f"slurmd never registered with slurmctld:\n{ctld_log.read_text()}"
        yield cluster
    finally:
        # A failed test leaves ranks paused: kill them, and let their steps end while slurmd runs.
        subprocess.run(["scancel", "--signal=KILL", f"--partition={PARTITION}"], env=cluster.env, timeout=30)
        wait_for_exit(
            [pid for pid, cmd in processes_with_marker(daemons_marker) if cmd.startswith("slurmstepd")], timeout=30
        )
        for daemon in (slurmd, ctld):
            daemon.terminate()
            daemon.wait(timeout=30)
        copier.join(timeout=10)
        left = reap(daemons_marker, timeout=10)
        assert not left, f"Slurm processes left behind: {left}"
