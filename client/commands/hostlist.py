"""Many host names as one short text, the way Slurm writes a hostlist: `node[001-128]`."""

from __future__ import annotations

import re
from collections.abc import Iterable

from monarch_pdb.ranks import format_ranks

NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")
"""A name's last number, with what comes before and after it."""


def compress(hosts: Iterable[str]) -> str:
    """Names that differ only in their last number share one entry, its numbers written as a
    rank set (`gpu[01,02],login,node[001-096,098-128]`); zero-padded numbers keep their width,
    and a series that mixes widths with padding is written as one entry per width."""
    series: dict[tuple[str, str], list[str]] = {}
    plain: list[str] = []
    for name in set(hosts):
        match = NUMBERED.match(name)
        if match is None:
            plain.append(name)
        else:
            prefix, digits, suffix = match.groups()
            series.setdefault((prefix, suffix), []).append(digits)
    entries = [(name, "", -1, name) for name in plain]
    for (prefix, suffix), numbers in series.items():
        widths = {len(digits) for digits in numbers}
        padded = any(len(digits) > 1 and digits.startswith("0") for digits in numbers)
        by_width = (
            {0: numbers}
            if len(widths) > 1 and not padded
            else {width: [d for d in numbers if len(d) == width] for width in widths}
        )
        for width, digits in by_width.items():
            values = sorted({int(d) for d in digits})

            def pad(m: re.Match[str], width: int = width) -> str:
                return m.group().zfill(width)

            text = re.sub(r"\d+", pad, format_ranks(values))
            shown = f"{prefix}{text}{suffix}" if len(values) == 1 else f"{prefix}[{text}]{suffix}"
            entries.append((prefix, suffix, values[0], shown))
    return ",".join(shown for *_, shown in sorted(entries))
