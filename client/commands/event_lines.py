"""Events as lines above the prompt, folded: sixteen ranks stopping at once make one line."""

from __future__ import annotations

from collections import defaultdict

from monarch_pdb import wire
from monarch_pdb.ranks import counted, format_ranks

PHRASES = {
    wire.EventKind.BREAKPOINT: "stopped at {where}",
    wire.EventKind.POST_MORTEM: "entered post-mortem at {where}: {detail}",
    wire.EventKind.INTERRUPTED: "stopped by interrupt at {where}",
    wire.EventKind.ENDED: "finished{detail}",
    wire.EventKind.LOST: "was lost (its process or its connection is gone)",
    wire.EventKind.RELEASED: "is free again (the shell attached to it went away)",
    wire.EventKind.TAKEN: "was taken over by the shell of {detail} (attach --force)",
    wire.EventKind.TWICE: "is run by two processes ({detail}); both are listed, attach and cast reach the second",
    wire.EventKind.STALLED: "has been at {where} {detail}",
}
"""Every kind of event about ranks, as the shell says it."""
RUNS_ON = "is running again (continued)"
"""A session that ended because pdb's continue left the rank untraced: the rank runs on (a
sleep it was interrupted in goes on sleeping), nothing finished."""

SEVERAL = {
    PHRASES[wire.EventKind.LOST]: "were lost (their processes or connections are gone)",
    RUNS_ON: "are running again (continued)",
    PHRASES[wire.EventKind.STALLED]: "have been at {where} {detail}",
}
"""What reads otherwise of several ranks."""


def broker_line(event: wire.Event) -> str:
    """An event about a broker below (`--upstream`): one line, however many ranks it has. A
    broker lost after its ranks moved to a new one (it was replaced) loses none."""
    its = f"its {counted(event.count, 'rank')} {'is' if event.count == 1 else 'are'}"
    if event.kind == wire.EventKind.BROKER_JOINED:
        return f"the broker on {event.where} joined: its ranks are here"
    if event.kind == wire.EventKind.BROKER_SILENT:
        return f"the broker on {event.where} does not answer: {its} unreachable until it does"
    if event.kind == wire.EventKind.BROKER_BACK:
        return f"the broker on {event.where} answers again: its ranks are as they were"
    lost = f": {its} lost" if event.count else " (its ranks had moved to a new broker)"
    return f"the broker on {event.where} {event.detail}{lost}"


BROKER_EVENTS = (
    wire.EventKind.BROKER_LOST,
    wire.EventKind.BROKER_JOINED,
    wire.EventKind.BROKER_SILENT,
    wire.EventKind.BROKER_BACK,
)
STOPS = (wire.EventKind.BREAKPOINT, wire.EventKind.POST_MORTEM)


def who(actor: str, ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"{actor} {ranks[0]}"
    return f"{actor} ranks[{format_ranks(ranks)}] ({len(ranks)})"


def places(wheres: list[str]) -> str:
    """`debugging.py:11,15` for lines of one file; each place in full when files differ."""
    files = {w.rpartition(":")[0] for w in wheres}
    if len(files) == 1:
        lines = sorted((w.rpartition(":")[2] for w in wheres), key=lambda n: (len(n), n))
        return f"{files.pop()}:{','.join(lines)}"
    return ", ".join(sorted(wheres))


def phrase(event: wire.Event) -> tuple[str, str]:
    """What the shell says of an event, and the detail it says it with: of a session that
    ended, how, when that is news (an endpoint that returned is the usual case)."""
    if event.kind != wire.EventKind.ENDED:
        return PHRASES[event.kind], event.detail
    if event.detail == wire.Ending.CONTINUED:
        return RUNS_ON, ""
    return PHRASES[event.kind], "" if event.detail == wire.Ending.RETURNED else f" ({event.detail})"


def describe_events(
    events: list[wire.Event],
    attached: tuple[str, str, int] | None = None,
    said: tuple[wire.EventKind, str, str, int] | None = None,
) -> list[str]:
    """One line per actor and kind of event (and exception, for post-mortem), in order seen.
    The `attached` rank's stops are left out: its own prompt says them; and so is the take-over
    of the attached rank, and the end this shell `said` already of the rank it held (taken over,
    lost)."""
    groups: dict[tuple[str, str, str, str], tuple[list[int], dict[str, None]]] = defaultdict(lambda: ([], {}))
    brokers = [broker_line(e) for e in events if e.kind in BROKER_EVENTS]
    for e in events:
        if e.kind in PHRASES:
            told = e.rank_list()
            if attached is not None and e.kind in STOPS and (e.job, e.actor) == attached[:2]:
                told = [rank for rank in told if rank != attached[2]]
            for kind, own in ((wire.EventKind.TAKEN, attached), (said[0], said[1:]) if said else (None, None)):
                if own is not None and e.kind == kind and (e.job, e.actor) == own[:2]:
                    told = [rank for rank in told if rank != own[2]]
            if not told:
                continue
            ranks, wheres = groups[(e.job, e.actor) + phrase(e)]
            ranks.extend(told)
            wheres[e.where] = None
    several_jobs = len({key[0] for key in groups}) > 1
    lines = brokers
    for (job, actor, text, detail), (ranks, wheres) in groups.items():
        name = f"{job}:{actor}" if several_jobs else actor
        told = sorted(set(ranks))
        text = SEVERAL.get(text, text) if len(told) > 1 else text
        lines.append(f"{who(name, told)} {text.format(where=places(list(wheres)), detail=detail)}")
    return lines
