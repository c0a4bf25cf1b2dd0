"""A picture of a mesh: its first two dimensions as a grid of rank states, further dimensions
folded into pages, a letter per state (and a colour in a terminal), with a legend. Columns
past the terminal's width go to further pages, as further dimensions do. Rows that hold no rank
are left out: ranks that are process ids (9054, 31377) draw a row each, not the gaps between."""

from __future__ import annotations

import itertools
from collections import Counter

from monarch_pdb import wire

STATES = {
    # a rank's state: its letter, its word in the legend, its ANSI colour
    wire.RankState.BREAKPOINT: ("S", "stopped", "33"),
    wire.RankState.INTERRUPTED: ("S", "stopped", "33"),
    wire.RankState.POST_MORTEM: ("P", "post-mortem", "31"),
    wire.RankState.RUNNING: ("R", "running", "32"),
    wire.RankState.LOST: ("L", "lost", "35"),
    wire.RankState.FINISHED: ("F", "finished", "34"),
    wire.RankState.QUIT: ("Q", "quit", "36"),
}
LEGEND = (
    wire.RankState.BREAKPOINT,
    wire.RankState.RUNNING,
    wire.RankState.POST_MORTEM,
    wire.RankState.LOST,
    wire.RankState.FINISHED,
)
OCCASIONAL = (wire.RankState.QUIT,)
"""States in the legend only when some rank is in one."""
ATTACHED = "attached"
"""The legend's word for ranks a shell or an editor holds (as `list`'s Attached column says):
their state's letter in lower case."""
ABSENT = "."
ROW_WITHOUT_COORDS = 16
"""Ranks without coordinates (plain processes) are laid out this many to a row."""
WITHOUT_COORDS = ["rank", "+"]
"""The dimensions of ranks without coordinates: a row is named by its first rank, a column by
what it adds."""


def layout(rows: list[wire.SessionRow]) -> tuple[list[str], dict[tuple[int, ...], wire.SessionRow]]:
    """The dimension names (rows, columns, pages...), and each rank's row by coordinates."""
    dims = list(dict.fromkeys(d for r in rows for d in r.coords))
    if not dims:
        return WITHOUT_COORDS, {(r.rank - r.rank % ROW_WITHOUT_COORDS, r.rank % ROW_WITHOUT_COORDS): r for r in rows}
    if len(dims) == 1:
        return ["", dims[0]], {(0, r.coords.get(dims[0], 0)): r for r in rows}
    return dims, {tuple(r.coords.get(d, 0) for d in dims): r for r in rows}


def mark(row: wire.SessionRow) -> tuple[str, str, str]:
    """A rank's letter, its word in the legend and its colour."""
    letter, word, code = STATES.get(row.state, ("?", "other", "0"))
    return (letter.lower(), ATTACHED, code) if row.attached else (letter, word, code)


def cell(shown: tuple[str, str, str] | None, colour: bool) -> str:
    if shown is None:
        return ABSENT
    letter, _, code = shown
    return f"\x1b[{code}m{letter}\x1b[0m" if colour else letter


def picture(actor: str, rows: list[wire.SessionRow], colour: bool, columns: int) -> str:
    """The picture, its lines at most `columns` wide (the terminal's), but for a page of one
    column."""
    dims, at = layout(rows)
    extent = [max(key[i] for key in at) + 1 for i in range(len(dims))]
    if dims is WITHOUT_COORDS:
        extent[1] = ROW_WITHOUT_COORDS
        title, every_row = (
            f"{actor}: ranks, {ROW_WITHOUT_COORDS} a row (rank = row + column)",
            range(0, extent[0], ROW_WITHOUT_COORDS),
        )
    else:
        title = f"{actor}: {dims[0]} (rows) x {dims[1]} (columns)" if dims[0] else f"{actor}: {dims[1]}"
        every_row = range(extent[0])
    drawn = sorted({key[0] for key in at})
    width = len(str(extent[1] - 1))
    lead = len(str(drawn[-1]))
    per_page = max(1, (columns - lead - 1) // (width + 1))
    pages = [range(start, min(start + per_page, extent[1])) for start in range(0, extent[1], per_page)]
    lines = [title + ("; rows without a rank left out" if len(drawn) < len(every_row) else "")]
    for fixed in itertools.product(*(range(n) for n in extent[2:])):
        for page in pages:
            named = [f"{d}={v}" for d, v in zip(dims[2:], fixed)]
            named += [f"{dims[1]}={page[0]}-{page[-1]}"] if len(pages) > 1 else []
            if named:
                lines.append(", ".join(named) + ":")
            lines.append(" " * (lead + 2) + " ".join(str(c).rjust(width) for c in page))
            for r in drawn:
                marks = [mark(at[key]) if (key := (r, c, *fixed)) in at else None for c in page]
                lines.append(str(r).ljust(lead) + "  " + " ".join(" " * (width - 1) + cell(m, colour) for m in marks))
    counts = Counter(mark(r)[1] for r in rows)
    shown = [STATES[state] for state in LEGEND + tuple(s for s in OCCASIONAL if counts[STATES[s][1]])]
    legend = [f"{cell(m, colour)} {m[1]} ({counts[m[1]]})" for m in shown]
    held = sorted({mark(r)[0] for r in rows if r.attached})
    legend += [f"{'/'.join(held)} {ATTACHED} ({counts[ATTACHED]})"] if held else []
    lines.append("  ".join(legend + [f"{ABSENT} no rank"]))
    return "\n".join(lines) + "\n"


def document(actor: str, rows: list[wire.SessionRow]) -> dict:
    return {
        "actor": actor,
        "dims": layout(rows)[0],
        "ranks": [{"rank": r.rank, "coords": r.coords, "state": r.state, "attached": r.attached} for r in rows],
        "counts": dict(Counter(r.state for r in rows)),
    }
