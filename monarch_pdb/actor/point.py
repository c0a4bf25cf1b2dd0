"""Where a rank sits in a mesh: row-major ranks and coordinates, and selection by coordinates.

Coordinates keep their meaning in every slice of a mesh, so rank 13 of a 4x4 mesh is
host=3, gpu=1 whether it is reached through the whole mesh or through `slice(host=3)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from math import prod

from monarch_pdb.ranks import counted


def format_coords(coords: Mapping[str, int]) -> str:
    return ", ".join(f"{label}={value}" for label, value in coords.items())


@dataclass(frozen=True)
class Extent:
    """Labels and sizes of a mesh's dimensions; the last dimension varies fastest."""

    labels: tuple[str, ...]
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, sizes: Mapping[str, int]) -> Extent:
        for label, size in sizes.items():
            if not isinstance(label, str) or not label.isidentifier():
                raise ValueError(f"dimension names must be identifiers, not {label!r}")
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ValueError(f"dimension {label!r} must have a positive integer size, not {size!r}")
        return cls(tuple(sizes), tuple(sizes.values()))

    @property
    def size(self) -> int:
        return prod(self.sizes)

    def point(self, rank: int) -> Point:
        if not 0 <= rank < self.size:
            raise IndexError(f"rank {rank} is outside a mesh of {counted(self.size, 'rank')}")
        return Point(rank, self)

    def coordinates(self, rank: int) -> tuple[int, ...]:
        values = []
        for size in reversed(self.sizes):
            rank, value = divmod(rank, size)
            values.append(value)
        return tuple(reversed(values))

    def select(self, ranks: Iterable[int], selectors: Mapping[str, int | slice]) -> tuple[int, ...]:
        """The ranks among `ranks` whose coordinates match every selector (an index or a slice)."""
        allowed = {label: self._allowed(label, selector) for label, selector in selectors.items()}
        chosen = tuple(
            rank for rank in ranks if all(self.point(rank)[label] in values for label, values in allowed.items())
        )
        if not chosen:
            wanted = ", ".join(f"{label}={selector!r}" for label, selector in selectors.items())
            raise ValueError(f"({wanted}) selects no rank of this mesh")
        return chosen

    def _allowed(self, label: str, selector: int | slice) -> set[int]:
        if label not in self.labels:
            known = ", ".join(self.labels) or "none"
            raise ValueError(f"this mesh has no dimension {label!r}; its dimensions are: {known}")
        size = self.sizes[self.labels.index(label)]
        if isinstance(selector, slice):
            return set(range(size)[selector])
        if not isinstance(selector, int) or isinstance(selector, bool):
            raise TypeError(f"{label}= takes an int or a slice, not {selector!r}")
        try:
            return {range(size)[selector]}
        except IndexError:
            raise ValueError(f"{label}={selector} is out of range for a dimension of size {size}") from None

    def __str__(self) -> str:
        return format_coords(dict(zip(self.labels, self.sizes)))


@dataclass(frozen=True)
class Point(Mapping[str, int]):
    """One rank and its coordinates: `point.rank`, `point["host"]`, `point.coords`."""

    rank: int
    extent: Extent

    @property
    def coords(self) -> dict[str, int]:
        return dict(zip(self.extent.labels, self.extent.coordinates(self.rank)))

    def __getitem__(self, label: str) -> int:
        coords = self.coords
        if label not in coords:
            raise KeyError(f"no dimension {label!r}; dimensions are: {', '.join(coords) or 'none'}")
        return coords[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self.extent.labels)

    def __len__(self) -> int:
        return len(self.extent.labels)

    def __repr__(self) -> str:
        return f"Point({format_coords({'rank': self.rank, **self.coords})})"
