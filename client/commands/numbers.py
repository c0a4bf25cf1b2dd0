"""A one-line summary of a cast whose answers are mostly numbers, so `p loss` over a thousand
ranks reads on one screen: count, extremes and where they are, mean, the ranks holding NaN or
Inf, the ranks far from the others, and those whose answer is no number (an error, a rank in
another frame)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from monarch_pdb import wire
from monarch_pdb.ranks import format_ranks

OUTLIER_SIGMAS = 3.0
NUMBER = re.compile(
    r"""^\s*(?:(?:tensor|array|(?:np|numpy|torch)\.\w+)\(\s*)?   # tensor(...), array(...), np.float64(...)
        ([-+]?(?:nan|inf|\d+(?:\.\d*)?(?:e[-+]?\d+)?|\.\d+(?:e[-+]?\d+)?))
        \s*(?:,[^()]*(?:\([^()]*\)[^()]*)*)?\)?\s*$""",  # , dtype=..., device='cuda:0')
    re.IGNORECASE | re.VERBOSE,
)


def number(output: str) -> float | None:
    """The number a pdb answer prints (an int, a float, or a 0-d tensor or array), or None."""
    match = NUMBER.match(output)
    if match is None or ("(" in output) != output.rstrip().endswith(")"):
        return None
    return float(match.group(1))


@dataclass
class Summary:
    count: int
    minimum: tuple[float, int] | None
    maximum: tuple[float, int] | None
    mean: float | None
    nonfinite: list[int]
    outliers: list[int]
    other: list[int]

    def line(self) -> str:
        parts = [f"count {self.count}"]
        if self.minimum is not None and self.maximum is not None and self.mean is not None:
            parts += [
                f"min {self.minimum[0]:g} (rank {self.minimum[1]})",
                f"max {self.maximum[0]:g} (rank {self.maximum[1]})",
                f"mean {self.mean:g}",
            ]
        parts.append(
            f"NaN/Inf {len(self.nonfinite)}" + (f" ranks[{format_ranks(self.nonfinite)}]" if self.nonfinite else "")
        )
        parts.append(
            f"beyond {OUTLIER_SIGMAS:g} sd {len(self.outliers)}"
            + (f" ranks[{format_ranks(self.outliers)}]" if self.outliers else "")
        )
        if self.other:
            parts.append(f"no number {len(self.other)} ranks[{format_ranks(self.other)}]")
        return "numbers: " + ", ".join(parts)

    def document(self) -> dict:
        return {
            "count": self.count,
            "min": None if self.minimum is None else {"value": self.minimum[0], "rank": self.minimum[1]},
            "max": None if self.maximum is None else {"value": self.maximum[0], "rank": self.maximum[1]},
            "mean": self.mean,
            "nonfinite": self.nonfinite,
            "outliers": self.outliers,
            "other": self.other,
        }


def summarize(groups: list[wire.CastGroup]) -> Summary | None:
    """The summary of a cast's groups, or None unless more ranks answer a number than not and
    the numbers are not all the same (the blocks then say it all)."""
    values: list[tuple[float, int]] = []
    other: list[int] = []
    numeric_groups = 0
    for group in groups:
        value = number(group.output)
        if value is None:
            other += group.ranks
            continue
        numeric_groups += 1
        values += [(value, rank) for rank in group.ranks]
    if numeric_groups < 2 or len(values) <= len(other):
        return None
    other.sort()
    finite = sorted((v, r) for v, r in values if math.isfinite(v))
    nonfinite = sorted(r for v, r in values if not math.isfinite(v))
    if not finite:
        return Summary(len(values), None, None, None, nonfinite, [], other)
    mean = math.fsum(v for v, _ in finite) / len(finite)
    spread = math.sqrt(math.fsum((v - mean) ** 2 for v, _ in finite) / len(finite))
    outliers = sorted(r for v, r in finite if spread > 0 and abs(v - mean) > OUTLIER_SIGMAS * spread)
    lowest = min(finite, key=lambda p: (p[0], p[1]))
    highest = max(finite, key=lambda p: (p[0], -p[1]))
    return Summary(len(values), lowest, highest, mean, nonfinite, outliers, other)
