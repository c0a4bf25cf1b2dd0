"""Many ranks' stacks as one tree, the way STAT shows a hung job: each node a frame with the
set of ranks that pass through it, identical stacks collapsed, and the ranks whose stack is
not the majority's named first (`rank 3 is elsewhere: data.py:88 next_batch`).

The trunk every rank shares from the root (runpy, a worker loop, asyncio) says nothing about
where ranks differ, so it is folded into one line naming its first and last frame; the tree
starts where the stacks first differ, or at the program's own code when they do not.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.client.commands.answers import missing_lines, shortened
from monarch_pdb.client.commands.numbers import summarize
from monarch_pdb.places import by_program, place, where
from monarch_pdb.ranks import RankSet, counted, format_ranks

RANKS_SHOWN = 72
"""Characters of a node's rank set shown; the JSON document has every rank."""
ELSEWHERE_SHOWN = 8
VALUES_SHOWN = 4
"""Distinct values of one local shown by `stacks --locals`; the JSON document has each."""
INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]")


@dataclass
class Node:
    label: str
    ranks: list[int] = field(default_factory=list)
    children: dict[str, Node] = field(default_factory=dict)


def merge(groups: list[wire.StackGroup], every_thread: bool, below: int = 0) -> Node:
    """The prefix tree of every group, outermost frame at the root; the first `below` frames
    of each thread left out."""
    root = Node("")
    for group in groups:
        root.ranks.extend(group.ranks)
        for thread in group.threads:
            node = root
            for label in ([f"thread {thread.name}"] if every_thread else []) + [
                where(f) for f in thread.frames[below:]
            ]:
                child = node.children.get(label)
                if child is None:
                    child = node.children[label] = Node(label)
                child.ranks.extend(group.ranks)
                node = child
    return root


def rank_text(ranks: Iterable[int]) -> str:
    unique = sorted(set(ranks))
    return f"ranks[{shortened(format_ranks(unique), RANKS_SHOWN)}] ({len(unique)})"


def draw(root: Node) -> list[str]:
    """One line per frame: a chain of frames shared by the same ranks stays in one column, a
    fork draws branches, the branch with most ranks first."""
    lines: list[str] = []
    todo = branches(root, "")
    while todo:
        node, lead, connector = todo.pop()
        lines.append(f"{lead}{connector}{node.label}  {rank_text(node.ranks)}")
        todo += branches(node, lead + ("│  " if connector == "├─ " else "   " if connector else ""))
    return lines


def branches(node: Node, lead: str) -> list[tuple[Node, str, str]]:
    """The children to draw, last first (they are popped): one child continues the column."""
    children = ordered(node)
    if len(children) == 1:
        return [(children[0], lead, "")]
    return [(c, lead, "└─ " if i == len(children) - 1 else "├─ ") for i, c in reversed(list(enumerate(children)))]


def ordered(node: Node) -> list[Node]:
    return sorted(node.children.values(), key=lambda c: (-len(set(c.ranks)), c.label))


def trunk(groups: list[wire.StackGroup], every_thread: bool) -> list[wire.Frame]:
    """The outermost frames every rank shares, to fold into one line: up to where the stacks
    first differ, or, when they do not, up to the program's own code (else all but the
    innermost frame). None of one frame only, nor with every thread shown, whose threads
    start apart."""
    stacks = [thread.frames for group in groups for thread in group.threads]
    if every_thread or not stacks:
        return []
    first = stacks[0]
    if all(frames == first for frames in stacks):
        shared = next((depth for depth, frame in enumerate(first) if by_program(frame)), len(first) - 1)
    else:
        shared = 0
        while all(len(frames) > shared and frames[shared] == first[shared] for frames in stacks):
            shared += 1
    return first[:shared] if shared >= 2 else []


def tree(groups: list[wire.StackGroup], every_thread: bool, common: list[wire.Frame]) -> Node:
    """The merged tree below the `common` trunk, which heads it as one node."""
    root = merge(groups, every_thread, len(common))
    if not common:
        return root
    label = f"{where(common[0])} … {where(common[-1])} ({len(common)} frames)"
    return Node("", root.ranks, {label: Node(label, list(root.ranks), root.children)})


def elsewhere(groups: list[wire.StackGroup]) -> list[tuple[list[int], str]]:
    """Ranks whose (first thread's) stack is not the one most ranks share, and where they are;
    none when no stack holds most ranks, since a line per group would repeat the tree."""
    by_stack: dict[tuple, list[int]] = {}
    innermost: dict[tuple, str] = {}
    for group in groups:
        frames = group.threads[0].frames if group.threads else []
        key = tuple(where(f) for f in frames)
        by_stack.setdefault(key, []).extend(group.ranks)
        innermost[key] = place(frames)
    if len(by_stack) < 2:
        return []
    counts = Counter({key: len(ranks) for key, ranks in by_stack.items()})
    common, most = counts.most_common(1)[0]
    if 2 * most <= counts.total():
        return []
    others = sorted((sorted(r), innermost[k]) for k, r in by_stack.items() if k != common)
    return sorted(others, key=lambda pair: (len(pair[0]), pair[0]))


def elsewhere_line(actor: str, ranks: list[int], place: str) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]} is elsewhere: {place}"
    return f"{rank_text(ranks)} are elsewhere: {place}"


def call_site(frame: wire.Frame) -> str:
    """Where a frame is, an installed package's file named from its package down."""
    installed = INSTALLED.split(frame.file)
    name = installed[-1] if len(installed) > 1 else os.path.basename(frame.file)
    return f"{name}:{frame.line} {frame.function}"


def in_calls(result: wire.StacksResult) -> list[tuple[list[int], str, bool]]:
    """Ranks by the innermost Python frame of their own thread: the call they are in, and
    whether it holds the GIL (their stacks were read from outside, their agents silent)."""
    by_place: dict[tuple[str, bool], list[int]] = {}
    for group in result.groups:
        frames = [f for f in group.threads[0].frames if not f.native] if group.threads else []
        if frames:
            by_place.setdefault((call_site(frames[-1]), group.outside), []).extend(group.ranks)
    return sorted(((sorted(r), *key) for key, r in by_place.items()), key=lambda found: found[0])


def locals_lines(result: wire.StacksResult) -> list[str]:
    """For each group, the locals of the frame `peek` reads (its program's innermost), each
    value that several ranks hold once; a local that is a number on every rank gets the
    numbers line a cast's answers get."""
    lines: list[str] = []
    for group in result.groups:
        if not group.locals:
            continue
        frames = group.threads[0].frames if group.threads else []
        lines.append(f"locals of {place(frames)}  {rank_text(group.ranks)}")
        by_name: dict[str, list[wire.LocalValue]] = {}
        for value in group.locals:
            by_name.setdefault(value.name, []).append(value)
        for name, values in sorted(by_name.items()):
            values.sort(key=lambda v: (-len(v.ranks), min(v.ranks)))
            if len(values) == 1 and len(values[0].ranks) == len(set(group.ranks)):
                lines.append(f"  {name} = {values[0].value}")
                continue
            lines += [f"  {name} = {v.value}  {rank_text(v.ranks)}" for v in values[:VALUES_SHOWN]]
            if len(values) > VALUES_SHOWN:
                rest = values[VALUES_SHOWN:]
                lines.append(
                    f"  {name}: {len(rest)} more values over {counted(sum(len(v.ranks) for v in rest), 'rank')}"
                )
            summary = summarize([wire.CastGroup(v.value, "", RankSet.of(v.ranks)) for v in values])
            if summary is not None:
                lines.append(f"  {name} {summary.line()}")
    return lines


def text(result: wire.StacksResult, every_thread: bool, full: bool = False) -> str:
    """The tree, its trunk folded unless `full`, then the locals of each group if asked for."""
    if not result.groups:
        return missing_lines(result)
    total = sorted({r for group in result.groups for r in group.ranks})
    odd = elsewhere(result.groups)
    head = [f"{result.actor} {rank_text(total)}: {counted(len(result.groups), 'distinct stack')}"]
    head += [elsewhere_line(result.actor, ranks, place) for ranks, place in odd[:ELSEWHERE_SHOWN]]
    if len(odd) > ELSEWHERE_SHOWN:
        rest = sum(len(r) for r, _ in odd[ELSEWHERE_SHOWN:])
        head.append(f"... and {counted(rest, 'more rank')} in {counted(len(odd) - ELSEWHERE_SHOWN, 'other place')}")
    common = [] if full else trunk(result.groups, every_thread)
    body = draw(tree(result.groups, every_thread, common))
    return "\n".join(head + body + locals_lines(result) + outside_lines(result)) + "\n" + missing_lines(result)


def outside_lines(result: wire.StacksResult) -> list[str]:
    """Which ranks' stacks were read from outside their processes, and why that was needed."""
    outside = sorted({r for group in result.groups if group.outside for r in group.ranks})
    if not outside:
        return []
    native = any(f.native for group in result.groups for t in group.threads for f in t.frames)
    why = "native frames asked for" if native else "their agents did not answer, C code holding the GIL"
    return [f"{result.actor} {rank_text(outside)}: read from outside their processes (frames only): {why}"]


def frame_document(frame: wire.Frame) -> dict:
    return {
        "file": frame.file,
        "line": frame.line,
        "function": frame.function,
        **({"native": True} if frame.native else {}),
    }


def document(result: wire.StacksResult, every_thread: bool = False, full: bool = False) -> dict:
    """The stacks as JSON: the `common` trunk (unless `full`), then each group's frames below it."""
    common = [] if full else trunk(result.groups, every_thread)
    return {
        "actor": result.actor,
        "common": [frame_document(f) for f in common],
        "groups": [
            {
                "ranks": list(group.ranks),
                "threads": [
                    {"name": thread.name, "frames": [frame_document(f) for f in thread.frames[len(common) :]]}
                    for thread in group.threads
                ],
                **(
                    {"locals": [{"name": v.name, "value": v.value, "ranks": v.ranks} for v in group.locals]}
                    if group.locals
                    else {}
                ),
                **({"outside": True} if group.outside else {}),
            }
            for group in result.groups
        ],
        "elsewhere": [{"ranks": ranks, "where": place} for ranks, place in elsewhere(result.groups)],
        "missing": [{"rank": m.rank, "reason": m.reason} for m in result.missing],
    }
