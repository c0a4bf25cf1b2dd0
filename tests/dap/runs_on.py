"""Two ranks paused at a breakpoint; once continued, rank 0 returns and rank 1 runs on until
it is paused (the editor's pause and the shell's interrupt)."""

import time

from monarch_pdb.actor import Actor, current_rank, endpoint, this_host


class Worker(Actor):
    @endpoint
    def work(self):
        breakpoint()
        while current_rank().rank == 1:
            time.sleep(0.02)


if __name__ == "__main__":
    this_host().spawn_procs(per_host={"gpu": 2}).spawn("worker", Worker).work.call().get()
