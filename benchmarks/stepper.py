"""Two ranks of actor `stepper`, threads of one process paused at a breakpoint above a loop
that `next` can step through for ever: one for the editor's adapter, one for the shell."""

import threading

import monarch_pdb


def rank_main(rank):
    with monarch_pdb.endpoint_call("stepper", rank, {"rank": rank}):
        breakpoint()
        total = 0
        while True:
            total += 1


monarch_pdb.install()
threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in range(2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
