"""Hosts simulated on one machine: a network namespace per host, each under its own hostname,
joined by veth pairs to a bridge in a namespace of their own (where a broker listens). Made by
the tests that need them (as root) and removed afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess

SUBNET = "10.231.0"
BROKER_ADDRESS = f"{SUBNET}.1"
HOSTS = 2


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=20)


def in_namespace(name: str, hostname: str | None = None) -> list[str]:
    """A command prefix that runs in network namespace `name`, and under its own hostname."""
    prefix = ["ip", "netns", "exec", name]
    if hostname is None:
        return prefix
    return [*prefix, *named(hostname)]


def named(hostname: str) -> list[str]:
    """A command prefix that runs under its own hostname (as root), on this host's network."""
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname]


class Network:
    """A broker namespace holding a bridge, and one namespace per host joined to it by a veth pair."""

    def __init__(self) -> None:
        tag = str(os.getpid())
        self.broker = f"mpdb{tag}b"
        self.hosts = [f"mpdb{tag}h{i}" for i in range(HOSTS)]
        self.made: list[str] = []
        self.links = [f"vh{tag}{i}" for i in range(HOSTS)]
        """Each host's end of its veth pair."""
        self.steps = [
            ("ip", "netns", "add", self.broker),
            ("ip", "-n", self.broker, "link", "set", "lo", "up"),
            ("ip", "-n", self.broker, "link", "add", "br0", "type", "bridge"),
            ("ip", "-n", self.broker, "addr", "add", f"{BROKER_ADDRESS}/24", "dev", "br0"),
            ("ip", "-n", self.broker, "link", "set", "br0", "up"),
        ]
        for i, host in enumerate(self.hosts):
            outer, inner = f"vb{tag}{i}", self.links[i]
            self.steps += [
                ("ip", "netns", "add", host),
                ("ip", "-n", host, "link", "set", "lo", "up"),
                ("ip", "link", "add", outer, "type", "veth", "peer", "name", inner),
                ("ip", "link", "set", outer, "netns", self.broker),
                ("ip", "link", "set", inner, "netns", host),
                ("ip", "-n", self.broker, "link", "set", outer, "master", "br0", "up"),
                ("ip", "-n", host, "addr", "add", f"{SUBNET}.{10 + i}/24", "dev", inner),
                ("ip", "-n", host, "link", "set", inner, "up"),
            ]

    def make(self) -> str | None:
        """Build it; the reason it cannot be built, or None."""
        if os.geteuid() != 0:
            return "making network namespaces needs root"
        if shutil.which("ip") is None or shutil.which("unshare") is None:
            return "needs `ip` (iproute2) and `unshare` (util-linux)"
        for step in self.steps:
            done = run(*step)
            if done.returncode != 0:
                return f"`{' '.join(step)}` failed: {done.stderr.strip()}"
            if step[1:3] == ("netns", "add"):
                self.made.append(step[3])
        return None

    def cut(self, host: int) -> None:
        """Take a host off the network as a host that vanishes is: nothing is closed, its
        packets and those sent to it go nowhere."""
        done = run("ip", "-n", self.hosts[host], "link", "set", self.links[host], "down")
        assert done.returncode == 0, done.stderr

    def remove(self) -> None:
        for name in self.made:
            run("ip", "netns", "del", name)
