"""Stack requests in flight: which processes still owe their ranks' stacks, and the stacks
merged as they come, identical ones sharing one entry however many processes sent them."""

from __future__ import annotations

from dataclasses import dataclass, field

from monarch_pdb import wire


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


@dataclass
class StacksInFlight:
    id: int
    shell: bytes
    ref: int
    actor: str
    deadline: float
    waiting: dict[bytes, list[int]] = field(default_factory=dict)
    merged: dict[tuple, list] = field(default_factory=dict)
    missing: list[list] = field(default_factory=list)

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

    def result(self, part_size: int) -> list[wire.StacksResult]:
        """Most common stack first, in parts of about `part_size` bytes; processes that did not
        answer in time have their ranks named."""
        missing = self.missing + [[rank, "no answer in time"] for ranks in self.waiting.values() for rank in ranks]
        ordered = sorted(self.merged.values(), key=lambda g: (-len(g[1]), min(g[1])))
        parts: list[list] = [[]]
        size = 0
        for threads, ranks in ordered:
            weight = 8 * len(ranks) + sum(len(f[0]) + len(f[2]) + 12 for _, frames in threads for f in frames)
            if parts[-1] and size + weight > part_size:
                parts.append([])
                size = 0
            parts[-1].append([threads, sorted(ranks)])
            size += weight
        last = len(parts) - 1
        return [
            wire.StacksResult(ref=self.ref, actor=self.actor, groups=groups,
                              missing=sorted(missing) if n == last else [], more=n != last)
            for n, groups in enumerate(parts)
        ]
