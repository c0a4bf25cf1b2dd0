"""The shell's connection to the broker: requests and replies for the shell's thread, events
for whoever listens.

Requests are answered in order, one at a time; replies and the held session's output arrive
on one queue with a pipe beside it, so the shell can wait on the broker and the keyboard at
once. Events are folded (`debugee ranks[0-15] (16) stopped at debugging.py:12`) before delivery.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import queue
import select
import threading
import time
from collections.abc import Callable

from monarch_pdb import discovery, wire
from monarch_pdb.client.follow import Deliver, Follower
from monarch_pdb.link import Link
from monarch_pdb.ranks import format_ranks
from monarch_pdb.settings import Settings

WAIT_BROKER = 60.0
"""Seconds a script (or a notebook's cell) waits for a broker by default, as `wait` waits for ranks."""
EVENT_QUIET = 0.1
REJECTION_CHECK = 0.05
EVENT_FOLD_LIMIT = 1.0
EVENTS_HANDED_WAIT = 0.5
"""Seconds a command waits at most for the link's thread to hand over the events it received."""
ANSWER_GRACE = 5.0
"""Seconds past a request's own time limit for its answer to arrive."""
STALL_CHECK = 0.25
"""How often a wait for an answer looks whether the broker still answers."""
NOT_ANSWERING = "the broker does not answer; waiting for it; Ctrl-C stops waiting"
RESTARTED = "the broker restarted; its ranks join the new one by themselves, as they were"
"""Said once when a new broker welcomes the shell where another did: the ranks paused before
are no news (the new broker hears them again, and announces none of them)."""
GONE_MEANWHILE = (
    "the broker went away and restarted while this ran; run it again once the ranks have joined "
    "the new one (they do by themselves)"
)


def broker_options(parser: argparse.ArgumentParser) -> None:
    """The options of every client of the broker that say which broker: a host and a port
    (the settings, and the connection file, otherwise)."""
    parser.add_argument("--host", help="the broker's host (MONARCH_DEBUG_SERVER_HOST, default localhost)")
    parser.add_argument("--port", type=int, help="the broker's port (MONARCH_DEBUG_SERVER_PORT, default 27000)")


class NoBroker(Exception):
    """No broker answered; the text says where we looked and how to start one."""


class Timeout(Exception):
    pass


class RequestFailed(Exception):
    """A cast or follow the broker refused or did not finish; the text is one line for the user."""


def readable(fds: list[int], timeout: float | None) -> list[int]:
    """Those of `fds` that can be read within `timeout` seconds (None: no limit). Unlike
    select(), this takes any descriptor number: a program with thousands of sockets open has
    descriptors above 1,024."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(None if timeout is None else max(0.0, timeout) * 1000)]


def add_part(whole: wire.Message, part: wire.Message) -> None:
    """A later part of a long answer (rows, groups, a cast's or stacks' answers) added to the
    parts before it: each of its lists extended, and whether more follow."""
    for name, value in vars(part).items():
        if isinstance(value, list):
            getattr(whole, name).extend(value)
    whole.more = part.more  # type: ignore[attr-defined]


def lost_answers(
    started: wire.CastStarted, result: wire.CastResult | wire.StacksResult | wire.PeekResult | None, actor: str
) -> str:
    """What a shell says of a cast whose broker restarted: where the line went and no answer
    came, so the user knows where it may have run."""
    came = (
        set() if result is None else {missed.rank for missed in result.missing}.union(*(g.ranks for g in result.groups))
    )
    lost = [rank for rank in started.ranks if rank not in came]
    where = [f"{actor} ranks[{format_ranks(lost)}] ({len(lost)})"] if lost else []
    where += [f"the ranks its selector picks below, on {', '.join(started.below)}"] if started.below else []
    return (
        f"the broker restarted during the cast; the answers of {' and '.join(where)} were lost "
        "(the line may have run there)"
    )


class BrokerConnection:
    def __init__(
        self,
        settings: Settings,
        on_events: Callable[[list[wire.Event]], None] | None = None,
        client: wire.Client = wire.Client.SHELL,
    ) -> None:
        self.settings = settings
        self.on_events = on_events
        self.on_reply: Callable[[wire.Message], None] | None = None
        """Told of each reply or session message as it arrives, on the link's thread."""
        self.on_restart: Callable[[], None] | None = None
        """Told, on the link's thread, when a new broker welcomes us where another did."""
        self.restarts = 0
        """How many times a new broker took the place of the one we talked to: a request sent
        before one did is answered by a broker that may not know its ranks yet."""
        self._broker_pid = 0
        self._replies: queue.SimpleQueue[wire.Message] = queue.SimpleQueue()
        self._signal_r, self._signal_w = os.pipe()
        os.set_blocking(self._signal_r, False)
        os.set_blocking(self._signal_w, False)
        self._events: list[wire.Event] = []
        self._first_event = self._last_event = 0.0
        self._hand_over = 0
        """Ticks of the link's thread until it hands over every event it holds, without waiting
        for their fold to be due (0: none asked for); see `hand_over_events`."""
        self._handed = threading.Event()
        self.aside: list[wire.Message] = []
        self.changed = threading.Event()
        self.follower = Follower()
        self._refs = itertools.count(1)
        self._started: dict[int, wire.CastStarted | None] = {}
        """The casts `cast` waits for, as the broker said it started them (None until it did;
        written on the link's thread)."""
        self._cut_short: set[int] = set()
        """Those of them a broker that restarted will never answer."""
        self.link = Link(
            settings, wire.Role.SHELL, self, lambda: discovery.locate(settings), events=True, client=client
        )

    @classmethod
    def open(
        cls,
        settings: Settings,
        on_events: Callable[[list[wire.Event]], None] | None = None,
        client: wire.Client = wire.Client.SHELL,
    ) -> BrokerConnection:
        """A connection a broker welcomed within the connect time-out; NoBroker otherwise."""
        conn = cls(settings, on_events, client)
        try:
            conn.wait_for_broker(settings.connect_timeout)
        except BaseException:
            conn.close()
            raise
        return conn

    def wait_for_broker(
        self,
        patience: float | None,
        waiting: Callable[[str], None] | None = None,
        keyboard: int | None = None,
        typed: Callable[[bytes], bool] | None = None,
    ) -> bool:
        """Wait until a broker welcomes us (True). NoBroker at once when the broker refuses us (a
        wrong secret) or another program holds its port, and once `patience` seconds pass (None:
        no limit) with no broker. After the connect time-out, `waiting` is told once where we
        wait. What is typed on `keyboard` (a terminal) meanwhile goes to `typed` as it comes (b""
        at end of input): False, at once, when `typed` says to stop waiting."""
        settings = self.settings
        where = f"{settings.host}:{settings.port}"
        looked = discovery.connection_file(settings)
        start = "Start your program (its first breakpoint starts a broker) or run `monarch-pdb broker`"
        note = f"waiting for a debug broker at {where} (looked for {looked}). {start}."
        give_up = math.inf if patience is None else time.monotonic() + patience
        look = min(time.monotonic() + settings.connect_timeout, give_up)
        told = waiting is None
        while not self.link.ready.is_set():
            if self.link.rejected.is_set():
                raise NoBroker(self.link.rejection)
            now = time.monotonic()
            if now >= look:
                other = discovery.unanswered(settings)
                if other is not None and other.fix:
                    raise NoBroker(f"no debug broker answers at {where} ({other.why}). {other.fix}")
                unwritable = discovery.unwritable(settings)
                if unwritable:
                    raise NoBroker(f"no debug broker answers at {where}, and none can start on this host: {unwritable}")
                if now >= give_up:
                    seen = f"{other.why}; " if other is not None else ""
                    raise NoBroker(
                        f"no debug broker answers at {where} ({seen}looked for {looked}). {start}, then try again."
                    )
                look = min(now + settings.connect_timeout, give_up)
                if not told:
                    assert waiting is not None
                    waiting(note)
                    told = True
            if keyboard is None or typed is None:
                self.link.ready.wait(REJECTION_CHECK)
            elif readable([keyboard], REJECTION_CHECK) and not typed(os.read(keyboard, 4096)):
                return False
        return True

    def close(self) -> None:
        self.link.close()
        for fd in (self._signal_r, self._signal_w):
            try:
                os.close(fd)
            except OSError:
                pass

    @property
    def signal_fd(self) -> int:
        """Readable whenever a reply may be waiting."""
        return self._signal_r

    def wake(self) -> None:
        """Make a wait on `signal_fd` return, so the shell's thread looks at what it holds."""
        try:
            os.write(self._signal_w, b"!")
        except BlockingIOError:
            pass

    def post(self, msg: wire.Message) -> None:
        self.link.post(msg)

    def next_reply(self, timeout: float | None) -> wire.Message | None:
        """The next reply or session message, or None when `timeout` passes first."""
        if self.aside:
            return self.aside.pop(0)
        return self._wait(timeout)

    def _wait(self, timeout: float | None) -> wire.Message | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                os.read(self._signal_r, 65536)
            except BlockingIOError:
                pass
            try:
                return self._replies.get_nowait()
            except queue.Empty:
                pass
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            readable([self._signal_r], left)

    def request(self, msg: wire.Message, *answers: type[wire.Message], timeout: float = 10.0) -> wire.Message:
        """Send a request and return its answer (or an Error)."""
        restarts = self.restarts
        self.post(msg)
        reply = self.collect(lambda m: isinstance(m, (*answers, wire.Error)), timeout)
        if isinstance(reply, wire.Error) and self.restarts != restarts:
            return wire.Error(text=GONE_MEANWHILE)
        while getattr(reply, "more", False):
            part = self.collect(lambda m: type(m) is type(reply), timeout)
            if part is None:
                break
            assert reply is not None
            add_part(reply, part)
        if reply is None or getattr(reply, "more", False):
            raise Timeout(
                GONE_MEANWHILE if self.restarts != restarts else f"the broker did not answer within {timeout:g} s"
            )
        return reply

    def collect(self, wanted: Callable[[wire.Message], bool], timeout: float) -> wire.Message | None:
        """The next message `wanted` accepts; the others wait in `aside` for `next_reply`."""
        for index, msg in enumerate(self.aside):
            if wanted(msg):
                return self.aside.pop(index)
        deadline = time.monotonic() + timeout
        while True:
            got = self._wait(deadline - time.monotonic())
            if got is None or wanted(got):
                return got
            self.aside.append(got)

    def complete(self, session: int, line: str, begidx: int, endidx: int, timeout: float) -> wire.Completions | None:
        """The held session's words for `line[begidx:endidx]` (Tab at its prompt), or None when
        they do not come within `timeout`."""
        ref = next(self._refs)
        self.post(wire.Complete(ref=ref, session=session, line=line, begidx=begidx, endidx=endidx))
        answer = self.collect(lambda m: isinstance(m, wire.Completions) and m.ref == ref, timeout)
        return answer if isinstance(answer, wire.Completions) else None

    def wait_for_rows(self, enough: Callable[[list[wire.SessionRow]], bool], timeout: float) -> list[wire.SessionRow]:
        """List sessions until `enough(rows)`, again after every event; the last rows when
        `timeout` passes first."""
        deadline = time.monotonic() + timeout
        while True:
            self.changed.clear()
            reply = self.request(wire.ListSessions(), wire.SessionList)
            rows = getattr(reply, "rows", [])
            left = deadline - time.monotonic()
            if enough(rows) or left <= 0:
                return rows
            self.changed.wait(left)

    def cast(
        self,
        actor: str,
        selector: str,
        line: str,
        timeout: float,
        job: str = "",
        progress: Callable[[wire.CastProgress], None] | None = None,
        waiting: Callable[[str], None] | None = None,
    ) -> wire.CastResult:
        """Send one pdb command to the selected ranks; return all their answers, every part
        of a large result joined. Raises RequestFailed with the broker's one-line reason.
        `waiting` is told, once, when the broker stops answering meanwhile."""
        ref = self.start_cast(actor, selector, line, timeout, job, progress is not None, awaited=True)
        try:
            return self._parts(ref, wire.CastResult, timeout, "finish the cast", progress, waiting, actor)
        finally:
            self._started.pop(ref, None)
            self._cut_short.discard(ref)

    def start_cast(
        self,
        actor: str,
        selector: str,
        line: str,
        timeout: float,
        job: str = "",
        progress: bool = False,
        awaited: bool = False,
    ) -> int:
        """Send a cast without waiting for it; its answers come as replies with the number
        returned (and, with `progress`, how far it got). `awaited` by `cast`, which hears where
        the broker sent its line, to name the ranks whose answers a broker restart loses."""
        ref = next(self._refs)
        if awaited:
            self._started[ref] = None
        self.post(
            wire.Cast(ref=ref, actor=actor, selector=selector, line=line, timeout=timeout, job=job, progress=progress)
        )
        return ref

    def stacks(
        self,
        actor: str,
        selector: str,
        threads: wire.Threads,
        timeout: float,
        job: str = "",
        with_locals: bool = False,
        native: bool = False,
    ) -> wire.StacksResult:
        """The selected live ranks' stacks (and their locals, their native frames), every part
        of a large result joined. Raises RequestFailed with the broker's one-line reason."""
        ref = next(self._refs)
        self.post(
            wire.Stacks(
                ref=ref,
                actor=actor,
                selector=selector,
                timeout=timeout,
                threads=threads,
                job=job,
                locals=with_locals,
                native=native,
            )
        )
        return self._parts(ref, wire.StacksResult, timeout, "gather the stacks")

    def peek(
        self,
        actor: str,
        selector: str,
        expression: str,
        limit: float,
        function: str = "",
        up: int = 0,
        job: str = "",
        reading: wire.Reading = wire.Reading.EXPRESSION,
    ) -> wire.PeekResult:
        """An expression's value in each selected live rank (or what `reading` names), read
        without stopping it, every part of a large result joined. Raises RequestFailed with the
        broker's one-line reason."""
        ref = next(self._refs)
        self.post(
            wire.Peek(
                ref=ref,
                actor=actor,
                selector=selector,
                expression=expression,
                limit=limit,
                function=function,
                up=up,
                job=job,
                reading=reading,
            )
        )
        return self._parts(ref, wire.PeekResult, limit + wire.PEEK_MARGIN, "finish the peek")

    def _parts(
        self,
        ref: int,
        kind: type[wire.CastResult] | type[wire.StacksResult] | type[wire.PeekResult],
        timeout: float,
        doing: str,
        progress: Callable[[wire.CastProgress], None] | None = None,
        waiting: Callable[[str], None] | None = None,
        actor: str = "",
    ):
        """The answer to request `ref`, its `groups` and `missing` joined over every part (a
        large answer comes in several, the last with `more` false). Its clock stops while the
        broker does not answer, for as long as its time again at most: a broker stopped or
        starved answers when it goes on, with what arrived and who did not answer, and a
        shell that gave up meanwhile would show nothing of it. A cast the broker started and
        then lost to its restart fails at once, naming the ranks whose answers went with it; any
        other request a restart met fails saying so."""
        restarts = self.restarts
        left = patience = timeout + ANSWER_GRACE
        told = False
        result = None
        last = time.monotonic()
        while True:
            answering = self.link.ready.is_set()
            msg = self.collect(
                lambda m: isinstance(m, wire.Error) or getattr(m, "ref", None) == ref,
                max(0.0, min(left, STALL_CHECK)) if answering else STALL_CHECK,
            )
            now = time.monotonic()
            if answering or patience <= 0:
                left -= now - last
            else:
                patience -= now - last
                if waiting is not None and not told:
                    waiting(NOT_ANSWERING)
                    told = True
            last = now
            if msg is None and ref in self._cut_short:
                started = self._started[ref]
                assert started is not None
                raise RequestFailed(lost_answers(started, result, actor))
            restarted = self.restarts != restarts
            if msg is None:
                if left <= 0:
                    raise RequestFailed(GONE_MEANWHILE if restarted else f"the broker did not {doing} in time")
                continue
            if isinstance(msg, wire.Error):
                raise RequestFailed(GONE_MEANWHILE if restarted else msg.text)
            if isinstance(msg, wire.CastProgress) and progress is not None:
                progress(msg)
            elif isinstance(msg, kind):
                if result is None:
                    result = msg
                else:
                    add_part(result, msg)
                if not msg.more:
                    return result

    def follow(self, actor: str, selector: str, job: str, deliver: Deliver) -> wire.Following:
        """Receive the selected ranks' output as they print it, from now on, through `deliver`
        (called on the connection's thread with actor, rank and text)."""
        reply = self.request(wire.Follow(actor=actor, selector=selector, job=job), wire.Following)
        if isinstance(reply, wire.Error):
            raise RequestFailed(reply.text)
        assert isinstance(reply, wire.Following)
        self.follower.start(reply, deliver)
        self.link.follow_output = True
        self.link.post()
        return reply

    def unfollow(self) -> None:
        self.follower.stop()
        self.link.follow_output = False
        self.link.post()

    # --- link.LinkOwner, on the link's thread -----------------------------------------------

    def welcomed(self, broker_pid: int) -> list[wire.Message]:
        """A broker that does not know us: the casts the last one started will never be
        answered (what it had not answered yet, the link sends this one). A new broker where
        another welcomed us is a restart, said once."""
        if self._broker_pid and broker_pid != self._broker_pid:
            self.restarts += 1
            if self.on_restart is not None:
                self.on_restart()
        self._broker_pid = broker_pid
        started = [ref for ref, msg in list(self._started.items()) if msg is not None]
        if started:
            self._cut_short.update(started)
            self.wake()
        return []

    def received(self, msg: wire.Message) -> None:
        if isinstance(msg, wire.OutputLog):
            self.follower.caught_up(msg)
            return
        if isinstance(msg, wire.CastStarted):
            if msg.ref in self._started:
                self._started[msg.ref] = msg
            return
        self._replies.put(msg)
        self.wake()
        if self.on_reply is not None:
            self.on_reply(msg)

    def published(self, msg: wire.Event | wire.Printed | wire.OutputLive) -> None:
        if isinstance(msg, wire.Printed):
            self.follower.printed(msg)
            return
        if isinstance(msg, wire.OutputLive):
            self.follower.live()
            return
        self.changed.set()
        self._last_event = time.monotonic()
        if not self._events:
            self._first_event = self._last_event
        self._events.append(msg)

    def _fold_due(self) -> float:
        """Deliver once events pause for a moment, or a second after the first at the latest."""
        return min(self._last_event + EVENT_QUIET, self._first_event + EVENT_FOLD_LIMIT)

    def hand_over_events(self) -> None:
        """Have every event that reached this connection before now delivered at once, rather
        than when its fold is due: a command typed after them shows them first, not after its
        own answer. The link's thread delivers them on its second tick from now: the pass of its
        loop after the first reads what its event socket holds."""
        if not self.link.ready.is_set() or self.on_events is None:
            return
        self._handed.clear()
        self._hand_over = 2
        self.link.post()
        self._handed.wait(EVENTS_HANDED_WAIT)

    def idle_delay(self) -> float | None:
        if self.follower.has_requests() or self._hand_over:
            return 0.0
        if not self._events:
            return None
        return max(0.0, self._fold_due() - time.monotonic())

    def tick(self, now: float) -> list[wire.Message]:
        due = bool(self._events) and now >= self._fold_due()
        handed = False
        if self._hand_over:
            self._hand_over -= 1
            handed = not self._hand_over
        if due or handed and self._events:
            events, self._events = self._events, []
            if self.on_events is not None:
                self.on_events(events)
        if handed:
            self._handed.set()
        return self.follower.requests()
