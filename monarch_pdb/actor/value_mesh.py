"""The answer of a mesh call: one value per rank, with the rank's coordinates."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from monarch_pdb.actor.point import Extent, Point, format_coords


@dataclass(frozen=True)
class ValueMesh:
    """Iterates over (point, value) pairs in rank order."""

    extent: Extent
    pairs: tuple[tuple[Point, Any], ...]

    def __iter__(self) -> Iterator[tuple[Point, Any]]:
        return iter(self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def values(self) -> list[Any]:
        return [value for _, value in self.pairs]

    def item(self, **coords: int) -> Any:
        """The one value at these coordinates; `item()` when the mesh has a single rank."""
        by_rank = {point.rank: value for point, value in self.pairs}
        ranks = self.extent.select(by_rank, coords)
        if len(ranks) != 1:
            raise ValueError(f"item({format_coords(coords)}) matches {len(ranks)} values; name more coordinates")
        return by_rank[ranks[0]]

    def __repr__(self) -> str:
        lines = [f"ValueMesh({self.extent}):"]
        lines += [f"  ({format_coords(point.coords)}): {value!r}" for point, value in self.pairs]
        return "\n".join(lines)
