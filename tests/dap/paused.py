"""`python paused.py N`: N ranks of actor `emu`, each a thread of one process paused at a real
breakpoint, for what an editor costs with many threads."""

import sys
import threading

import monarch_pdb


def rank_main(rank):
    with monarch_pdb.endpoint_call("emu", rank, {"thread": rank}):
        breakpoint()


monarch_pdb.install()
threading.stack_size(256 * 1024)
threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(int(sys.argv[1]))]
for t in threads:
    t.start()
for t in threads:
    t.join()
