"""Stack requests in flight: which processes still owe their ranks' stacks, and the stacks
merged as they come, identical ones sharing one entry however many processes sent them."""

from __future__ import annotations

from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.broker.inflight import Request


def stack_key(threads: object) -> tuple:
    """What makes two reported stacks the same: their frames (threads differing only in name,
    like the threads of two ranks, are the same); ValueError when the report is malformed."""
    if not isinstance(threads, list):
        raise ValueError("threads")
    key = []
    for thread in threads:
        if not (isinstance(thread, list) and len(thread) == 2 and isinstance(thread[0], str) and isinstance(thread[1], list)):
            raise ValueError("thread")
        frames = []
        for frame in thread[1]:
            if not (isinstance(frame, list) and len(frame) == 3 and isinstance(frame[0], str)
                    and isinstance(frame[1], int) and isinstance(frame[2], str)):
                raise ValueError("frame")
            frames.append((frame[0], frame[1], frame[2]))
        key.append(tuple(frames))
    return tuple(key)


@dataclass(kw_only=True)
class StacksInFlight(Request):
    waiting: dict[bytes, list[int]] = field(default_factory=dict)
    """The ranks asked of each process that has not answered yet."""
    merged: dict[tuple, list] = field(default_factory=dict)
    RESULT = wire.StacksResult

    @property
    def done(self) -> bool:
        return not self.waiting

    def report(self, peer: bytes, groups: object) -> None:
        """One process's [threads, ranks] pairs; only the ranks asked of it count."""
        asked = set(self.waiting.pop(peer, ()))
        for group in groups if isinstance(groups, list) else []:
            if not (isinstance(group, list) and len(group) == 2 and isinstance(group[1], list)):
                continue
            threads, ranks = group
            try:
                key = stack_key(threads)
            except ValueError:
                continue
            mine = [r for r in ranks if isinstance(r, int) and r in asked]
            asked.difference_update(mine)
            if key in self.merged:
                self.merged[key][1].extend(mine)
            elif mine:
                self.merged[key] = [threads, mine]
        self.missing += [[rank, "its process sent no stack for it"] for rank in sorted(asked)]

    def lost(self, peer: bytes) -> None:
        self.missing += [[rank, "lost"] for rank in self.waiting.pop(peer, ())]

    def groups(self) -> list[tuple[list, int]]:
        return [([threads, sorted(ranks)],
                 8 * len(ranks) + sum(len(f[0]) + len(f[2]) + 12 for _, frames in threads for f in frames))
                for threads, ranks in self.merged.values()]

    def unanswered(self) -> list[list]:
        return [[rank, "no answer in time"] for ranks in self.waiting.values() for rank in ranks]
