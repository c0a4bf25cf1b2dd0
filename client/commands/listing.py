"""The `list` table, drawn as a grid the way Monarch users know it: a row per rank, or, past
a screenful of ranks, a row per group of ranks stopped at the same place."""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable

from monarch_pdb import wire
from monarch_pdb.client.commands.answers import shortened
from monarch_pdb.client.commands.hostlist import compress
from monarch_pdb.client.escapes import visible
from monarch_pdb.ranks import counted

COLUMNS = ("Actor Name", "Rank", "Coords", "Hostname", "Function", "Line No.")
GROUP_COLUMNS = ("Actor Name", "Ranks", "Coords", "Hosts", "Function", "Line No.")
CELL_SHOWN = 48
"""Characters of a group's rank set, coordinate set or host list shown; --json has every row."""
JOB_SHOWN = 24
"""Characters of a job's name shown in a table of sessions, its middle left out past them: a
launcher's job is named by its script, then its run (torchrun's run id or port, Slurm's job id),
so both ends tell jobs apart; `jobs` and --json show it whole."""


def coords_text(coords: dict) -> str:
    return "{" + ", ".join(f"'{k}': {v}" for k, v in coords.items()) + "}"


def job_texts(jobs: Iterable[str]) -> dict[str, str]:
    """Each job's name as the Job column shows it: past JOB_SHOWN characters, its start and its
    end with `...` between; where that leaves two jobs alike, its start; where that does too,
    whole."""
    head = (JOB_SHOWN - 3) // 2
    cuts = (lambda job: f"{job[:head]}...{job[head + 3 - JOB_SHOWN :]}", lambda job: job[: JOB_SHOWN - 3] + "...")
    shown: dict[str, str | None] = {job: job if len(job) <= JOB_SHOWN else None for job in jobs}
    for cut in cuts:
        tried = {job: cut(job) for job, text in shown.items() if text is None}
        alike = Counter([*(text for text in shown.values() if text is not None), *tried.values()])
        shown.update({job: text for job, text in tried.items() if alike[text] == 1})
    return {job: text or job for job, text in shown.items()}


def session_cells(row: wire.SessionRow, jobs: dict[str, str] | None) -> list[str]:
    """A row's cells, after its job's as `jobs` shows it, where the table has a Job column."""
    cells = [
        row.actor,
        str(row.rank),
        coords_text(row.coords),
        row.host,
        row.function,
        str(row.lineno) if row.lineno else "",
    ]
    return [jobs[row.job], *cells] if jobs is not None else cells


def display_width(text: str) -> int:
    """The columns a terminal gives `text` as the shell shows it (its control characters
    escaped): two for a wide character (CJK, most emoji), none for a combining one."""
    text = visible(text)
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def grid(header: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    """A table whose columns line up on a terminal, whatever the width of each character."""
    widths = [
        max(display_width(h), *(display_width(r[i]) for r in rows)) if rows else display_width(h)
        for i, h in enumerate(header)
    ]

    def rule(char: str) -> str:
        return "+" + "+".join(char * (w + 2) for w in widths) + "+"

    def line(cells) -> str:
        return "| " + " | ".join(c + " " * (w - display_width(c)) for c, w in zip(cells, widths)) + " |"

    out = [rule("-"), line(header), rule("=")]
    for row in rows:
        out += [line(row), rule("-")]
    return "\n".join(out)


def sessions_table(rows: list[wire.SessionRow], with_state: bool = False) -> str:
    """Monarch's six columns; a Job column first when sessions come from more than one job,
    an Instance column when an engine names its actors (a Ray actor's or task's id), an Attached
    column when a shell or an editor holds some, and a State column last for `list --all`."""
    jobs = job_texts({r.job for r in rows}) if len({r.job for r in rows}) > 1 else None
    header = ["Job", *COLUMNS] if jobs is not None else list(COLUMNS)
    cells = [session_cells(r, jobs) for r in rows]
    extra = [("Instance", "instance")] if any(r.instance for r in rows) else []
    extra += [("Attached", "attached")] if any(r.attached for r in rows) else []
    extra += [("State", "state")] if with_state else []
    for title, key in extra:
        header.append(title)
        cells = [[*c, getattr(r, key)] for c, r in zip(cells, rows)]
    return grid(header, cells)


def groups_table(groups: list[wire.SessionGroup], with_state: bool = False) -> str:
    """A row per group of ranks sharing job, actor, function, line, state and holder, as the
    broker grouped them: their rank set, each coordinate's values and their hosts, compactly. An
    Attached column when a shell or an editor holds some, as `sessions_table` has; a State
    column when asked for, or when states alone tell two groups apart."""
    jobs = job_texts({g.job for g in groups})
    with_job = len(jobs) > 1
    with_attached = any(g.attached for g in groups)
    with_state = with_state or len({g.state for g in groups}) > 1
    header = [
        *(["Job"] if with_job else []),
        *GROUP_COLUMNS,
        *(["Attached"] if with_attached else []),
        *(["State"] if with_state else []),
    ]
    cells = [
        [
            *([jobs[g.job]] if with_job else []),
            g.actor,
            f"{shortened(g.ranks, CELL_SHOWN)} ({g.count})",
            coords_ranges(g.coords),
            shortened(compress(g.hosts), CELL_SHOWN),
            g.function,
            str(g.lineno) if g.lineno else "",
            *([g.attached] if with_attached else []),
            *([g.state] if with_state else []),
        ]
        for g in groups
    ]
    ranks = sum(g.count for g in groups)
    count = f"{counted(ranks, 'rank')} in {counted(len(groups), 'group')}; 'list --rows' shows each rank"
    return grid(header, cells) + "\n" + count


def coords_ranges(coords: dict[str, str]) -> str:
    """Each coordinate's values as a rank set: `{'host': 0-63, 'gpu': 0-7}`."""
    return "{" + ", ".join(f"'{dim}': {shortened(values, CELL_SHOWN)}" for dim, values in coords.items()) + "}"


def jobs_table(rows: list[wire.JobRow]) -> str:
    header = ("Job", "Processes", "Paused", "Hosts")
    return grid(header, [[r.job, str(r.processes), f"{r.paused}/{r.sessions}", ", ".join(r.hosts)] for r in rows])
