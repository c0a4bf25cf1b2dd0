"""The embedded actor runtime: meshes of local worker processes that run the Monarch
debugging guide's program with only its import line changed.

    from monarch_pdb.actor import Actor, current_rank, endpoint, this_host

Every worker routes `breakpoint()` to monarch-pdb and announces each endpoint call to it.
"""

from monarch_pdb.actor.actor_mesh import ActorMesh, MeshEndpoint
from monarch_pdb.actor.context import current_rank
from monarch_pdb.actor.endpoint import Actor, endpoint
from monarch_pdb.actor.errors import ActorError, RankError, WorkerExited
from monarch_pdb.actor.future import Future
from monarch_pdb.actor.host import HostMesh, this_host
from monarch_pdb.actor.point import Extent, Point
from monarch_pdb.actor.proc_mesh import ProcMesh
from monarch_pdb.actor.value_mesh import ValueMesh

__all__ = [
    "Actor",
    "ActorError",
    "ActorMesh",
    "Extent",
    "Future",
    "HostMesh",
    "MeshEndpoint",
    "Point",
    "ProcMesh",
    "RankError",
    "ValueMesh",
    "WorkerExited",
    "current_rank",
    "endpoint",
    "this_host",
]
