"""The wire protocol: every message signed, batched and checked, and what is refused counted."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgpack
import pytest

from monarch_pdb import wire
from monarch_pdb.ranks import RankSet

KEY = b"k" * 32


@dataclass(frozen=True)
class Stamp:
    """A body's time stamp, `offset` seconds from when its test runs: a stamp taken when the
    module is imported is too old for the codec once the suite has run longer than its limit."""

    offset: float = 0.0

    def __add__(self, seconds: float) -> Stamp:
        return Stamp(self.offset + seconds)

    def __sub__(self, seconds: float) -> Stamp:
        return Stamp(self.offset - seconds)


NOW = Stamp()
Frames = Callable[[], list[bytes]]
"""A message's frames, made when the test asks for them."""


def roundtrip(msg: wire.Message, sender: wire.Codec | None = None) -> wire.Message:
    [decoded] = wire.Codec(KEY).decode((sender or wire.Codec(KEY)).encode(msg))
    return decoded


@pytest.mark.timeout(10)
def test_every_message_type_round_trips_signed():
    samples = [
        wire.Hello(role="agent", job="job", host="h", pid=1),
        wire.Heartbeat(),
        wire.Input(sid=1, cmd=2, line="p x", release=True),
        wire.Cast(ref=1, actor="a", selector="ranks(:)", line="p 1", timeout=1.5),
    ]
    for msg in samples:
        assert roundtrip(msg) == msg
    assert set(wire.message_types()) >= {"hello", "prompt", "input", "cast", "cast_result", "event"}


@pytest.mark.timeout(30)
def test_a_message_of_a_module_not_yet_loaded_is_decoded_all_the_same():
    """A rank loads the messages of shells and brokers only when one reaches it. (Its codec takes
    any time stamp: the frames carry this test's clock, which a test below moves.)"""
    frames = wire.Codec(KEY).encode(wire.Cast(ref=1, actor="a", selector="ranks(0)", line="p 1", timeout=1.5))
    code = f"""
import sys
from monarch_pdb import wire
before = "monarch_pdb.wire.clients" in sys.modules
[msg] = wire.Codec({KEY!r}, max_age=float("inf")).decode({frames!r})
print(before, type(msg).__name__, msg.line)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["False", "Cast", "p", "1"], done.stderr


def signed(packed: bytes, key: bytes = KEY) -> list[bytes]:
    return [hmac.new(key, packed, hashlib.sha256).digest(), packed]


def frames_with(body: dict, key: bytes = KEY) -> Frames:
    def made() -> list[bytes]:
        now = time.time()
        return signed(msgpack.packb({k: now + v.offset if isinstance(v, Stamp) else v for k, v in body.items()}), key)

    return made


def as_is(frames: list[bytes]) -> Frames:
    return lambda: frames


@pytest.mark.timeout(10)
def test_many_messages_travel_in_few_signed_batches_in_order_each_half_the_largest_message():
    sender, receiver = wire.Codec(KEY, max_body=8192), wire.Codec(KEY, max_body=8192)
    inputs = [wire.Input(sid=n, cmd=1, line="p rank") for n in range(1000)]
    big = wire.Output(sid=0, text="x" * 3000)
    bodies = sender.encode_many([*inputs[:500], big, *inputs[500:]])
    assert 10 < len(bodies) < 30
    assert all(len(packed) <= 4096 + 100 for _, packed in bodies)
    decoded = [msg for frames in bodies for msg in receiver.decode(frames)]
    assert decoded == [*inputs[:500], big, *inputs[500:]]


def batch_of(*items: bytes) -> Frames:
    return frames_with({"v": wire.PROTOCOL, "t": "batch", "s": b"s", "n": 1, "ts": NOW, "items": list(items)})


HEARTBEAT_ITEM = msgpack.packb({"t": "heartbeat"})


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        (
            batch_of(HEARTBEAT_ITEM, msgpack.packb({"t": "input", "sid": "1", "cmd": 1, "line": "x"})),
            "wrong field type",
        ),
        (batch_of(HEARTBEAT_ITEM, msgpack.packb({"t": "batch", "items": [HEARTBEAT_ITEM]})), "unknown type"),
        (batch_of(HEARTBEAT_ITEM, b"\xc1"), "undecodable"),
        (batch_of(HEARTBEAT_ITEM, msgpack.packb([1])), "wrong protocol"),
        (
            frames_with(
                {"v": wire.PROTOCOL, "t": "batch", "s": b"s", "n": 1, "ts": NOW, "items": [{"t": "heartbeat"}]}
            ),
            "wrong field type",
        ),
        (frames_with({"v": wire.PROTOCOL, "t": "batch", "s": b"s", "n": 1, "ts": NOW}), "wrong field type"),
    ],
)
def test_a_batch_with_one_bad_item_is_refused_whole(frames, reason):
    codec = wire.Codec(KEY)
    with pytest.raises(wire.Dropped, match=reason):
        codec.decode(frames())
    assert codec.refused == {reason: 1}


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        (as_is([b"only one"]), "too few frames"),
        (as_is([b"x" * 32, b"\x00" * (wire.MAX_BODY + 1)]), "too large"),
        (as_is([b"x" * 32, msgpack.packb({"v": wire.PROTOCOL})]), "bad signature"),
        (frames_with({"v": wire.PROTOCOL, "t": "hello"}, key=b"wrong"), "bad signature"),
        (as_is(signed(b"\xc1")), "undecodable"),
        (as_is(signed(msgpack.packb([1, 2]))), "wrong protocol"),
        (frames_with({"v": 99, "t": "heartbeat", "s": b"s", "n": 1, "ts": NOW}), "wrong protocol"),
        (frames_with({"v": wire.PROTOCOL, "t": "nosuch", "s": b"s", "n": 1, "ts": NOW}), "unknown type"),
        (frames_with({"v": wire.PROTOCOL, "t": "heartbeat"}), "no sender"),
        (frames_with({"v": wire.PROTOCOL, "t": "heartbeat", "s": b"s", "n": 1, "ts": NOW - 3600}), "too old"),
        (frames_with({"v": wire.PROTOCOL, "t": "heartbeat", "s": b"s", "n": 1, "ts": NOW + 3600}), "too old"),
        (
            frames_with(
                {"v": wire.PROTOCOL, "t": "input", "s": b"s", "n": 1, "ts": NOW, "sid": "1", "cmd": 1, "line": "x"}
            ),
            "wrong field type",
        ),
        (
            frames_with(
                {"v": wire.PROTOCOL, "t": "input", "s": b"s", "n": 1, "ts": NOW, "sid": True, "cmd": 1, "line": "x"}
            ),
            "wrong field type",
        ),
        (
            frames_with({"v": wire.PROTOCOL, "t": "input", "s": b"s", "n": 1, "ts": NOW, "cmd": 1, "line": "x"}),
            "missing field",
        ),
    ],
)
def test_bad_messages_are_refused_and_counted(frames, reason):
    codec = wire.Codec(KEY)
    with pytest.raises(wire.Dropped, match=reason):
        codec.decode(frames())
    assert codec.refused[reason] == 1


FRAME = [__file__, 9, "step"]
THREAD = ["MainThread", [FRAME]]


def typed(t: str, **fields) -> Frames:
    return frames_with({"v": wire.PROTOCOL, "t": t, "s": b"s", "n": 1, "ts": NOW, **fields})


@pytest.mark.timeout(10)
def test_nested_records_round_trip_as_arrays_checked_all_the_way_down():
    frame = wire.Frame(__file__, 9, "step")
    report = wire.StackReport(
        ref=1, groups=[wire.StackGroup([wire.ThreadStack("MainThread", [frame])], RankSet.of([0, 2]))]
    )
    assert roundtrip(report) == report
    result = wire.CastResult(
        ref=1, actor="a", groups=[wire.CastGroup("1\n", "", RankSet.of([0]))], missing=[wire.Missing(3, "lost")]
    )
    assert roundtrip(result) == result
    present = wire.Present(ranks=[wire.PresentRank("job", "a", 0, {"gpu": 0})])
    assert roundtrip(present) == present
    [decoded] = wire.Codec(KEY).decode(typed("stack_report", ref=1, groups=[[[THREAD], [0, 0]]])())
    assert decoded == wire.StackReport(
        ref=1, groups=[wire.StackGroup([wire.ThreadStack("MainThread", [frame])], RankSet.of([0]))]
    )


@pytest.mark.timeout(60)  # a million ranks made into a set in Python, on a busy machine
def test_rank_sets_travel_as_their_runs_so_a_million_ranks_in_a_row_are_two_numbers():
    everyone = RankSet.of(range(1 << 20))
    result = wire.CastResult(
        ref=1,
        actor="a",
        groups=[
            wire.CastGroup("'__main__'\n", "", everyone),
            wire.CastGroup("1\n", "", RankSet.of([1, 2, 3, 7, 9, 10])),
        ],
        missing=[],
    )
    frames = wire.Codec(KEY).encode(result)
    assert len(frames[1]) < 200, "two numbers for 1,048,576 ranks, not a list of them"
    [decoded] = wire.Codec(KEY).decode(frames)
    assert decoded == result
    assert len(decoded.groups[0].ranks) == 1 << 20 and decoded.groups[0].ranks.spans == (0, (1 << 20) - 1)
    assert list(decoded.groups[1].ranks) == [1, 2, 3, 7, 9, 10] and str(decoded.groups[1].ranks) == "1-3,7,9,10"
    down = wire.CastDown(ref=1, job="j", actor="a", ranks=RankSet(), line="p rank", timeout=1.0, selector="ranks(:)")
    assert roundtrip(down) == down


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "frames",
    [
        typed("stack_report", ref=1, groups=[[[THREAD], [0, "1"]]]),
        typed("stack_report", ref=1, groups=[[[["MainThread", [[__file__, "9", "step"]]]], [0]]]),
        typed("stack_report", ref=1, groups=[[[["MainThread", "not frames"]], [0]]]),
        typed("stack_report", ref=1, groups=[[[THREAD], [0]], "junk"]),
        typed("stack_report", ref=1, groups=[[[THREAD]]]),
        typed("cast_result", ref=1, actor="a", groups=[["1\n", "", [True, True]]], missing=[]),
        typed("cast_result", ref=1, actor="a", groups=[["1\n", "", [0]]], missing=[]),
        typed("cast_result", ref=1, actor="a", groups=[["1\n", "", [5, 3]]], missing=[]),
        typed("cast_result", ref=1, actor="a", groups=[["1\n", "", [0, 3, 4, 9]]], missing=[]),
        typed("cast_result", ref=1, actor="a", groups=[["1\n", "", [-1, 3]]], missing=[]),
        typed("cast_down", ref=1, job="j", actor="a", ranks=[8, 9, 0, 3], line="p 1", timeout=1.0),
        typed("cast_result", ref=1, actor="a", groups=[], missing=[[3, "lost", "extra"]]),
        typed("present", ranks=[["job", "a", 0, {"gpu": 0.5}]]),
        typed("present", ranks=[["job", "a", 0, {"gpu": "0"}]]),
        typed("sessions", rows=[{"job": "job"}]),
        typed("following", job="job", actor="a", sessions=[[1, 0]]),
        typed("interrupt_ranks", actor="a", ranks=[0, None]),
        typed("cast_result", ref=1, actor="a", groups=[["1\n", "", [0, "1"]]], missing=[]),
        typed("event", seq=1, kind="exploded", job="j", actor="a", ranks="0", count=1),
        typed("event", seq=1, kind="breakpoint", job="j", actor="a", ranks=[0], count=1),
        typed("events", rows=[[1, "breakpoint", "j", "a", "0", 1], [2, "nap", "j", "a", "0", 1]]),
        typed("sessions", rows=[["j", "a", 0, {}, "h", 1, "f", "f.py", 1, "asleep", ""]]),
    ],
)
def test_a_wrong_type_nested_inside_a_payload_is_refused_and_counted(frames):
    codec = wire.Codec(KEY)
    with pytest.raises(wire.Dropped, match="wrong field type"):
        codec.decode(frames())
    assert codec.refused == {"wrong field type": 1}


@pytest.mark.timeout(10)
def test_the_words_that_travel_arrive_as_their_enums_and_print_as_their_text():
    [event] = wire.Codec(KEY).decode(
        typed("event", seq=1, kind="post-mortem", job="j", actor="a", ranks="0", count=1)()
    )
    assert event.kind is wire.EventKind.POST_MORTEM and f"{event.kind}" == str(event.kind) == "post-mortem"
    row = wire.SessionRow("j", "a", 0, {}, "h", 1, "f", "f.py", 1, wire.RankState.QUIT, "")
    [listed] = wire.Codec(KEY).decode(wire.Codec(KEY).encode(wire.SessionList(rows=[row])))
    assert listed.rows[0].state is wire.RankState.QUIT


@pytest.mark.timeout(10)
def test_a_replayed_message_is_refused():
    sender, receiver = wire.Codec(KEY), wire.Codec(KEY)
    frames = sender.encode(wire.Heartbeat())
    receiver.decode(frames)
    with pytest.raises(wire.Dropped, match="replayed"):
        receiver.decode(frames)


@pytest.mark.timeout(10)
def test_long_output_is_clipped_with_a_note():
    text = wire.clip("x" * (wire.MAX_OUTPUT + 10))
    assert text.startswith("x" * wire.MAX_OUTPUT) and "10 more characters not shown" in text


LATER = f"""
import time

def pytest_collection_finish(session):
    real = time.time
    time.time = lambda: real() + {2 * wire.MAX_AGE}
"""
"""A pytest plugin: the clock jumps past the codec's age limit between collection and the run."""


@pytest.mark.timeout(60)
def test_these_tests_pass_when_they_run_long_after_they_were_collected(tmp_path):
    (tmp_path / "later.py").write_text(LATER)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "later",
            "-p",
            "no:cacheprovider",
            __file__,
            "-k",
            "not long_after",
        ],
        env=dict(os.environ, PYTHONPATH=path),
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 0, done.stdout[-3000:]
