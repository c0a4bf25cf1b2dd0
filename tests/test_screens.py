"""What a person reads at a thousand ranks: `list` by groups of ranks past a screenful, host
names compressed, and output taller than the terminal through a pager, as git does."""

from __future__ import annotations

import json
import pprint

import pytest
from programs import run_debug
from shell_driver import ShellDriver

from monarch_pdb.client.hostlist import compress

def fake_pager(tmp_path) -> tuple[str, object]:
    """A pager that keeps what it was given, in the order given; returns it and its record."""
    record = tmp_path / "paged.txt"
    script = tmp_path / "pager.sh"
    script.write_text(f"#!/bin/sh\ncat >> '{record}'\n")
    script.chmod(0o755)
    return str(script), record


@pytest.mark.parametrize("names, text", [
    ([f"node{n:03d}" for n in range(1, 129)], "node[001-128]"),
    ([f"node{n}" for n in range(128, 0, -1)], "node[1-128]"),
    ([f"node{n:03d}" for n in (1, 2, 3, 5, 10, 100)], "node[001-003,005,010,100]"),
    (["login", "node2", "node1", "node3", "gpu01", "gpu02", "node2"], "gpu[01,02],login,node[1-3]"),
    (["a1.cluster", "a2.cluster", "a3.cluster", "b7.cluster"], "a[1-3].cluster,b7.cluster"),
    (["rack1-node3", "rack1-node4", "rack2-node3"], "rack1-node[3,4],rack2-node3"),
    (["n01", "n2"], "n01,n2"),
    (["vm"], "vm"),
    ([], ""),
])
def test_host_names_compress_as_a_slurm_hostlist(names, text):
    assert compress(names) == text


@pytest.mark.timeout(120)
def test_output_taller_than_the_terminal_goes_through_the_pager_at_a_terminal_only(env, example, tmp_path):
    pager, paged = fake_pager(tmp_path)
    tall = "cast debugee ranks(:) pp list(range(60))"
    answer = "debugee ranks[0-15] (16)\n" + pprint.pformat(list(range(60))) + "\n"
    with_pager = dict(env, PAGER=pager)
    sh = ShellDriver(with_pager)
    try:
        sh.wait_prompt()
        assert sh.command(tall) == "", "nothing of it scrolls by on the terminal"
        assert paged.read_text() == answer
        listing = sh.command("list")
        assert listing.count("\n| debugee ") == 16 and paged.read_text() == answer, "the guide's list fits: not paged"
        sh.command("set pager cat")
        assert sh.command(tall) == answer
    finally:
        sh.kill()
    paged.unlink()

    off = ShellDriver(dict(with_pager, MONARCH_PDB_PAGER=""))
    try:
        off.wait_prompt()
        assert off.command(tall) == answer, "MONARCH_PDB_PAGER='' turns the pager off"
    finally:
        off.kill()
    documents = ShellDriver(with_pager, "--json")
    try:
        documents.wait_prompt()
        assert json.loads(documents.command(tall))["groups"][0]["output"] == answer.split("\n", 1)[1]
    finally:
        documents.kill()
    script = run_debug(with_pager, "-c", tall)
    assert script.returncode == 0 and script.stdout == answer
    assert not paged.exists(), "never for --json, a script, or without a terminal"
