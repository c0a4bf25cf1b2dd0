"""Four Ray actors on a local Ray instance, each stopping at breakpoint() in a method, then a
Ray task stopping in its function.

    python examples/ray_actors.py            # then, in another terminal: monarch-pdb debug
    MONARCH_PDB_POST_MORTEM=always python examples/ray_actors.py --fail

One line sends the breakpoints of Ray's workers to monarch-pdb instead of Ray's own debugger:
the `worker_process_setup_hook` given to ray.init below. Each actor names its rank with
monarch_pdb.set_identity; `list` shows it under its class name. A task is listed under its
function's name, ranked by its worker's pid.
"""

import sys

import ray

import monarch_pdb


@ray.remote
class Learner:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        monarch_pdb.set_identity(rank=rank)

    def step(self) -> int:
        value = self.rank * 10
        breakpoint()
        return value + 1

    def fail(self) -> int:
        lookup = {"rank": self.rank}
        return lookup["missing"]


@ray.remote
def evaluate(shard: int) -> int:
    score = shard * 100
    breakpoint()
    return score


if __name__ == "__main__":
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=True,
        runtime_env={"worker_process_setup_hook": "monarch_pdb.install"},
    )
    learners = [Learner.remote(rank) for rank in range(4)]
    print("STEPPED", ray.get([learner.step.remote() for learner in learners]), flush=True)
    print("EVALUATED", ray.get(evaluate.remote(3)), flush=True)
    if "--fail" in sys.argv:
        try:
            ray.get([learner.fail.remote() for learner in learners])
        except ray.exceptions.RayTaskError as error:
            print("FAILED with", type(error.cause).__name__, flush=True)
    ray.shutdown()
