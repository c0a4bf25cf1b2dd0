"""The `ranks(...)` selector language, and the compact rank sets that grouped output is headed by.

The shell and the broker both parse with this module: the shell checks what the user typed and
sends the canonical text (`render_selector`), the broker parses that text again and evaluates it
against its sessions, so the two sides can never disagree about what a selector means.

Grammar, whitespace allowed between any two tokens:

    selector := 'ranks' '(' ( term | filter (',' filter)* ) [',' 'threads'] ')'
    term     := slice | rank (',' rank)*
    filter   := name '=' ( slice | rank | '(' rank ',' rank (',' rank)* ')' )
    slice    := [rank] ':' [rank] [':' [rank]]          (a step, when given, is not zero)
    rank     := ASCII decimal digits, at most 18 significant ones
    name     := ASCII letter or '_', then letters, digits or '_'

A slice or a filter picks ranks: a session of another thread of a process, listed under its
thread's id (`thread NAME`), is picked only with `threads` (`ranks(:, threads)`); a rank listed
by number is picked whichever it is.
"""

from __future__ import annotations

import math
import string
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import count, groupby, islice
from operator import lt, sub
from typing import NoReturn, cast

__all__ = [
    "DimFilter",
    "RankList",
    "RankSet",
    "RankSlice",
    "SelectorError",
    "Selection",
    "THREADS",
    "Term",
    "dimensions",
    "format_ranks",
    "counted",
    "named",
    "parse_ranks",
    "parse_selector",
    "render_selector",
    "select",
    "split_selector",
]

# 18 significant digits always fit a signed 64-bit integer (msgpack, C ranks), and keep int()
# clear of Python's limit on converting very long digit strings.
_MAX_DIGITS = 18
# parse_ranks expands ranges; a bound keeps a typo like `0-99999999999` from exhausting memory.
_MAX_EXPANDED = 1 << 20
_NAME_START = frozenset(string.ascii_letters + "_")
_NAME_REST = _NAME_START | frozenset(string.digits)


class SelectorError(ValueError):
    """A malformed selector or rank set. The message is one line: the text, what, and where.

    `text` is the selector as shown in the message (cut out of any surrounding command) and
    `position` counts characters of it from 1.
    """

    def __init__(self, text: str, position: int, reason: str) -> None:
        shown = text if text and text.isprintable() else repr(text)
        super().__init__(f"{shown}: {reason} at position {position}")
        self.text = text
        self.position = position
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RankList:
    """One or more ranks (or coordinates) in the order written; one rank is a list of one."""

    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RankSlice:
    """Python slice semantics over non-negative numbers; None is a part left out."""

    start: int | None = None
    stop: int | None = None
    step: int | None = None


Term = RankList | RankSlice


@dataclass(frozen=True, slots=True)
class DimFilter:
    """One dimension's part of a selector (`gpu=0:4`): a list or a slice of its values."""

    dim: str
    term: Term


THREADS = "threads"


@dataclass(frozen=True, slots=True)
class Selection:
    """Exactly one of: a term over rank numbers, or filters that must all match a rank's coords;
    `threads` adds the sessions of other threads to what a slice or filter picks."""

    ranks: Term | None = None
    dims: tuple[DimFilter, ...] = ()
    threads: bool = False

    def __str__(self) -> str:
        return render_selector(self)


def _runs_by_bisection(ordered: list[int]) -> Iterator[int]:
    """first, last of each run of distinct ascending ranks, a bisection each."""
    at, size = 0, len(ordered)
    while at < size:
        offset = ordered[at] - at
        low, high = at + 1, size
        while low < high:  # the first place past the run
            middle = (low + high) // 2
            if ordered[middle] - middle == offset:
                low = middle + 1
            else:
                high = middle
        yield ordered[at]
        yield ordered[low - 1]
        at = low


class RankSet:
    """Ranks as ascending runs, each its first and last rank: how rank sets travel in bulk
    (a broker's share of a cast, the ranks of an answer), so that the 16,384 ranks of a host are
    two numbers to send, check, merge and count, not 16,384. Iterating gives each rank.

    A value, never changed once made. Not a frozen dataclass: the root of a tree makes one for
    each of a million answers, and a frozen one costs four times as much to make; its length is
    counted once, as it is made, since merging and ordering answers ask for it again and again."""

    __slots__ = ("spans", "count")

    def __init__(self, spans: tuple[int, ...] = ()) -> None:
        self.spans = spans
        """first, last, first, last, ...: ascending, non-negative, runs neither overlapping nor
        touching (`of` and `joined` make them so; `from_wire` refuses any other)."""
        self.count = sum(spans[1::2]) - sum(spans[::2]) + len(spans) // 2
        """How many ranks: `len` of the set."""

    @classmethod
    def of(cls, ranks: Iterable[int]) -> RankSet:
        if isinstance(ranks, list) and all(map(lt, ranks, islice(ranks, 1, None))):
            ordered = ranks  # ascending already: a host's ranks as their sessions came, mostly
        else:
            ordered = sorted(set(ranks))
        if not ordered:
            return cls()
        # Within a run, a rank less its place in the order is the same number, and that number
        # only grows along the order.
        holes = ordered[-1] - ordered[0] + 1 - len(ordered)
        if holes * 256 < len(ordered):  # few runs, each found by bisection: no step per rank
            return cls(tuple(_runs_by_bisection(ordered)))
        spans: list[int] = []  # many: the groups of those numbers, found without a step of Python per rank
        at = 0
        for _, run in groupby(map(sub, ordered, count())):
            length = len(list(run))
            spans += (ordered[at], ordered[at + length - 1])
            at += length
        return cls(tuple(spans))

    @classmethod
    def joined(cls, sets: Iterable[RankSet]) -> RankSet:
        """The union of several sets, in the time of their runs, not their ranks."""
        runs = sorted(run for one in sets for run in one.runs())
        spans: list[int] = []
        for first, last in runs:
            if spans and first <= spans[-1] + 1:
                spans[-1] = max(spans[-1], last)
            else:
                spans += (first, last)
        return cls(tuple(spans))

    @classmethod
    def from_wire(cls, spans: list) -> RankSet:
        """A set as it travelled, or ValueError when it is not one `of` would make."""
        if len(spans) == 2:  # one run: most answers of a cast whose every answer differs
            first, last = spans
            if type(first) is not int or type(last) is not int or not 0 <= first <= last:
                raise ValueError("not a run of ranks")
            one = cls.__new__(cls)
            one.spans, one.count = (first, last), last - first + 1
            return one
        if len(spans) % 2 or not all(type(n) is int for n in spans):
            raise ValueError("not pairs of ranks")
        previous = -2
        for first, last in zip(spans[::2], spans[1::2]):
            if not previous + 1 < first <= last:
                raise ValueError("runs out of order")
            previous = last
        return cls(tuple(spans))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RankSet) and self.spans == other.spans

    def __hash__(self) -> int:
        return hash(self.spans)

    def __repr__(self) -> str:
        return f"RankSet({self.spans!r})"

    def runs(self) -> Iterator[tuple[int, int]]:
        """(first, last) of each run."""
        return zip(self.spans[::2], self.spans[1::2])

    @property
    def first(self) -> int:
        return self.spans[0]

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return bool(self.spans)

    def __iter__(self) -> Iterator[int]:
        for first, last in self.runs():
            yield from range(first, last + 1)

    def __contains__(self, rank: object) -> bool:
        at = bisect_right(self.spans, cast(int, rank))
        return at % 2 == 1 or (at > 0 and self.spans[at - 1] == rank)

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """`format_ranks` of the set, from its runs."""
        parts: list[str] = []
        for first, last in self.runs():
            if last - first >= 2:
                parts.append(f"{first}-{last}")
            else:
                parts.extend(str(rank) for rank in range(first, last + 1))
        return ",".join(parts)


def parse_selector(text: str) -> Selection:
    """Parse a whole selector; anything but whitespace after its ')' is an error."""
    selection, end = _selector(text)
    ch, at = _next(text, end)
    if ch:
        _fail(text, at, "unexpected text after the selector")
    return selection


def split_selector(text: str) -> tuple[Selection, str]:
    """Parse the selector that starts `text` and return the rest, e.g. the pdb command of a cast.

    Only the whitespace between the ')' and the rest is dropped; the rest may be empty, and is
    otherwise returned exactly as given, whatever it contains.
    """
    selection, end = _selector(text)
    return selection, text[_skip(text, end) :]


def render_selector(selection: Selection) -> str:
    """Canonical text: parses back to an equal Selection; lists as `1,4,6`, filters as `a=1, b=2`."""
    if selection.ranks is not None:
        body = _render_term(selection.ranks, bracket=False)
    else:
        body = ", ".join(f"{f.dim}={_render_term(f.term, bracket=True)}" for f in selection.dims)
    return f"ranks({body}, {THREADS})" if selection.threads else f"ranks({body})"


def dimensions(selection: Selection) -> tuple[str, ...]:
    """Dimension names the selection filters on, in the order written, so callers can name unknowns."""
    return tuple(f.dim for f in selection.dims)


def named(selection: Selection) -> tuple[int, ...]:
    """The ranks a selection names one by one (`ranks(0,7)`), each of which must be there. A
    slice or a dimension filter means whatever ranks are there, as Python's slices do."""
    return selection.ranks.ranks if isinstance(selection.ranks, RankList) else ()


def select(selection: Selection, candidates: Iterable[tuple[int, Mapping[str, int]]]) -> list[int]:
    """Ascending ranks of the (rank, coords) candidates the selection names.

    O(N): each term becomes one precompiled test, and each dimension filter makes one pass over
    the candidates the previous filters kept. A rank must match every filter; a dimension missing
    from its coords matches nothing.
    """
    if selection.ranks is not None:
        wanted = _matcher(selection.ranks)
        return sorted(rank for rank, _ in candidates if wanted(rank))
    kept: Iterable[tuple[int, Mapping[str, int]]] = candidates
    for dim_filter in selection.dims:
        dim, wanted = dim_filter.dim, _matcher(dim_filter.term)
        kept = [(rank, coords) for rank, coords in kept if dim in coords and wanted(coords[dim])]
    return sorted(rank for rank, _ in kept)


def counted(number: int, word: str, plural: str = "") -> str:
    """`1 rank`, `3 ranks`: a count and its word, in the plural (`plural`, else the word and an
    `s`) but for one."""
    return f"{number} {word if number == 1 else plural or word + 's'}"


def format_ranks(ranks: Iterable[int]) -> str:
    """Compact text such as `0-3,5,8-15`.

    Runs of three or more become ranges; a run of two stays `4,5`, since `4-5` saves nothing and
    reads like a range.
    """
    if isinstance(ranks, RankSet):
        return ranks.text()
    ordered = sorted(set(ranks))
    parts: list[str] = []
    first = 0
    while first < len(ordered):
        last = first
        while last + 1 < len(ordered) and ordered[last + 1] == ordered[last] + 1:
            last += 1
        if last - first >= 2:
            parts.append(f"{ordered[first]}-{ordered[last]}")
        else:
            parts.extend(str(rank) for rank in ordered[first : last + 1])
        first = last + 1
    return ",".join(parts)


def parse_ranks(text: str) -> list[int]:
    """Inverse of format_ranks: ascending unique ranks. Also takes any order, overlaps and `4-5`."""
    if not text.strip():
        return []
    ranks: set[int] = set()
    at = 0
    while True:
        first = _skip(text, at)
        low, end = _rank(text, first, names_mix=False)
        high = low
        ch, at = _next(text, end)
        if ch == "-":
            high, end = _rank(text, at + 1, names_mix=False)
            if high < low:
                _fail(text, first, f"range {low}-{high} runs backwards")
            ch, at = _next(text, end)
        if len(ranks) + high - low >= _MAX_EXPANDED:
            _fail(text, first, f"more than {_MAX_EXPANDED} ranks")
        ranks.update(range(low, high + 1))
        if not ch:
            return sorted(ranks)
        if ch != ",":
            _fail(text, at, f"expected ',' or '-' but found {ch!r}")
        at += 1


def _render_term(term: Term, bracket: bool) -> str:
    if isinstance(term, RankSlice):
        text = ":".join("" if part is None else str(part) for part in (term.start, term.stop))
        return text if term.step is None else f"{text}:{term.step}"
    text = ",".join(map(str, term.ranks))
    return f"({text})" if bracket and len(term.ranks) > 1 else text


def _matcher(term: Term) -> Callable[[int], bool]:
    if isinstance(term, RankList):
        return frozenset(term.ranks).__contains__
    start = term.start or 0
    stop = math.inf if term.stop is None else term.stop
    step = term.step or 1
    return lambda value: start <= value < stop and (value - start) % step == 0


def _selector(text: str) -> tuple[Selection, int]:
    """Parse `ranks(...)` after any leading whitespace; returns it and the index after its ')'."""
    at = _skip(text, 0)
    if not text.startswith("ranks", at):
        _fail(text, at, "expected 'ranks('")
    ch, at = _next(text, at + len("ranks"))
    if ch != "(":
        _fail(text, at, f"expected '(' after 'ranks' but found {_describe(ch)}")
    ch, at = _next(text, at + 1)
    if ch == ")":
        _fail(text, at, "empty selector")
    if ch in _NAME_START:
        filters, end = _filters(text, at)
        selection = Selection(dims=filters)
    else:
        term, end = _rank_term(text, at)
        selection = Selection(ranks=term)
    if (after := _threads_after(text, end)) is not None:
        selection, end = replace(selection, threads=True), after
    return selection, _close(text, end)


def _threads_after(text: str, at: int) -> int | None:
    """The index after `, threads` when it comes next and closes the selector, else None (a
    dimension named threads is filtered on as `threads=...`)."""
    ch, comma = _next(text, at)
    if ch != ",":
        return None
    name, end = _name(text, _skip(text, comma + 1))
    return end if name == THREADS and _next(text, end)[0] == ")" else None


def _rank_term(text: str, at: int) -> tuple[Term, int]:
    first, end = _rank_or_slice(text, at, "a rank, a slice or a dimension name")
    if isinstance(first, RankSlice):
        ch, comma = _next(text, end)
        if ch == "," and _threads_after(text, end) is None:
            word_at = _skip(text, comma + 1)
            word, word_end = _name(text, word_at)
            if word == THREADS:
                _fail(text, _skip(text, word_end), f"expected ')' after {THREADS!r}")
            if word:
                _fail(text, word_at, f"expected {THREADS!r} but found {word!r}")
            _fail(text, comma, "a slice cannot be part of a list")
        return first, end
    ranks, end = _more_ranks(text, end, first, names_mix=True)
    return RankList(ranks), end


def _filters(text: str, at: int) -> tuple[tuple[DimFilter, ...], int]:
    filters: list[DimFilter] = []
    seen: set[str] = set()
    while True:
        ch, at = _next(text, at)
        name, end = _name(text, at)
        if name is None:
            mixed = ch == ":" or "0" <= ch <= "9"
            _fail(text, at, "cannot mix ranks and dimension filters" if mixed else _item_error(ch, "a dimension name"))
        if name in seen:
            _fail(text, at, f"duplicate dimension {name!r}")
        seen.add(name)
        ch, at = _next(text, end)
        if ch != "=":
            _fail(text, at, f"expected '=' after dimension {name!r} but found {_describe(ch)}")
        term, end = _filter_value(text, at + 1, name)
        filters.append(DimFilter(name, term))
        ch, at = _next(text, end)
        if ch != "," or _threads_after(text, end) is not None:
            return tuple(filters), end
        at += 1


def _filter_value(text: str, at: int, name: str) -> tuple[Term, int]:
    ch, at = _next(text, at)
    if ch in ("", ",", ")"):
        _fail(text, at, f"missing value for dimension {name!r}")
    if ch != "(":
        value, end = _rank_or_slice(text, at, "a rank, a slice or a parenthesised list")
        return (value if isinstance(value, RankSlice) else RankList((value,))), end
    first, end = _rank(text, at + 1, names_mix=False)
    ranks, end = _more_ranks(text, end, first, names_mix=False)
    if len(ranks) < 2:
        _fail(text, at, "a parenthesised list needs two or more ranks")
    return RankList(ranks), _close(text, end)


def _rank_or_slice(text: str, at: int, expected: str) -> tuple[int | RankSlice, int]:
    first, end = _number(text, at)
    parts = [first]
    ch, colon = _next(text, end)
    step_at = colon
    while ch == ":":
        if len(parts) == 3:
            _fail(text, colon, "too many ':' in slice")
        step_at = _skip(text, colon + 1)
        value, end = _number(text, step_at)
        parts.append(value)
        ch, colon = _next(text, end)
    if len(parts) == 1:
        if first is None:
            _fail(text, colon, _item_error(ch, expected))
        return first, end
    if len(parts) == 3 and parts[2] == 0:
        _fail(text, step_at, "slice step cannot be zero")
    return RankSlice(*parts), end


def _more_ranks(text: str, end: int, first: int, names_mix: bool) -> tuple[tuple[int, ...], int]:
    """The rest of a comma-separated list whose first rank is already read."""
    ranks = [first]
    ch, at = _next(text, end)
    while ch == "," and _threads_after(text, end) is None:
        value, end = _rank(text, at + 1, names_mix)
        ranks.append(value)
        ch, at = _next(text, end)
    if ch == ":":
        _fail(text, at, "a slice cannot be part of a list")
    return tuple(ranks), end


def _rank(text: str, at: int, names_mix: bool) -> tuple[int, int]:
    """A rank that must be there; `names_mix` says a name here would mix ranks with filters."""
    value, end = _number(text, at)
    if value is None:
        ch, at = _next(text, at)
        if ch == ":":
            reason = "a slice cannot be part of a list"
        elif ch in _NAME_START and names_mix:
            reason = "cannot mix ranks and dimension filters"
        else:
            reason = _item_error(ch, "a rank")
        _fail(text, at, reason)
    return value, end


def _number(text: str, at: int) -> tuple[int | None, int]:
    """A decimal at `at` or after whitespace; (None, at) when there is none."""
    ch, start = _next(text, at)
    if ch == "-":
        _fail(text, start, "negative numbers are not allowed")
    end = start
    while end < len(text) and "0" <= text[end] <= "9":
        end += 1
    if end == start:
        return None, at
    digits = text[start:end].lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS:
        _fail(text, start, f"number has more than {_MAX_DIGITS} digits")
    return int(digits), end


def _name(text: str, at: int) -> tuple[str | None, int]:
    if at >= len(text) or text[at] not in _NAME_START:
        return None, at
    end = at + 1
    while end < len(text) and text[end] in _NAME_REST:
        end += 1
    return text[at:end], end


def _close(text: str, at: int) -> int:
    ch, at = _next(text, at)
    if not ch:
        _fail(text, at, "missing ')'")
    if ch != ")":
        _fail(text, at, f"expected ',' or ')' but found {ch!r}")
    return at + 1


def _item_error(ch: str, expected: str) -> str:
    if ch in (",", ")"):
        return "empty item"
    return f"expected {expected} but found {_describe(ch)}"


def _describe(ch: str) -> str:
    return repr(ch) if ch else "end of text"


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _next(text: str, at: int) -> tuple[str, int]:
    """The next character that is not whitespace ('' at the end) and its index."""
    at = _skip(text, at)
    return (text[at] if at < len(text) else ""), at


def _fail(text: str, at: int, reason: str) -> NoReturn:
    """Raise for the character at index `at`, showing only the selector around it."""
    start = _skip(text, 0)
    shown = text[start : _selector_end(text, start, at)].rstrip()
    raise SelectorError(shown, min(at - start, len(shown)) + 1, reason)


def _selector_end(text: str, start: int, at: int) -> int:
    """Index after the ')' closing the selector at or after `at`, else the end of the text."""
    depth = 0
    for index in range(start, len(text)):
        depth += (text[index] == "(") - (text[index] == ")")
        if index >= at and depth <= 0 and text[index] == ")":
            return index + 1
    return len(text)
