"""Many ranks in one process: `count` threads, each a rank paused at a real `breakpoint()`.

The ranks run the project's own rank process, wire and pdb (only the process is shared), so the
scale benchmark measures the broker with as many sessions as a big job has, on a small machine.
With `own`, every rank has a rank process and a connection of its own, as a rank process would;
with `shared`, the ranks share the process's rank process, as the threads of one process do.

    python emulated.py PARENT_PID FIRST_RANK COUNT shared|own
"""

from __future__ import annotations

import sys
import threading

import zmq
from floors import die_with_parent

import monarch_pdb
from monarch_pdb.rank import debugger
from monarch_pdb.rank.rank_process import RankProcess
from monarch_pdb.settings import load as load_settings

# Enough for pdb's frames; the default 8 MB would reserve far more than a paused rank uses.
STACK_BYTES = 256 * 1024
# A real rank is a process of its own. Here a thousand ranks share one interpreter, and each of
# them waiting for the GIL wakes every switch interval (5 ms by default) to ask for it: at 1,024
# threads that costs the emulator half its CPU, which the broker under test would not see.
SWITCH_INTERVAL = 0.1
SOCKETS_PER_AGENT = 3
"""A link's DEALER and its two wake-up sockets: more than a context's default 1,023 in all."""


def rank_main(rank: int, proc: int, thread: int, rank_process: RankProcess | None) -> None:
    with monarch_pdb.endpoint_call("emu", rank, {"proc": proc, "thread": thread}):
        debugger.set_trace(sys._getframe(), rank_process=rank_process)


def main(first: int, count: int, connections: str) -> None:
    sys.setswitchinterval(SWITCH_INTERVAL)
    threading.stack_size(STACK_BYTES)
    proc = first // count
    context = zmq.Context()
    context.set(zmq.MAX_SOCKETS, SOCKETS_PER_AGENT * count + 64)
    agents = [
        RankProcess(load_settings(), debugger.interrupt, context) if connections == "own" else None
        for _ in range(count)
    ]
    threads = [threading.Thread(target=rank_main, args=(first + t, proc, t, agents[t])) for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    parent, first, count = map(int, sys.argv[1:4])
    die_with_parent(parent)
    main(first, count, sys.argv[4])
