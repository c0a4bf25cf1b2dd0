"""Reading running ranks without stopping them: an expression evaluated in a frame of a rank's
own thread (`peek`), and the locals of that frame (`stacks --locals`).

The frame is read while its thread runs: in a C call that released the GIL (a collective, a
sleep, a socket read) the thread stays where it is, and its frames are as they are. Nothing of
the rank changes: the expression is compiled as an expression only, and runs in a copy of the
frame's names, so even `(x := 1)` binds nothing in the rank; no trace function is set.

An expression cannot be stopped from outside, so each request is evaluated on a short-lived
thread of the rank process's own, and the link's thread goes on beating and serving meanwhile. At the
time limit the link answers for the ranks not done ("still evaluating"); the thread runs on
until the expression returns, and its late answer is dropped. An expression that calls code
waiting for a lock the rank's thread holds waits as long as the rank holds it: its thread,
not the link, is what blocks.
"""

from __future__ import annotations

import reprlib
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from monarch_pdb import wire
from monarch_pdb.rank.rank_threads import Running
from monarch_pdb.rank.sources import program_code, source_file
from monarch_pdb.rank.thread_stacks import awaited_frames, program_frames, waits_in_await
from monarch_pdb.ranks import RankSet

STILL_EVALUATING = "*** still evaluating after {limit:g} s (the rank runs on; the answer is dropped when it comes)"
LOCAL_WIDTH = 80
"""Characters of one local's value shown by `stacks --locals`."""
LOCALS_SHOWN = 40
"""Locals of one frame shown by `stacks --locals`, in name order."""
LOCALS_LIMIT = 1.0
"""Seconds the locals of a `stacks --locals` may take to read (their `repr`s run the program's
code); past it, the stacks go without them."""

SHORT = reprlib.Repr()
SHORT.maxstring = SHORT.maxother = LOCAL_WIDTH
SHORT.maxlist = SHORT.maxtuple = SHORT.maxdict = SHORT.maxset = 6


def rank_frames(running: Running) -> list:
    """The frames of a rank's own code, innermost first: a paused rank's from where its pdb
    stands (in post-mortem, the frame that raised), those of the coroutines it awaits while
    it waits in an `await`, else its thread's."""
    if running.frame is not None:
        return program_frames(running.frame)
    if waits_in_await(running.coroutine):
        return list(awaited_frames(running.coroutine))[::-1]
    return program_frames(sys._current_frames().get(running.thread))


def choose_frame(frames: list, function: str = "", up: int = 0, paused: bool = False) -> Any:
    """The frame `peek` reads: the innermost of the program's own code (as `stacks` names a
    rank's place; for a `paused` rank, the innermost, where its pdb stands), or of `function`,
    then `up` frames further out; else the one line that says why there is none."""
    if up < 0:
        return f"*** --up {up}: a number of frames, not below 0"
    if not frames:
        return "*** the rank's thread runs no Python code"
    if function:
        at = next((i for i, f in enumerate(frames) if f.f_code.co_name == function), None)
        if at is None:
            return f"*** no frame of {function} on the rank's stack"
    else:
        at = 0 if paused else next((i for i, f in enumerate(frames) if program_code(source_file(f))), 0)
    if at + up >= len(frames):
        above = len(frames) - 1 - at
        return f"*** --up {up}: only {above} frame{'s' if above != 1 else ''} above {frames[at].f_code.co_name}"
    return frames[at + up]


def namespace(frame) -> dict:
    """A copy of the names a frame sees, its locals over its globals: an expression can read
    them all (comprehensions too) and bind none in the rank."""
    return {**frame.f_globals, **frame.f_locals}


def evaluate(expression: str, frame) -> str:
    """What pdb's `p` prints for `expression` in `frame`: its repr, or the exception it raised."""
    try:
        code = compile(expression, "<peek>", "eval")
        return repr(eval(code, namespace(frame)))
    except BaseException as exc:  # noqa: B902 - as pdb does, whatever the expression raised is its answer
        return f"*** {type(exc).__name__}: {exc}"


def peek(running: Running, expression: str, function: str, up: int) -> str:
    frame = choose_frame(rank_frames(running), function, up, running.frame is not None)
    return frame if isinstance(frame, str) else evaluate(expression, frame)


def collectives() -> str:
    """What `collectives` reads in a rank (`process_groups.snapshot`), or the error it raised,
    as an expression's is told."""
    from monarch_pdb.rank import process_groups

    try:
        return process_groups.snapshot()
    except BaseException as exc:  # noqa: B902 - as an expression's, whatever it raised is its answer
        return f"*** {type(exc).__name__}: {exc}"


def short(value: Any) -> str:
    """A value on one short line."""
    try:
        text = SHORT.repr(value)
    except BaseException as exc:  # noqa: B902 - a repr that fails says so, and the others are shown
        text = f"<repr failed: {type(exc).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= LOCAL_WIDTH else text[: LOCAL_WIDTH - 3] + "..."


def shown_locals(frame) -> dict[str, str]:
    """The locals of `frame`, each on one short line: not modules, functions or classes, which
    a module's frame holds by the hundred and which say nothing of where the rank is."""
    if isinstance(frame, str):
        return {}
    named = sorted(
        (name, value)
        for name, value in frame.f_locals.items()
        if not name.startswith("__") and not isinstance(value, (types.ModuleType, types.FunctionType, type))
    )
    return {name: short(value) for name, value in named[:LOCALS_SHOWN]}


def with_locals(
    groups: list[wire.StackGroup], answers: dict[int, dict[str, str]], late: list[int], limit: float
) -> list[wire.StackGroup]:
    """Each group with its ranks' locals, identical values folded; a frame without any says so."""
    for group in groups:
        values: dict[tuple[str, str], list[int]] = {}
        for rank in group.ranks:
            if rank in answers and not answers[rank]:
                values.setdefault(("(locals)", "none"), []).append(rank)
            elif rank in answers:
                for name, value in answers[rank].items():
                    values.setdefault((name, value), []).append(rank)
            elif rank in late:
                values.setdefault(("(locals)", f"still being read after {limit:g} s"), []).append(rank)
        group.locals = [wire.LocalValue(name, value, ranks) for (name, value), ranks in values.items()]
    return groups


def grouped(answers: dict[int, str], late: list[int], limit: float) -> list[wire.CastGroup]:
    """Answers as a cast's groups, ranks still evaluating among them."""
    by_output: dict[str, list[int]] = {}
    for rank, text in answers.items():
        by_output.setdefault(text + "\n", []).append(rank)
    for rank in late:
        by_output.setdefault(STILL_EVALUATING.format(limit=limit) + "\n", []).append(rank)
    return [wire.CastGroup(output, "", RankSet.of(ranks)) for output, ranks in by_output.items()]


Report = Callable[[dict[int, Any], list[int]], wire.Message]
"""The answer to a request, from what its ranks answered and the ranks that did not in time."""


@dataclass(eq=False)
class Evaluation:
    """One request evaluated on a thread of its own, and what its ranks answered so far."""

    ranks: list[int]
    deadline: float
    report: Report
    answers: dict[int, Any] = field(default_factory=dict)
    finished: bool = False


class Evaluations:
    """The requests this process evaluates, each on a short-lived thread, answered by the
    link's thread when done or at its deadline (the rank process keeps one).

    Locking: `_lock` guards `_open` and each evaluation's `answers` and `finished`; the work of
    a rank runs with it released."""

    def __init__(self, wake: Callable[[], None]) -> None:
        """`wake` tells the link's thread that an answer is ready."""
        self._wake = wake
        self._lock = threading.Lock()
        self._open: list[Evaluation] = []

    def start(self, work: list[tuple[int, Callable[[], Any]]], limit: float, report: Report, now: float) -> None:
        """Run each rank's work in turn on a new thread; `report` makes the answer."""
        evaluation = Evaluation([rank for rank, _ in work], now + limit, report)
        with self._lock:
            self._open.append(evaluation)
        threading.Thread(target=self._run, args=(evaluation, work), name="monarch-pdb-peek", daemon=True).start()

    def _run(self, evaluation: Evaluation, work: list[tuple[int, Callable[[], Any]]]) -> None:
        for rank, job in work:
            answer = job()
            with self._lock:
                if evaluation not in self._open:
                    return  # answered at its deadline: this late answer goes nowhere
                evaluation.answers[rank] = answer
        with self._lock:
            evaluation.finished = True
        self._wake()

    def delay(self, now: float) -> float | None:
        """How soon an answer is due, or None."""
        with self._lock:
            if not self._open:
                return None
            return 0.0 if any(e.finished for e in self._open) else max(0.0, min(e.deadline for e in self._open) - now)

    def tick(self, now: float) -> list[wire.Message]:
        """The answers due: of requests done, and of those past their deadline with the ranks
        still evaluating named."""
        with self._lock:
            due = [e for e in self._open if e.finished or now >= e.deadline]
            self._open = [e for e in self._open if e not in due]
            taken = [(e, dict(e.answers)) for e in due]
        return [e.report(answers, [r for r in e.ranks if r not in answers]) for e, answers in taken]
