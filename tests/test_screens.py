"""What a person reads at a thousand ranks: `list` by groups of ranks past a screenful, host
names compressed, and output taller than the terminal through a pager, as git does."""

from __future__ import annotations

import pytest

from monarch_pdb.client.hostlist import compress


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
