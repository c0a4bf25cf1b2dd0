"""Where `breakpoint()` and uncaught exceptions of a process reach the debugger.

`install` takes this process's hooks, and reaches into the runtimes that start worker
processes of their own and take the hooks there: a Ray worker (whose task errors Ray catches
and hands to its debugger's post-mortem) and real Monarch (whose proc bootstrap sets its own
`breakpoint()` hook, so every proc mesh spawned after `install` runs `install` first, and
each message a Monarch actor handles becomes one endpoint call with its own session). Each
engine call also says which thread runs the rank's code (see monarch_pdb.rank.rank_threads).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from monarch_pdb import settings
from monarch_pdb.rank import identity, main_thread_signal
from monarch_pdb.rank.breakpoint_hook import (
    INSTALLED,
    pm,
    post_mortem,
    set_trace,
    set_trace_async,
    stop_signalled,
    this_rank_process,
)
from monarch_pdb.rank.endpoint_call import end_call, endpoint_call, stop_after_raise, wants_post_mortem
from monarch_pdb.rank.file_loads import OneImport, spec_behind
from monarch_pdb.rank.identity import CallContext, current_call
from monarch_pdb.rank.rank_process import RankProcess


def _take_pdb(hook: Callable[..., None]) -> None:
    """`breakpoint()`, `pdb.set_trace()`, `await pdb.set_trace_async()`, `pdb.post_mortem()` and
    `pdb.pm()` reach the broker: a rank has no terminal of its own for stock pdb to read from.
    pdb itself is not loaded for this: a program that never imports it gets its entry points
    taken when it does."""
    sys.breakpointhook = hook
    if "pdb" in sys.modules:
        _take_set_trace(hook, sys.modules["pdb"])
    else:
        _WhenPdbLoads.then = functools.partial(_take_set_trace, hook)
        if _WhenPdbLoads not in sys.meta_path:
            sys.meta_path.insert(0, _WhenPdbLoads)


def _take_set_trace(hook: Callable[..., None], pdb: Any) -> None:
    pdb.set_trace, pdb.post_mortem, pdb.pm = hook, post_mortem, pm
    if hasattr(pdb, "set_trace_async"):
        pdb.set_trace_async = set_trace_async


class _WhenPdbLoads:
    """A `sys.meta_path` finder there until pdb is first imported: its loader runs pdb, then
    `then`, and the finder leaves."""

    then: Callable[[types.ModuleType], None] = staticmethod(lambda pdb: None)

    @classmethod
    def find_spec(cls, name: str, path, target=None):
        if name != "pdb":
            return None
        sys.meta_path.remove(cls)
        spec = spec_behind(cls, name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenTakeSetTrace(spec.loader, cls.then)
        return spec


class _ThenTakeSetTrace(OneImport):
    """pdb's own loader, then `then` on the module it ran."""

    def __init__(self, loader, then: Callable[[types.ModuleType], None]) -> None:
        super().__init__(loader)
        self._then = then

    def exec_module(self, module: types.ModuleType) -> None:
        self.own_loader_back(module)
        self._loader.exec_module(module)
        self._then(module)


def install(*, announce: bool = True) -> None:
    """Route `breakpoint()` and `pdb.set_trace()` to the broker, and uncaught exceptions to
    post-mortem as MONARCH_PDB_POST_MORTEM says; also in every Ray worker and Monarch proc that
    allows it.

    The process is known to the broker from now on, running or not, so `list --all`, `stacks`
    and `interrupt` reach it. It is a rank of its own (see `set_identity`) unless `announce` is
    False: a mesh runtime then names the ranks it runs as their endpoint calls start."""
    _take_pdb(set_trace)
    rank_process = this_rank_process()
    main_thread_signal.arm(stop_signalled)
    if announce:
        rank_process.presence.host_self()
    if not getattr(sys.excepthook, INSTALLED, False):
        sys.excepthook = _post_mortem_first(sys.excepthook, lambda args: args[1])
    if not getattr(threading.excepthook, INSTALLED, False):
        threading.excepthook = _post_mortem_first(threading.excepthook, lambda args: args[0].exc_value)
    if "ray" in sys.modules:
        _reach_into("ray", "post-mortem of Ray tasks stops in Ray's own debugger", _take_ray_post_mortem)
        _reach_into(
            "ray", "stacks and interrupt of an async actor reach its event loop, not its methods", _take_ray_calls
        )
    if "monarch._src.actor.host_mesh" in sys.modules:
        _reach_into(
            "torchmonarch", "breakpoints of Monarch's procs stay with Monarch's debugger", _bootstrap_monarch_procs
        )
    if identity.in_monarch_proc():
        _reach_into(
            "torchmonarch",
            "a breakpoint here opens no session per message, and stacks and interrupt "
            "reach Monarch's main thread, not its actors'",
            _take_monarch_calls,
        )


def _reach_into(package: str, otherwise: str, take: Callable[[], None]) -> None:
    """Take one engine's hook, which replaces private functions of the release it was written
    for (ray 2.60, torchmonarch 0.7); with another release whose insides differ, say what does
    not work in one line and let the program run."""
    try:
        take()
    except (ImportError, AttributeError) as error:
        from importlib.metadata import PackageNotFoundError, version

        try:
            release = version(package)
        except PackageNotFoundError:
            release = "unknown"
        print(f"monarch-pdb: cannot hook into {package} {release} ({error}): {otherwise}", file=sys.stderr)


def stopped_in_this_process() -> bool:
    """Whether a breakpoint of this process has opened a session."""
    rank_process = RankProcess.existing()
    return rank_process is not None and rank_process.stopped.is_set()


def post_mortem_if_wanted(exc: BaseException | None) -> None:
    if exc is not None and wants_post_mortem(exc, stopped_in_this_process()):
        from monarch_pdb.rank import debugger

        debugger.post_mortem(exc)


def _post_mortem_first(previous: Callable[..., Any], exception_of: Callable[[tuple], BaseException | None]):
    """An exception hook that stops in post-mortem when wanted, then reports as `previous` did."""

    def hook(*args: Any) -> None:
        post_mortem_if_wanted(exception_of(args))
        previous(*args)

    setattr(hook, INSTALLED, True)
    return hook


def _in_ray_worker() -> bool:
    import ray

    return ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE


def _take_ray_post_mortem() -> None:
    """In a Ray worker, Ray calls `ray.util.pdb._post_mortem()` (its module `ray.util.rpdb`)
    inside its handler of a failed task when RAY_DEBUG_POST_MORTEM is 1; with post-mortem
    `always`, that call comes here. Only in workers: a driver's environment passes to the
    workers it starts, and one without this hook would stop in Ray's own debugger instead."""
    if not _in_ray_worker() or settings.load().post_mortem != "always":
        return
    from ray.util import rpdb

    os.environ["RAY_DEBUG_POST_MORTEM"] = "1"
    rpdb._post_mortem = lambda: post_mortem_if_wanted(sys.exc_info()[1])


def _take_ray_calls() -> None:
    """In a Ray worker, every task and actor method runs as a call of the rank's code, on the
    thread (or in the asyncio task, for an async actor) that Ray runs it in. Ray asks its
    function manager once per function for what to run, and keeps the answer."""
    if not _in_ray_worker():
        return
    from ray._private.function_manager import FunctionActorManager

    get_execution_info = FunctionActorManager.get_execution_info
    if getattr(get_execution_info, INSTALLED, False):
        return

    @functools.wraps(get_execution_info)
    def execution_info(self, *args: Any, **kwargs: Any) -> Any:
        info = get_execution_info(self, *args, **kwargs)
        return info._replace(function=_ray_call(info.function))

    setattr(execution_info, INSTALLED, True)
    FunctionActorManager.get_execution_info = execution_info


def _ray_call(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, run as a call of the rank (it keeps the attributes Ray reads, like the
    method of an actor's executor); the coroutine of an async method runs as one instead."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        with this_rank_process().threads.call(identity.current()):
            result = function(*args, **kwargs)
        return _awaited_as_call(result) if inspect.iscoroutine(result) else result

    return call


async def _awaited_as_call(coroutine: Any) -> Any:
    with this_rank_process().threads.call(identity.current(), coroutine):
        return await coroutine


def _bootstrap_monarch_procs() -> None:
    """Make HostMesh.spawn_procs run `install` in each new proc before the program's own
    bootstrap, and give the procs this process's job name."""
    from monarch._src.actor.host_mesh import HostMesh

    spawn = HostMesh.spawn_procs
    if getattr(spawn, INSTALLED, False):
        return
    job, script = identity.job_name(), _main_script_source()

    @functools.wraps(spawn)
    def spawn_procs(self, per_host=None, bootstrap=None, *args: Any, **kwargs: Any):
        first = _install_then_async if inspect.iscoroutinefunction(bootstrap) else _install_then
        return spawn(self, per_host, functools.partial(first, job, script, bootstrap), *args, **kwargs)

    setattr(spawn_procs, INSTALLED, True)
    HostMesh.spawn_procs = spawn_procs


def _main_script_source() -> str:
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    try:
        with open(path or "", encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _install_then(job: str, script: str, bootstrap: Callable[[], Any] | None) -> Any:
    """In a new proc: our hooks, the client's job name, and the main script's source for pdb's
    `l` and `ll` (the proc's host may not have the file)."""
    os.environ.setdefault("MONARCH_PDB_JOB", job)
    identity.renamed()
    if script:
        from monarch_pdb.rank.sources import SHIPPED_CODE

        linecache.cache[SHIPPED_CODE] = (len(script), None, script.splitlines(True), SHIPPED_CODE)
    install()
    return bootstrap() if bootstrap is not None else None


async def _install_then_async(job: str, script: str, bootstrap: Callable[[], Any]) -> None:
    _install_then(job, script, None)
    await bootstrap()


def _take_monarch_calls() -> None:
    """In a Monarch proc, each message an actor handles is an endpoint call of its rank, on the
    actor's thread; Monarch's own end of that message (returned, or raised and reported) ends
    the call's session, after post-mortem when the policy wants it, as the embedded mesh does."""
    from monarch._src.actor.actor_mesh import _Actor

    _take_pdb(_set_trace_in_monarch_call)
    exit_debugger, post_mortem_debug = _Actor._maybe_exit_debugger, _Actor._post_mortem_debug
    handle, handle_sync = _Actor.handle, _Actor.handle_sync
    if getattr(exit_debugger, INSTALLED, False):
        return

    async def handle_as_call(self, ctx: Any, *args: Any, **kwargs: Any) -> None:
        with _monarch_endpoint_call(self, ctx):
            await handle(self, ctx, *args, **kwargs)

    def handle_sync_as_call(self, ctx: Any, *args: Any, **kwargs: Any) -> None:
        with _monarch_endpoint_call(self, ctx):
            handle_sync(self, ctx, *args, **kwargs)

    def maybe_exit_debugger(self, *args: Any, **kwargs: Any) -> None:
        exit_debugger(self, *args, **kwargs)
        _end_monarch_call(None)

    def post_mortem_then_report(self, exc_tb: Any) -> None:
        post_mortem_debug(self, exc_tb)
        exc = sys.exc_info()[1]
        if exc is not None:
            stop_after_raise(_monarch_call(), exc)
            _end_monarch_call(exc)

    setattr(maybe_exit_debugger, INSTALLED, True)
    _Actor._maybe_exit_debugger = maybe_exit_debugger
    _Actor._post_mortem_debug = post_mortem_then_report
    _Actor.handle, _Actor.handle_sync = handle_as_call, handle_sync_as_call


def _monarch_endpoint_call(actor: Any, ctx: Any) -> contextlib.AbstractContextManager:
    """The endpoint call of the message `ctx` carries to one of the program's actors, named as
    Monarch names it; the message that constructs the actor, and those of Monarch's own
    actors, are none."""
    if actor.instance is None or getattr(type(actor.instance), "_is_system_actor", False):
        return contextlib.nullcontext()
    found = identity.monarch_detected(ctx)
    return endpoint_call(found.actor, found.rank, found.coords)


def _monarch_call() -> CallContext:
    """The call of the message being handled, begun now if this is its first stop."""
    call = current_call.get()
    if call is None:
        found = identity.from_monarch()
        assert found is not None
        call = CallContext(actor=found.actor, rank=found.rank, coords=found.coords)
        current_call.set(call)
    return call


def _end_monarch_call(exc: BaseException | None) -> None:
    call = current_call.get()
    if call is not None:
        end_call(call, exc)
        current_call.set(None)


def _set_trace_in_monarch_call(*, header: str | None = None, commands: list[str] | None = None) -> None:
    from monarch_pdb.rank import debugger

    _monarch_call()
    debugger.set_trace(sys._getframe(1), header=header, commands=commands)


def join() -> dict[str, object]:
    """What `monarch-pdb join` runs in a process it loads us into (on its main thread, between
    two bytecodes): `install`, as if the program had called it now; says who the process is
    and whether it had installed us before, so joining twice changes nothing."""
    before = bool(getattr(sys.excepthook, INSTALLED, False))
    install()
    me = identity.current()
    return {"actor": me.actor, "rank": me.rank, "before": before}
