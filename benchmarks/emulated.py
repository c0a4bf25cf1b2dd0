"""Many ranks in one process: `count` threads, each a rank paused at a real `breakpoint()`.

The ranks run the project's own agent, wire and pdb (only the process is shared), so the
scale benchmark measures the broker with as many sessions as a big job has, on a small machine.

    python emulated.py PARENT_PID FIRST_RANK COUNT
"""

from __future__ import annotations

import sys
import threading

import monarch_pdb

from floors import die_with_parent

# Enough for pdb's frames; the default 8 MB would reserve far more than a paused rank uses.
STACK_BYTES = 256 * 1024
# A real rank is a process of its own. Here a thousand ranks share one interpreter, and each of
# them waiting for the GIL wakes every switch interval (5 ms by default) to ask for it: at 1,024
# threads that costs the emulator half its CPU, which the broker under test would not see.
SWITCH_INTERVAL = 0.1


def rank_main(rank: int, proc: int, thread: int) -> None:
    with monarch_pdb.endpoint_call("emu", rank, {"proc": proc, "thread": thread}):
        breakpoint()


def main(first: int, count: int) -> None:
    monarch_pdb.install()
    sys.setswitchinterval(SWITCH_INTERVAL)
    threading.stack_size(STACK_BYTES)
    proc = first // count
    threads = [threading.Thread(target=rank_main, args=(first + t, proc, t)) for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    parent, first, count = map(int, sys.argv[1:])
    die_with_parent(parent)
    main(first, count)
