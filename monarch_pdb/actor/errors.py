"""What a failed mesh call raises: one error that names every failing rank, keeping each rank's
own error for programs that want to look closer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from monarch_pdb.actor.point import format_coords
from monarch_pdb.ranks import counted, format_ranks


def name_ranks(ranks: Sequence[int]) -> str:
    """`rank 3`, `ranks 2,6,10,14`, `ranks 0-3,5`, in the project's one compact form."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)}"


def type_name(exc: BaseException) -> str:
    """The name Python's own tracebacks would print, also for classes of the main script."""
    kind = type(exc)
    if kind.__module__ in ("builtins", "__main__", "__mp_main__"):
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


class WorkerExited(RuntimeError):
    """The worker process of a rank ended before it answered."""


@dataclass(frozen=True)
class RankError:
    """How one rank failed. `exception` is the original exception when it survived pickling."""

    rank: int
    coords: dict[str, int]
    type_name: str
    message: str
    traceback: str
    exception: BaseException | None = field(default=None, compare=False)

    @property
    def summary(self) -> str:
        first_line = self.message.splitlines()[0] if self.message else ""
        return f"{self.type_name}: {first_line}" if first_line else self.type_name


class ActorError(Exception):
    """Some ranks of a mesh call raised; `errors` holds one RankError per failing rank."""

    def __init__(self, call: str, total: int, errors: Sequence[RankError]) -> None:
        self.call = call
        self.total = total
        self.errors = tuple(sorted(errors, key=lambda error: error.rank))
        super().__init__(_describe(call, total, self.errors))

    def __reduce__(self):
        return ActorError, (self.call, self.total, self.errors)


def _describe(call: str, total: int, errors: Sequence[RankError]) -> str:
    by_summary: dict[str, list[int]] = {}
    for error in errors:
        by_summary.setdefault(error.summary, []).append(error.rank)
    causes = "; ".join(f"{name_ranks(ranks)}: {summary}" for summary, ranks in by_summary.items())
    text = f"{len(errors)} of {counted(total, 'rank')} of {call} raised: {causes}"
    first = errors[0]
    if first.traceback:
        where = f" ({format_coords(first.coords)})" if first.coords else ""
        text += f"\n\nrank {first.rank}{where} remote traceback:\n{first.traceback.rstrip()}"
    return text
