"""Many ranks' stacks as one tree, the way STAT shows a hung job: each node a frame with the
set of ranks that pass through it, identical stacks collapsed, and the ranks whose stack is
not the majority's named first (`rank 3 is elsewhere: data.py:88 next_batch`)."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field

from monarch_pdb import wire
from monarch_pdb.client.answers import missing_lines
from monarch_pdb.ranks import format_ranks

RANKS_SHOWN = 72
"""Characters of a node's rank set shown; the JSON document has every rank."""
ELSEWHERE_SHOWN = 8
LIBRARY = re.compile(r"[/\\](?:lib[/\\]python\d[^/\\]*|site-packages|dist-packages)[/\\]")


@dataclass
class Node:
    label: str
    ranks: list[int] = field(default_factory=list)
    children: dict[str, Node] = field(default_factory=dict)


def where(frame: list) -> str:
    filename, line, function = frame
    return f"{os.path.basename(filename)}:{line} {function}"


def merge(groups: list, every_thread: bool) -> Node:
    """The prefix tree of every [threads, ranks] group, outermost frame at the root."""
    root = Node("")
    for threads, ranks in groups:
        root.ranks.extend(ranks)
        for name, frames in threads:
            node = root
            for label in ([f"thread {name}"] if every_thread else []) + [where(f) for f in frames]:
                child = node.children.get(label)
                if child is None:
                    child = node.children[label] = Node(label)
                child.ranks.extend(ranks)
                node = child
    return root


def rank_text(ranks: list[int]) -> str:
    unique = sorted(set(ranks))
    text = format_ranks(unique)
    if len(text) > RANKS_SHOWN:
        text = text[:RANKS_SHOWN].rsplit(",", 1)[0] + ",..."
    return f"ranks[{text}] ({len(unique)})"


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


def program_frame(frames: list) -> list:
    """The innermost frame of the program itself rather than of Python's library or an
    installed package (judged by its path): where a rank is, in its author's words."""
    for frame in reversed(frames):
        name = frame[0]
        if not (name.startswith("<") or LIBRARY.search(name)):
            return frame
    return frames[-1]


def elsewhere(groups: list) -> list[tuple[list[int], str]]:
    """Ranks whose (first thread's) stack is not the most common one, and where they are."""
    by_stack: dict[tuple, list[int]] = {}
    innermost: dict[tuple, str] = {}
    for threads, ranks in groups:
        frames = threads[0][1] if threads else []
        key = tuple(where(f) for f in frames)
        by_stack.setdefault(key, []).extend(ranks)
        innermost[key] = where(program_frame(frames)) if frames else "(no Python frame)"
    if len(by_stack) < 2:
        return []
    common = Counter({key: len(ranks) for key, ranks in by_stack.items()}).most_common(1)[0][0]
    others = sorted((sorted(r), innermost[k]) for k, r in by_stack.items() if k != common)
    return sorted(others, key=lambda pair: (len(pair[0]), pair[0]))


def elsewhere_line(actor: str, ranks: list[int], place: str) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]} is elsewhere: {place}"
    return f"{rank_text(ranks)} are elsewhere: {place}"


def text(result: wire.StacksResult, every_thread: bool) -> str:
    total = sorted({r for _, ranks in result.groups for r in ranks})
    odd = elsewhere(result.groups)
    head = [f"{result.actor} {rank_text(total)}: {len(result.groups)} distinct stack{'s' if len(result.groups) != 1 else ''}"]
    head += [elsewhere_line(result.actor, ranks, place) for ranks, place in odd[:ELSEWHERE_SHOWN]]
    if len(odd) > ELSEWHERE_SHOWN:
        rest = sum(len(r) for r, _ in odd[ELSEWHERE_SHOWN:])
        head.append(f"... and {rest} more ranks in {len(odd) - ELSEWHERE_SHOWN} other places")
    body = draw(merge(result.groups, every_thread)) if result.groups else []
    return "\n".join(head + body) + "\n" + missing_lines(result)


def document(result: wire.StacksResult) -> dict:
    return {
        "actor": result.actor,
        "groups": [{"ranks": ranks, "threads": [{"name": name, "frames": [
            {"file": f[0], "line": f[1], "function": f[2]} for f in frames]} for name, frames in threads]}
            for threads, ranks in result.groups],
        "elsewhere": [{"ranks": ranks, "where": place} for ranks, place in elsewhere(result.groups)],
        "missing": [{"rank": rank, "reason": reason} for rank, reason in result.missing],
    }
