"""The machine this program runs on, where proc meshes are started."""

from __future__ import annotations

from collections.abc import Mapping

from monarch_pdb.actor.point import Extent
from monarch_pdb.actor.proc_mesh import ProcMesh


class HostMesh:
    def spawn_procs(self, per_host: Mapping[str, int] | None = None) -> ProcMesh:
        """One worker process per point of `per_host`, e.g. {"host": 4, "gpu": 4} starts 16 with
        rank = host * 4 + gpu; no dimensions starts one."""
        return ProcMesh.start(Extent.of(per_host or {}))


def this_host() -> HostMesh:
    return HostMesh()
