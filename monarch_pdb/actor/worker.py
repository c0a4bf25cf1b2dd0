"""One rank of a proc mesh, forked by its program's fork server (`forkserver`).

Workers started by an actor of another worker are set up exactly like top-level ones, so
breakpoints work in nested meshes too.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import inspect
import io
import os
import pickle
import queue
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import monarch_pdb
from monarch_pdb.actor import main_module, transport
from monarch_pdb.actor.context import running_at
from monarch_pdb.actor.errors import RankError, type_name
from monarch_pdb.actor.messages import Boot, Call, Reply, Request, Spawn, StopWorker
from monarch_pdb.actor.point import Point

_PR_SET_PDEATHSIG = 1
# Frames of these files lead every traceback of a call; the user's code starts after them.
_MACHINERY = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.dirname(asyncio.__file__) + os.sep,
    runpy.__file__,
    "<frozen runpy>",
)


@dataclass
class _Hosted:
    """An actor this worker constructed, under the name it was spawned as."""

    name: str
    instance: Any


def main(fd: int, parent_pid: int) -> None:
    """Serve the program on the connection `fd` until it says stop or is gone."""
    die_with_parent(parent_pid)
    conn = transport.adopt(fd)
    try:
        boot: Boot = transport.receive(conn)
    except EOFError:
        return
    sys.path[:] = boot.sys_path
    sys.argv[:] = boot.argv
    _line_buffer_output()
    monarch_pdb.install(announce=False)
    inbox: queue.SimpleQueue[Request] = queue.SimpleQueue()
    threading.Thread(target=_read, args=(conn, inbox), name="monarch_pdb.actor inbox", daemon=True).start()
    try:
        transport.send(conn, _answer(boot.call_id, boot.point, functools.partial(main_module.load, boot.main)))
        _serve(conn, inbox, boot.point)
    except OSError:
        return  # the parent is gone; _read ends the process


def die_with_parent(parent_pid: int) -> None:
    """Be killed with the parent even when it is SIGKILLed and cannot tell us to stop."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent_pid:
        os._exit(0)  # the parent died before the signal was armed


def _line_buffer_output() -> None:
    """Each line a rank prints reaches the shared output at once and in one write, so lines
    of ranks printing together never interleave mid-line (unbuffered streams write a print's
    text and its newline separately)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True, write_through=False)


def _read(conn: Connection, inbox: queue.SimpleQueue) -> None:
    """Queue requests for the main thread, and end the process the moment the parent is gone,
    even while the main thread is busy in an endpoint or paused in the debugger."""
    try:
        while True:
            inbox.put(transport.receive(conn))
    except (EOFError, OSError):
        os._exit(0)


def _serve(conn: Connection, inbox: queue.SimpleQueue, point: Point) -> None:
    """Run requests one at a time, in order, in the main thread."""
    actors: dict[int, _Hosted] = {}
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    while not isinstance(request := inbox.get(), StopWorker):
        if isinstance(request, Spawn):
            work = functools.partial(_construct, request, actors, point)
        else:
            work = functools.partial(_invoke, request, actors, point, loop)
        transport.send(conn, _answer(request.call_id, point, work))


def _construct(request: Spawn, actors: dict[int, _Hosted], point: Point) -> None:
    cls, args, kwargs = pickle.loads(request.payload)
    with _endpoint_scope(request.name, point):
        actors[request.actor_id] = _Hosted(request.name, cls(*args, **kwargs))


def _invoke(request: Call, actors: dict[int, _Hosted], point: Point, loop: asyncio.AbstractEventLoop) -> Any:
    actor = actors[request.actor_id]
    args, kwargs = pickle.loads(request.payload)
    method = getattr(actor.instance, request.endpoint)
    if inspect.iscoroutinefunction(method):
        return loop.run_until_complete(_awaited(method(*args, **kwargs), actor.name, point))
    with _endpoint_scope(actor.name, point):
        return method(*args, **kwargs)


async def _awaited(coroutine: Coroutine[Any, Any, Any], name: str, point: Point) -> Any:
    """Enter the scope inside the task that runs the user's coroutine, where the debugger looks."""
    with _endpoint_scope(name, point):
        return await coroutine


@contextmanager
def _endpoint_scope(name: str, point: Point) -> Iterator[None]:
    with monarch_pdb.endpoint_call(actor=name, rank=point.rank, coords=point.coords), running_at(point):
        yield


def _answer(call_id: int, point: Point, work: Callable[[], Any]) -> Reply:
    """Run work; reply with its value, or with the exception it raised as this rank's error."""
    try:
        return Reply(call_id, transport.dumps(work(), "the return value"))
    except Exception as exc:
        return Reply(call_id, _pickled_or_empty(exc), _rank_error(point, exc))


def _rank_error(point: Point, exc: Exception) -> RankError:
    """The error with a traceback that starts at the user's code, not at this runtime's."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_MACHINERY):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return RankError(point.rank, point.coords, type_name(exc), str(exc), text)


def _pickled_or_empty(exc: Exception) -> bytes:
    try:
        return transport.dumps(exc, "the exception")
    except Exception:
        return b""
