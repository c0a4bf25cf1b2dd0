"""The `list` table, drawn as a grid the way Monarch users know it."""

from __future__ import annotations

COLUMNS = ("Actor Name", "Rank", "Coords", "Hostname", "Function", "Line No.")


def coords_text(coords: dict) -> str:
    return "{" + ", ".join(f"'{k}': {v}" for k, v in coords.items()) + "}"


def session_cells(row: dict, with_job: bool) -> list[str]:
    cells = [row["actor"], str(row["rank"]), coords_text(row["coords"]), row["host"], row["function"],
             str(row["lineno"]) if row["lineno"] else ""]
    return [row["job"], *cells] if with_job else cells


def grid(header: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def rule(char: str) -> str:
        return "+" + "+".join(char * (w + 2) for w in widths) + "+"

    def line(cells) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    out = [rule("-"), line(header), rule("=")]
    for row in rows:
        out += [line(row), rule("-")]
    return "\n".join(out)


def sessions_table(rows: list[dict], with_state: bool = False) -> str:
    """Monarch's six columns; a Job column first when sessions come from more than one job,
    an Instance column when an engine names its actors (a Ray actor's or task's id), and a
    State column last for `list --all`."""
    with_job = len({r["job"] for r in rows}) > 1
    header = ["Job", *COLUMNS] if with_job else list(COLUMNS)
    cells = [session_cells(r, with_job) for r in rows]
    extra = [("Instance", "instance")] if any(r["instance"] for r in rows) else []
    extra += [("State", "state")] if with_state else []
    for title, key in extra:
        header.append(title)
        cells = [[*c, r[key]] for c, r in zip(cells, rows)]
    return grid(header, cells)


def jobs_table(rows: list[dict]) -> str:
    header = ("Job", "Processes", "Paused", "Hosts")
    return grid(header, [[r["job"], str(r["processes"]), f"{r['paused']}/{r['sessions']}", ", ".join(r["hosts"])]
                         for r in rows])
