"""`hang [actor]`: the whole story of a job that hangs on one screen, from what the other
commands read (nothing stops): what is stuck and where (`stacks`, sampled a few times), the
collective the ranks disagree on and who never entered it (`collectives`), the least
progressed ranks, and the commands to type next.

The least progressed ranks are, first, those that never entered a collective others did;
else the members of a process group that did not answer (a rank whose C code holds the GIL,
one the broker does not know); else those that stood still while others moved; else those
whose stack is not the one most ranks share.
"""

from __future__ import annotations

from dataclasses import dataclass

from monarch_pdb import wire
from monarch_pdb.client.commands import collectives_report, stack_samples, stack_tree
from monarch_pdb.client.commands.arguments import actor_word
from monarch_pdb.places import place
from monarch_pdb.ranks import format_ranks


@dataclass(frozen=True)
class Behind:
    """The ranks least progressed, where they are, and how that is known."""

    ranks: list[int]
    where: str
    why: str


@dataclass(frozen=True)
class HangStory:
    actor: str
    stacks: wire.StacksResult
    motion: stack_samples.Motion
    collectives: collectives_report.Report | None
    """None where no rank has a torch.distributed process group."""
    behind: Behind | None


def least_progressed(
    stacks: wire.StacksResult, motion: stack_samples.Motion, report: collectives_report.Report | None
) -> Behind | None:
    at: dict[int, str] = {}
    for stack in stacks.groups:
        there = place(stack.threads[0].frames if stack.threads else [])
        at.update(dict.fromkeys(stack.ranks, there))

    def where(ranks: list[int]) -> str:
        """Their places, "" where no stack of theirs came."""
        return ", ".join(sorted({at[rank] for rank in ranks if rank in at}))

    groups = sorted(report.groups.values(), key=lambda g: g.name) if report else []
    for group in groups:
        disagree = group.disagreement()
        if disagree is not None:
            seq, op, never, _ = disagree
            return Behind(never, where(never), f"never entered #{seq} {op}".rstrip() + f" of group {group.name}")
    for group in groups:
        if group.silent:
            silent = sorted(rank for ranks in group.silent.values() for rank in ranks)
            whys = "; ".join(group.silent)
            return Behind(silent, where(silent), f"did not answer in group {group.name}: {whys}")
    if motion.moved and motion.still:
        still = [rank for ranks, _ in motion.still for rank in ranks]
        return Behind(sorted(still), where(still), f"stood still while ranks[{format_ranks(motion.moved)}] moved")
    odd = stack_tree.elsewhere(stacks.groups)
    if odd:
        ranks, there = odd[0]
        return Behind(ranks, there, "not where most ranks are")
    return None


def fold(actor: str, samples: list[wire.StacksResult], every: float, snapshots: wire.PeekResult) -> HangStory:
    report = collectives_report.fold(snapshots)
    torch = report if report.groups else None
    motion = stack_samples.motion(samples, every)
    return HangStory(actor, samples[-1], motion, torch, least_progressed(samples[-1], motion, torch))


def next_commands(hang: HangStory) -> list[tuple[str, str]]:
    """What to type next, and what it does, for the ranks behind (or all, where none is), as the
    shell reads them whatever the actor's name (options before the `--` a name that starts with
    `-` needs)."""
    ranks = hang.behind.ranks if hang.behind else []
    selector = f"ranks({format_ranks(ranks)})" if ranks else "ranks(:)"
    first = (ranks or sorted(rank for group in hang.stacks.groups for rank in group.ranks) or [0])[0]
    name = actor_word(hang.actor)
    stacks = (
        f"stacks --locals {name} {selector}" if hang.actor.startswith("-") else f"stacks {name} {selector} --locals"
    )
    return [
        (stacks, "their locals, read without stopping them"),
        (f"peek {name} {selector} <expression>", "any value of theirs, without stopping them"),
        (f"interrupt {name} {selector}", f"stop them where they are, then `attach {name} {first}`"),
    ]


def text(hang: HangStory) -> str:
    moved = "ranks moved" if hang.motion.moved else "no rank moved"
    span = (hang.motion.samples - 1) * hang.motion.every
    if stack_samples.read_nothing(hang.motion):
        lines = [f"== {hang.actor}: no rank's stack was read:"]
    else:
        lines = [f"== {hang.actor}: {moved} in {span:g} s; where they are:"]
    lines += stack_tree.text(hang.stacks, False).rstrip("\n").splitlines()
    if hang.collectives is not None:
        lines.append("== collectives:")
        lines += collectives_report.text(hang.collectives).rstrip("\n").splitlines()
    if hang.behind is not None:
        b = hang.behind
        there = f" at {b.where}" if b.where else ""
        lines.append(f"== least progressed: {hang.actor} {collectives_report.ranks_text(b.ranks)}{there}: {b.why}")
    else:
        lines.append(f"== least progressed: none stands out in {hang.actor}")
    lines.append("== next:")
    commands = next_commands(hang)
    width = max(len(command) for command, _ in commands)
    lines += [f"  {command.ljust(width)}  {does}" for command, does in commands]
    return "\n".join(lines) + "\n"


def document(hang: HangStory) -> dict:
    return {
        "actor": hang.actor,
        "stacks": stack_tree.document(hang.stacks),
        "motion": stack_samples.motion_document(hang.motion),
        "collectives": collectives_report.document(hang.collectives) if hang.collectives else None,
        "least_progressed": None
        if hang.behind is None
        else {"ranks": hang.behind.ranks, "where": hang.behind.where, "why": hang.behind.why},
        "next": [command for command, _ in next_commands(hang)],
    }
