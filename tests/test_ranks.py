"""The `ranks(...)` language: every documented form, every malformed one, and properties that hold
it against Python's own slicing, a brute-force coordinate filter, and arbitrary text."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monarch_pdb.ranks import (
    DimFilter,
    RankList,
    RankSet,
    RankSlice,
    Selection,
    SelectorError,
    dimensions,
    format_ranks,
    named,
    parse_ranks,
    parse_selector,
    render_selector,
    select,
    split_selector,
)

# The guide's mesh: {"host": 4, "gpu": 4}, row-major, rank = host * 4 + gpu.
MESH = [(rank, {"host": rank // 4, "gpu": rank % 4}) for rank in range(16)]
EVERY = list(range(16))

VALID = [
    # text as typed, canonical text, ranks it selects in MESH
    ("ranks(3)", "ranks(3)", [3]),
    ("ranks(1,4,6)", "ranks(1,4,6)", [1, 4, 6]),
    ("ranks(0,1)", "ranks(0,1)", [0, 1]),
    ("ranks(6,1,4,1)", "ranks(6,1,4,1)", [1, 4, 6]),
    ("ranks(2:7:2)", "ranks(2:7:2)", [2, 4, 6]),
    ("ranks(:)", "ranks(:)", EVERY),
    ("ranks(::)", "ranks(:)", EVERY),
    ("ranks(:8)", "ranks(:8)", list(range(8))),
    ("ranks(8:)", "ranks(8:)", list(range(8, 16))),
    ("ranks(::4)", "ranks(::4)", [0, 4, 8, 12]),
    ("ranks(2:7:1)", "ranks(2:7:1)", [2, 3, 4, 5, 6]),
    ("ranks(3::5)", "ranks(3::5)", [3, 8, 13]),
    ("ranks(7:2)", "ranks(7:2)", []),
    ("ranks(99)", "ranks(99)", []),
    ("ranks(007)", "ranks(7)", [7]),
    ("ranks(host=1)", "ranks(host=1)", [4, 5, 6, 7]),
    ("ranks(host=2:4, gpu=1:3)", "ranks(host=2:4, gpu=1:3)", [9, 10, 13, 14]),
    ("ranks(host=(0,2), gpu=::2)", "ranks(host=(0,2), gpu=::2)", [0, 2, 8, 10]),
    ("ranks(gpu=3,host=0)", "ranks(gpu=3, host=0)", [3]),
    ("ranks(host=(3,1,1))", "ranks(host=(3,1,1))", [4, 5, 6, 7, 12, 13, 14, 15]),
    ("ranks(host=:, gpu=:)", "ranks(host=:, gpu=:)", EVERY),
    # The guide's own example names `gpus`, which this mesh lacks: it selects nothing.
    ("ranks(host=2:4, gpus=1:3)", "ranks(host=2:4, gpus=1:3)", []),
    ("ranks(_node2=0)", "ranks(_node2=0)", []),
    ("ranks (\t1 , 4 ,\n6 )", "ranks(1,4,6)", [1, 4, 6]),
    (" ranks ( host = ( 0 , 2 ) , gpu = : : 2 ) ", "ranks(host=(0,2), gpu=::2)", [0, 2, 8, 10]),
    ("ranks( 2 : 7 : 2 )", "ranks(2:7:2)", [2, 4, 6]),
    # Other threads' sessions too, where the broker has them; in a mesh of ranks, the same ranks.
    ("ranks(:, threads)", "ranks(:, threads)", EVERY),
    ("ranks( host = 1 ,threads )", "ranks(host=1, threads)", [4, 5, 6, 7]),
    ("ranks(1,4, threads)", "ranks(1,4, threads)", [1, 4]),
    ("ranks(threads=1)", "ranks(threads=1)", []),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("text", "canonical", "expected"), VALID)
def test_valid_forms(text: str, canonical: str, expected: list[int]) -> None:
    selection = parse_selector(text)
    assert render_selector(selection) == canonical
    assert str(selection) == canonical
    assert parse_selector(canonical) == selection
    assert select(selection, MESH) == expected


@pytest.mark.timeout(10)
def test_parsed_form() -> None:
    assert parse_selector("ranks(3)") == Selection(ranks=RankList((3,)))
    assert parse_selector("ranks(1,4,6)") == Selection(ranks=RankList((1, 4, 6)))
    assert parse_selector("ranks(2:7:2)") == Selection(ranks=RankSlice(2, 7, 2))
    assert parse_selector("ranks(:)") == parse_selector("ranks(::)") == Selection(ranks=RankSlice())
    assert parse_selector("ranks(8:)") == Selection(ranks=RankSlice(start=8))
    assert parse_selector("ranks(host=(0,2), gpu=::2)") == Selection(
        dims=(DimFilter("host", RankList((0, 2))), DimFilter("gpu", RankSlice(step=2)))
    )


MALFORMED = [
    # text, the whole one-line message
    ("ranks()", "ranks(): empty selector at position 7"),
    ("ranks(1,)", "ranks(1,): empty item at position 9"),
    ("ranks(,1)", "ranks(,1): empty item at position 7"),
    ("ranks(1,,2)", "ranks(1,,2): empty item at position 9"),
    ("ranks(a:2)", "ranks(a:2): expected '=' after dimension 'a' but found ':' at position 8"),
    ("ranks(:::)", "ranks(:::): too many ':' in slice at position 9"),
    ("ranks(1:2:3:)", "ranks(1:2:3:): too many ':' in slice at position 12"),
    ("ranks(1:2:3,4)", "ranks(1:2:3,4): a slice cannot be part of a list at position 12"),
    ("ranks(1,2:3)", "ranks(1,2:3): a slice cannot be part of a list at position 10"),
    ("ranks(1,:3)", "ranks(1,:3): a slice cannot be part of a list at position 9"),
    ("ranks(dim1=)", "ranks(dim1=): missing value for dimension 'dim1' at position 12"),
    ("ranks(dim1=, gpu=1)", "ranks(dim1=, gpu=1): missing value for dimension 'dim1' at position 12"),
    ("ranks(dim1=1,)", "ranks(dim1=1,): empty item at position 14"),
    ("ranks(1,2", "ranks(1,2: missing ')' at position 10"),
    ("ranks(host=(0,2)", "ranks(host=(0,2): missing ')' at position 17"),
    ("ranks(3", "ranks(3: missing ')' at position 8"),
    ("ranks(", "ranks(: expected a rank, a slice or a dimension name but found end of text at position 7"),
    ("ranks(1,", "ranks(1,: expected a rank but found end of text at position 9"),
    ("ranks(2:7:0)", "ranks(2:7:0): slice step cannot be zero at position 11"),
    ("ranks(::0)", "ranks(::0): slice step cannot be zero at position 9"),
    ("ranks(gpu=1::00)", "ranks(gpu=1::00): slice step cannot be zero at position 14"),
    ("ranks(-1)", "ranks(-1): negative numbers are not allowed at position 7"),
    ("ranks(1:-3)", "ranks(1:-3): negative numbers are not allowed at position 9"),
    ("ranks(2,-3)", "ranks(2,-3): negative numbers are not allowed at position 9"),
    ("ranks(host=-1)", "ranks(host=-1): negative numbers are not allowed at position 12"),
    ("ranks(host=1, host=2)", "ranks(host=1, host=2): duplicate dimension 'host' at position 15"),
    ("ranks(1, host=2)", "ranks(1, host=2): cannot mix ranks and dimension filters at position 10"),
    ("ranks(host=1, 2)", "ranks(host=1, 2): cannot mix ranks and dimension filters at position 15"),
    ("ranks(host=1,:)", "ranks(host=1,:): cannot mix ranks and dimension filters at position 14"),
    ("ranks(1) x", "ranks(1) x: unexpected text after the selector at position 10"),
    ("ranks(1))", "ranks(1)): unexpected text after the selector at position 9"),
    ("ranks(1 2)", "ranks(1 2): expected ',' or ')' but found '2' at position 9"),
    ("ranks(1.5)", "ranks(1.5): expected ',' or ')' but found '.' at position 8"),
    ("ranks(host=1 gpu=2)", "ranks(host=1 gpu=2): expected ',' or ')' but found 'g' at position 14"),
    ("ranks(host==1)", "ranks(host==1): expected a rank, a slice or a parenthesised list but found '=' at position 12"),
    ("ranks(host=(1))", "ranks(host=(1)): a parenthesised list needs two or more ranks at position 12"),
    ("ranks(host=())", "ranks(host=()): empty item at position 13"),
    ("ranks(host=(0,,2), gpu=1)", "ranks(host=(0,,2), gpu=1): empty item at position 15"),
    ("ranks(host=(1:2,3))", "ranks(host=(1:2,3)): a slice cannot be part of a list at position 14"),
    ("ranks(host=(0,gpu))", "ranks(host=(0,gpu)): expected a rank but found 'g' at position 15"),
    ("ranks(host=((0,1)))", "ranks(host=((0,1))): expected a rank but found '(' at position 13"),
    ("ranks((1,2))", "ranks((1,2)): expected a rank, a slice or a dimension name but found '(' at position 7"),
    ("ranks(gpü=1)", "ranks(gpü=1): expected '=' after dimension 'gp' but found 'ü' at position 9"),
    ("ranks(١)", "ranks(١): expected a rank, a slice or a dimension name but found '١' at position 7"),
    ("ranks(1234567890123456789)", "ranks(1234567890123456789): number has more than 18 digits at position 7"),
    ("rank(1)", "rank(1): expected 'ranks(' at position 1"),
    ("Ranks(1)", "Ranks(1): expected 'ranks(' at position 1"),
    ("ranks 1", "ranks 1: expected '(' after 'ranks' but found '1' at position 7"),
    ("ranks", "ranks: expected '(' after 'ranks' but found end of text at position 6"),
    ("", "'': expected 'ranks(' at position 1"),
    ("   ", "'': expected 'ranks(' at position 1"),
    ("  ranks(1,,2)  ", "ranks(1,,2): empty item at position 9"),
    ("ranks(1\n,,2)", "'ranks(1\\n,,2)': empty item at position 10"),
    ("ranks(:, thread)", "ranks(:, thread): expected 'threads' but found 'thread' at position 10"),
    ("ranks(threads)", "ranks(threads): expected '=' after dimension 'threads' but found ')' at position 14"),
    ("ranks(:, threads, 1)", "ranks(:, threads, 1): expected ')' after 'threads' at position 17"),
    ("ranks(:, 1)", "ranks(:, 1): a slice cannot be part of a list at position 8"),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_forms(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    error = caught.value
    assert str(error) == message
    assert isinstance(error, ValueError)
    assert message.endswith(f": {error.reason} at position {error.position}")
    assert error.text in text


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("text", "pointed_at"),
    [("ranks(1,,2)", ","), ("ranks(2:7:0)", "0"), ("ranks(host=1, host=2)", "h"), ("ranks(1,2", "")],
)
def test_position_points_at_the_culprit(text: str, pointed_at: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    error = caught.value
    assert error.text[error.position - 1 : error.position] == pointed_at


SPLITS = [
    # text after `cast <actor> `, canonical selector, pdb command kept verbatim
    ("ranks(0,1) n", "ranks(0,1)", "n"),
    ("ranks(2:7:2) s", "ranks(2:7:2)", "s"),
    ("ranks(host=2:4, gpus=1:3) c", "ranks(host=2:4, gpus=1:3)", "c"),
    ("ranks(1) p (x, y)[0]", "ranks(1)", "p (x, y)[0]"),
    ("ranks (1)   !print('a)', \"b(\")  ", "ranks(1)", "!print('a)', \"b(\")  "),
    ("ranks(host=(0,2))?x", "ranks(host=(0,2))", "?x"),
    ("ranks(3) ranks(4) p 'ranks('", "ranks(3)", "ranks(4) p 'ranks('"),
    ("ranks(1)", "ranks(1)", ""),
    ("  ranks( : ) \t", "ranks(:)", ""),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("text", "canonical", "rest"), SPLITS)
def test_split_keeps_the_command_verbatim(text: str, canonical: str, rest: str) -> None:
    selection, command = split_selector(text)
    assert render_selector(selection) == canonical
    assert command == rest


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ranks(1,,2) p (x)", "ranks(1,,2): empty item at position 9"),
        ("ranks(host=(0,,2), gpu=1) p (x)", "ranks(host=(0,,2), gpu=1): empty item at position 15"),
        ("ranks(2:7:0) c", "ranks(2:7:0): slice step cannot be zero at position 11"),
        ("ranks(1,2 p (x)", "ranks(1,2 p (x): expected ',' or ')' but found 'p' at position 11"),
        ("3 p x", "3 p x: expected 'ranks(' at position 1"),
    ],
)
def test_split_errors_show_only_the_selector(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        split_selector(text)
    assert str(caught.value) == message


@pytest.mark.timeout(10)
def test_dimensions_name_what_the_shell_must_check() -> None:
    selection = parse_selector("ranks(host=2:4, gpus=1:3)")
    assert dimensions(selection) == ("host", "gpus")
    assert [d for d in dimensions(selection) if d not in MESH[0][1]] == ["gpus"]
    assert dimensions(parse_selector("ranks(1,2)")) == ()


def test_only_a_list_of_ranks_names_ranks_that_must_be_there() -> None:
    assert named(parse_selector("ranks(0, 7)")) == (0, 7) and named(parse_selector("ranks(3)")) == (3,)
    assert [named(parse_selector(text)) for text in ("ranks(:)", "ranks(2:9)", "ranks(host=(0,9))")] == [(), (), ()]


@pytest.mark.timeout(10)
def test_select_sorts_and_skips_ranks_without_the_dimension() -> None:
    candidates = [(9, {"host": 1}), (3, {"host": 1, "gpu": 0}), (5, {}), (1, {"host": 1})]
    assert select(parse_selector("ranks(host=1)"), candidates) == [1, 3, 9]
    assert select(parse_selector("ranks(host=1, gpu=0)"), candidates) == [3]
    assert select(parse_selector("ranks(:)"), iter(candidates)) == [1, 3, 5, 9]
    assert select(parse_selector("ranks(host=:)"), iter(candidates)) == [1, 3, 9]


# How a selector resolves against the ranks that are there (the broker's sessions or live ranks):
# `select` picks, `named` says which picked ranks had to be there, the rest are reported missing.
THERE = [(0, {"host": 0, "gpu": 0}), (2, {"host": 0, "gpu": 2}), (5, {"host": 1, "gpu": 1}), (6, {"host": 1, "gpu": 2})]


@pytest.mark.timeout(10)
def test_a_slice_picks_rank_numbers_not_positions_among_the_ranks_there() -> None:
    assert select(parse_selector("ranks(1:3)"), THERE) == [2]
    assert select(parse_selector("ranks(:2)"), THERE) == [0]
    assert select(parse_selector("ranks(1::2)"), THERE) == [5]
    assert select(parse_selector("ranks(host=1, gpu=1:)"), THERE) == [5, 6]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("text", "picked", "missing"),
    [
        ("ranks(0,2,7)", [0, 2], [7]),
        ("ranks(7,1)", [], [1, 7]),
        ("ranks(6)", [6], []),
        ("ranks(0:99)", [0, 2, 5, 6], []),
        ("ranks(host=(1,3))", [5, 6], []),
        ("ranks(host=3)", [], []),
    ],
)
def test_only_ranks_listed_one_by_one_are_missing_when_not_there(
    text: str, picked: list[int], missing: list[int]
) -> None:
    selection = parse_selector(text)
    chosen = select(selection, THERE)
    assert chosen == picked
    assert sorted(set(named(selection)) - set(chosen)) == missing


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", ["ranks(:)", "ranks(0)", "ranks(0,1)", "ranks(host=0)", "ranks(host=:, gpu=0)"])
def test_no_rank_is_picked_where_no_rank_is_there(text: str) -> None:
    assert select(parse_selector(text), []) == []


@pytest.mark.timeout(10)
def test_a_filter_picks_only_ranks_that_have_its_dimension() -> None:
    mixed = [*THERE, (40, {"host": 1, "gpu": 1, "replica": 0}), (41, {"replica": 1})]
    assert select(parse_selector("ranks(replica=:)"), mixed) == [40, 41]
    assert select(parse_selector("ranks(host=1, gpu=1)"), mixed) == [5, 40]
    assert select(parse_selector("ranks(:)"), mixed) == [0, 2, 5, 6, 40, 41]


@pytest.mark.timeout(30)
def test_select_over_16384_ranks() -> None:
    mesh = [(rank, {"host": rank // 128, "gpu": rank % 128}) for rank in range(16384)]
    cases = {
        "ranks(::3)": 5462,
        "ranks(host=2:100:3, gpu=(1,5,7,100))": 33 * 4,
        "ranks(host=:, gpu=:)": 16384,
        "ranks(" + ",".join(map(str, range(0, 16384, 2))) + ")": 8192,
    }
    for text, count in cases.items():
        assert len(select(parse_selector(text), mesh)) == count


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("ranks", "text"),
    [
        ([], ""),
        ([7], "7"),
        ([4, 5], "4,5"),
        ([4, 5, 6], "4-6"),
        ([0, 1, 2, 3, 5, 8, 9, 10, 11, 12, 13, 14, 15], "0-3,5,8-15"),
        ([15, 3, 3, 0, 1, 2, 9, 10], "0-3,9,10,15"),
    ],
)
def test_format_ranks(ranks: list[int], text: str) -> None:
    assert format_ranks(ranks) == text
    assert parse_ranks(text) == sorted(set(ranks))


@pytest.mark.timeout(10)
def test_parse_ranks_is_lenient_about_order_and_pairs() -> None:
    assert parse_ranks(" 8-10 , 4-5,0, 9 ") == [0, 4, 5, 8, 9, 10]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,,2", "1,,2: empty item at position 3"),
        ("1,", "1,: expected a rank but found end of text at position 3"),
        ("3-1", "3-1: range 3-1 runs backwards at position 1"),
        ("1-", "1-: expected a rank but found end of text at position 3"),
        ("0-3 5", "0-3 5: expected ',' or '-' but found '5' at position 5"),
        ("-2", "-2: negative numbers are not allowed at position 1"),
        ("0-99999999999", "0-99999999999: more than 1048576 ranks at position 1"),
    ],
)
def test_parse_ranks_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_ranks(text)
    assert str(caught.value) == message


# Property tests.

BOUND = st.none() | st.integers(0, 90)
STEP = st.none() | st.integers(1, 12)
GAP = st.sampled_from(["", "", " ", "\t", "  "])


def _part(value: int | None) -> str:
    return "" if value is None else str(value)


def _spaced(tokens: list[str], data: st.DataObject) -> str:
    """The tokens joined with random whitespace, which the grammar must ignore."""
    gaps = data.draw(st.lists(GAP, min_size=len(tokens), max_size=len(tokens)))
    return "".join(gap + token for gap, token in zip(gaps, tokens))


def _slice_tokens(start: int | None, stop: int | None, step: int | None, three: bool) -> list[str]:
    tokens = [_part(start), ":", _part(stop)]
    return tokens + [":", _part(step)] if three or step is not None else tokens


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None)
@given(size=st.integers(0, 80), start=BOUND, stop=BOUND, step=STEP, three=st.booleans(), data=st.data())
def test_slices_follow_python(
    size: int, start: int | None, stop: int | None, step: int | None, three: bool, data: st.DataObject
) -> None:
    present = data.draw(st.lists(st.booleans(), min_size=size, max_size=size))
    candidates = [(rank, {}) for rank in range(size) if present[rank]]
    text = _spaced(["ranks", "(", *_slice_tokens(start, stop, step, three), ")"], data)
    expected = [rank for rank in range(size)[slice(start, stop, step)] if present[rank]]
    assert select(parse_selector(text), candidates) == expected


DIM_NAMES = ["host", "gpu", "node"]
VALUE = st.integers(0, 6)
FILTER_TERM = st.one_of(
    st.tuples(st.just("one"), VALUE),
    st.tuples(st.just("list"), st.lists(VALUE, min_size=2, max_size=4)),
    st.tuples(st.just("slice"), st.tuples(st.none() | VALUE, st.none() | VALUE, st.none() | VALUE.filter(bool))),
)


FilterValue = int | list[int] | tuple[int | None, int | None, int | None]


def _filter_tokens(kind: str, value: FilterValue) -> list[str]:
    if kind == "one":
        return [str(value)]
    if kind == "list":
        return ["(", *[token for rank in value for token in (",", str(rank))][1:], ")"]
    return _slice_tokens(*value, three=value[2] is not None)


def _brute_match(kind: str, value: FilterValue, coordinate: int) -> bool:
    if kind == "one":
        return coordinate == value
    if kind == "list":
        return coordinate in value
    return coordinate in list(range(50))[slice(*value)]


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None)
@given(
    mesh=st.lists(
        st.tuples(st.sampled_from(DIM_NAMES), st.integers(1, 5)), min_size=1, max_size=3, unique_by=lambda dim: dim[0]
    ),
    filters=st.lists(
        st.tuples(st.sampled_from([*DIM_NAMES, "gpus"]), FILTER_TERM), min_size=1, max_size=3, unique_by=lambda f: f[0]
    ),
    data=st.data(),
)
def test_dimension_filters_match_brute_force(
    mesh: list[tuple[str, int]], filters: list[tuple[str, tuple[str, FilterValue]]], data: st.DataObject
) -> None:
    everyone = []
    for rank in range(math.prod(size for _, size in mesh)):
        coords, rest = {}, rank
        for name, size in reversed(mesh):
            coords[name] = rest % size
            rest //= size
        everyone.append((rank, coords))
    candidates = [c for c in everyone if data.draw(st.booleans())]
    tokens = ["ranks", "("]
    for index, (name, (kind, value)) in enumerate(filters):
        tokens += ([","] if index else []) + [name, "=", *_filter_tokens(kind, value)]
    text = _spaced(tokens + [")"], data)
    expected = [
        rank
        for rank, coords in candidates
        if all(name in coords and _brute_match(kind, value, coords[name]) for name, (kind, value) in filters)
    ]
    selection = parse_selector(text)
    assert dimensions(selection) == tuple(name for name, _ in filters)
    assert select(selection, candidates) == expected


NUMBER = st.integers(0, 10**18 - 1)
TERMS = st.one_of(
    st.builds(RankSlice, st.none() | NUMBER, st.none() | NUMBER, st.none() | NUMBER.filter(bool)),
    st.lists(NUMBER, min_size=1, max_size=5).map(lambda ranks: RankList(tuple(ranks))),
)
NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
SELECTIONS = st.one_of(
    st.builds(Selection, ranks=TERMS, threads=st.booleans()),
    st.builds(
        lambda filters, threads: Selection(dims=tuple(filters), threads=threads),
        st.lists(st.builds(DimFilter, NAME, TERMS), min_size=1, max_size=4, unique_by=lambda f: f.dim),
        st.booleans(),
    ),
)


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None)
@given(SELECTIONS)
def test_render_parse_round_trip(selection: Selection) -> None:
    text = render_selector(selection)
    assert parse_selector(text) == selection
    assert render_selector(parse_selector(text)) == text
    assert split_selector(f"{text} p (x)") == (selection, "p (x)")


GRAMMAR = "ranks()0123456789:,=-_ \t\nhostgpu.!?'\"ü١"
FUZZ = st.one_of(
    st.text(max_size=40),
    st.text(GRAMMAR, max_size=40),
    st.text(GRAMMAR, max_size=30).map(lambda tail: "ranks(" + tail),
)


def _check_error(error: SelectorError, text: str) -> None:
    assert "\n" not in str(error) and "\r" not in str(error)
    assert error.text in text
    assert 1 <= error.position <= len(error.text) + 1


def _never_raises_anything_else(text: str) -> None:
    for parse in (parse_selector, split_selector, parse_ranks):
        try:
            parsed = parse(text)
        except SelectorError as error:
            _check_error(error, text)
            continue
        if parse is parse_selector:
            assert parse_selector(render_selector(parsed)) == parsed


@pytest.mark.timeout(60)
@settings(max_examples=500, deadline=None)
@given(FUZZ)
def test_fuzz_raises_only_selector_error(text: str) -> None:
    _never_raises_anything_else(text)


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None)
@given(SELECTIONS, st.data())
def test_fuzz_near_valid_selectors(selection: Selection, data: st.DataObject) -> None:
    text = render_selector(selection)
    at = data.draw(st.integers(0, len(text)))
    edit = data.draw(st.sampled_from(["insert", "delete", "replace"]))
    char = data.draw(st.sampled_from(GRAMMAR))
    skip = 0 if edit == "insert" else 1
    inserted = "" if edit == "delete" else char
    _never_raises_anything_else(text[:at] + inserted + text[at + skip :])


@pytest.mark.timeout(30)
def test_hostile_lengths_raise_selector_error() -> None:
    for text in [
        "ranks(" + "0" * 10000 + ")",
        "ranks(" + "(" * 5000,
        "ranks(" + "a=1," * 3000 + ")",
        "ranks(" + "1," * 5000,
        "0-" + "9" * 5000,
    ]:
        _never_raises_anything_else(text)


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 400), max_size=60))
def test_compact_round_trip(ranks: set[int]) -> None:
    text = format_ranks(ranks)
    assert parse_ranks(text) == sorted(ranks)
    assert format_ranks(parse_ranks(text)) == text
    items = [tuple(map(int, item.split("-"))) for item in text.split(",")] if text else []
    for low, *high in items:
        assert not high or high[0] - low >= 2, text
    for before, after in zip(items, items[1:]):
        assert after[0] > before[-1] + 1 or (len(before) == len(after) == 1), text
    for first, second, third in zip(items, items[1:], items[2:]):
        assert not (len(first) == len(second) == len(third) == 1 and third[0] - first[0] == 2), text


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 3000),
    st.integers(0, 3000),
    st.lists(st.integers(0, 6000), max_size=12),
    st.sampled_from(["ascending", "shuffled", "with repeats", "iterator"]),
    st.randoms(),
)
def test_a_rank_set_holds_its_ranks_once_as_ascending_runs_however_they_come(start, length, holes, order, rng):
    wanted = sorted(set(range(start, start + length)) - set(holes))
    came = list(wanted)
    if order == "shuffled":
        rng.shuffle(came)
    elif order == "with repeats":
        came += wanted[: len(wanted) // 3]
    made = RankSet.of(iter(came) if order == "iterator" else came)
    runs, first = [], None
    for at, rank in enumerate(wanted):  # brute force: a run ends where the next rank is not one more
        first = rank if first is None else first
        if at + 1 == len(wanted) or wanted[at + 1] != rank + 1:
            runs.append((first, rank))
            first = None
    assert list(made.runs()) == runs and len(made) == len(wanted) and list(made) == wanted
