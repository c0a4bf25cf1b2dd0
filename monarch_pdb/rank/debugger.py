"""pdb, with its stdin and stdout carried by the rank process to the broker.

Everything pdb writes is buffered; when pdb asks for a line, the buffer, the prompt and where
the session stands travel as one message, and one message brings the line back. Output written
while a command runs (a `!` statement that prints, say) follows after a short idle time.
"""

from __future__ import annotations

import bdb
import functools
import os
import pdb
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import IO, cast

from monarch_pdb import wire
from monarch_pdb.rank import collectives
from monarch_pdb.rank.identity import CallContext, Identity, current, current_call
from monarch_pdb.rank.inspection import EditorBreakpoints, Inspector
from monarch_pdb.rank.rank_process import OUTPUT_IDLE, Line, RankProcess
from monarch_pdb.rank.sources import PACKAGE_DIR, package_code, source_file

PDB_TAKES_EXCEPTIONS = sys.version_info >= (3, 13)
"""pdb's interaction takes an exception, and its chain, rather than a traceback from 3.13 on."""
PDB_SETS_ONLY_TRACED_EXCEPTION = sys.version_info[:2] == (3, 12)
"""pdb 3.12 has `$_exception`, but sets it only where tracing stops at an exception."""
PDB_COLOURS = sys.version_info[:2] == (3, 14)
"""pdb colours the source it lists and its stop lines from 3.14 on (`Pdb.colorize`); on 3.15 a
listing of code with no file (a notebook cell) came out with its newlines written as `^J`, so
colours stay off there until that is understood."""

_loose = threading.local()
"""The calling thread's `session` opened outside any endpoint call: it ends when tracing
stops (the endpoint call's session is the call's, see CallContext)."""


class SessionIO:
    """pdb's stdin and stdout for one session."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, ask: Callable[[tuple[str, str]], str]) -> None:
        self._ask = ask
        self._lock = threading.Lock()
        self._chunks: list[str] = []
        self._last_write = 0.0
        self._last_chunk = ""
        self._told = False
        self.on_output: Callable[[], None] = lambda: None
        """Called when text is written and the rank process has not been told since it last found none."""

    def write(self, text: str) -> int:
        """Take text, as a text file does: anything else is the writer's error, raised in the
        writer's thread, not the link's when it sends the output."""
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            self._chunks.append(text)
            self._last_chunk = text
            self._last_write = time.monotonic()
            tell, self._told = not self._told, True
        if tell:
            self.on_output()
        return len(text)

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def readline(self) -> str:
        """pdb wants a line: hand over what it printed, and the prompt, to get one."""
        return self._ask(self._take_with_prompt())

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError("a monarch-pdb session has no file descriptor")

    def take_idle(self, now: float) -> tuple[str, bool]:
        """The whole lines written before the last OUTPUT_IDLE seconds, and whether output is
        still held: written too recently, or an unfinished line, which may be pdb's prompt and
        then goes with the prompt. Once nothing is held, the next write tells the rank process again."""
        with self._lock:
            if not self._chunks or now - self._last_write < OUTPUT_IDLE:
                self._told = bool(self._chunks)
                return "", self._told
            text = self._take()
            cut = text.rfind("\n") + 1
            if cut < len(text):
                self._chunks.append(text[cut:])
                self._last_chunk = text[cut:]
                self._told = True
            return text[:cut], self._told

    def take_all(self) -> str:
        with self._lock:
            return self._take()

    def _take_with_prompt(self) -> tuple[str, str]:
        """Everything written so far, split from the prompt pdb wrote last."""
        with self._lock:
            prompt = self._last_chunk if self._chunks and not self._last_chunk.endswith("\n") else ""
            text = self._take()
        return text[: len(text) - len(prompt)], prompt

    def _take(self) -> str:
        """Empty the buffer; the next write tells the rank process again."""
        text = "".join(self._chunks)
        self._chunks.clear()
        self._last_chunk = ""
        self._told = False
        return text


def describe(exc: BaseException) -> str:
    """`Type: message`, as a traceback ends, and as it falls back when the exception's own
    `__str__` raises."""
    try:
        text = str(exc)
    except Exception:
        text = "<exception str() failed>"
    return f"{type(exc).__name__}: {text}"


def traceback_of(raised: BaseException | TracebackType) -> TracebackType | None:
    return raised.__traceback__ if isinstance(raised, BaseException) else raised


def program_traceback(tb):
    """`tb` without its leading frames of this package (an endpoint's scope, the mesh runtime
    that called it), so `bt` in post-mortem shows the program only; all of it when nothing
    else is left."""
    start = tb
    while start is not None and start.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR):
        start = start.tb_next
    return start or tb


def describe_function(frame) -> str:
    """`module.function`, naming a script by its file rather than `__main__`; a program with
    no file (a notebook cell, `python -`) stays `__main__`, or is named by its notebook."""
    module = frame.f_globals.get("__name__") or ""
    if module in ("__main__", "__mp_main__") or not module:
        path = source_file(frame)
        if path.startswith("<"):
            path = os.environ.get("JPY_SESSION_NAME") or "__main__"
        module = os.path.splitext(os.path.basename(path))[0]
    return f"{module}.{frame.f_code.co_name}"


class ConfinedPdb(pdb.Pdb):
    """Stock pdb, minus the commands that would leave the session: a console on the rank's own
    terminal, and restarting a program the debugger did not start (pdb.Restart)."""

    def __init__(self, stdin: IO[str], stdout: IO[str]) -> None:
        super().__init__(stdin=stdin, stdout=stdout, nosigint=True)
        self._post_mortem_of: BaseException | TracebackType | None = None

    def post_mortem(self, raised: BaseException | TracebackType) -> None:
        """pdb's post-mortem of `raised`, an exception or a traceback on its own: the exception
        itself where pdb takes one (3.13+), so `exceptions` walks its chain; `$_exception` is it
        from 3.12 on."""
        self._post_mortem_of = raised
        try:
            self.interaction(None, raised if PDB_TAKES_EXCEPTIONS else traceback_of(raised))  # type: ignore[arg-type]
        finally:
            self._post_mortem_of = None

    def raised(self) -> TracebackType | None:
        """The whole traceback a post-mortem stop shows (`bt` leaves out its leading frames of
        this package and of the mesh runtime); None at any other stop."""
        return None if self._post_mortem_of is None else traceback_of(self._post_mortem_of)

    def line_shown(self) -> int:
        """The line of pdb's current frame, as its `-> ` shows it: in post-mortem, the line the
        frame raised at, though a frame that caught the exception runs on past it."""
        return (self.stack[self.curindex][1] or 0) if self.stack else 0

    def setup(self, f, tb):
        """pdb's, with a post-mortem traceback (every one of a chain) shown from the program's
        first frame."""
        stop = super().setup(f, program_traceback(tb) if f is None else tb)
        if PDB_SETS_ONLY_TRACED_EXCEPTION and isinstance(self._post_mortem_of, BaseException):
            self.set_convenience_variable(self.curframe, "_exception", self._post_mortem_of)
        return stop

    def get_stack(self, f, t) -> tuple[list, int]:
        """pdb's stack, without this package's frames between the program's (the wrapper of
        an engine's call)."""
        stack, index = super().get_stack(f, t)
        kept = [n for n, (frame, _) in enumerate(stack) if n == index or not package_code(frame.f_code.co_filename)]
        return [stack[n] for n in kept], kept.index(index) if stack else index

    def format_stack_entry(self, frame_lineno: tuple, lprefix: str = ": ") -> str:
        """pdb's line for a frame (`bt`, `where`, `up`, each stop), naming a script's code
        shipped under another name by the script's file."""
        entry = super().format_stack_entry(frame_lineno, lprefix)
        frame = frame_lineno[0]
        shipped = self.canonic(frame.f_code.co_filename)
        path = source_file(frame)
        return path + entry[len(shipped) :] if path != frame.f_code.co_filename and entry.startswith(shipped) else entry

    def completions(self, line: str, begidx: int, endidx: int) -> list[str]:
        """What Tab at pdb's prompt offers for `line[begidx:endidx]`: the completer that
        `cmd.Cmd.complete` picks (pdb's `completenames` for the first word, else the command's
        `complete_*` or `completedefault`), given the shell's line where `complete` reads this
        process's readline. A completer that raises offers nothing, as under readline."""
        text = line[begidx:endidx]
        stripped = len(line) - len(line.lstrip())
        line, begidx, endidx = line.lstrip(), begidx - stripped, endidx - stripped
        if begidx > 0:
            command = self.parseline(line)[0]
            complete = getattr(self, f"complete_{command}", self.completedefault) if command else self.completedefault
        else:
            complete = self.completenames
        try:
            return [match for match in complete(text, line, begidx, endidx) if isinstance(match, str)]
        except Exception:
            return []

    def do_interact(self, arg: str) -> None:
        """interact: not in monarch-pdb, whose rank has no terminal to open a console on."""
        self.error("interact is not supported by monarch-pdb; use '!' statements, p or pp instead")

    def do_run(self, arg: str) -> None:
        """run: not in monarch-pdb, which cannot start a rank's program again."""
        self.error("run is not supported by monarch-pdb: a rank cannot restart its program; use c or q instead")

    def do_restart(self, arg: str) -> None:
        """restart: not in monarch-pdb, which cannot start a rank's program again."""
        self.error("restart is not supported by monarch-pdb: a rank cannot restart its program; use c or q instead")

    def _create_recursive_debugger(self) -> ConfinedPdb:
        """The debugger of pdb's `debug` command (a hook from Python 3.14 on), confined too:
        stock pdb's is a plain Pdb. It colours as this one does (the lines it reads set this
        one's colours, `ThreadSession.ask`)."""
        nested = ConfinedPdb(self.stdin, self.stdout)
        if PDB_COLOURS:
            nested.colorize = self.colorize  # type: ignore[attr-defined]
        return nested

    if sys.version_info < (3, 14):

        def do_debug(self, arg: str) -> None:
            # pdb's debug before 3.14, which has no hook for the recursive debugger it makes.
            sys.settrace(None)
            nested = self._create_recursive_debugger()
            nested.prompt = f"({self.prompt.strip()}) "
            self.message("ENTERING RECURSIVE DEBUGGER")
            assert self.curframe is not None
            try:
                sys.call_tracing(nested.run, (arg, self.curframe.f_globals, self.curframe_locals))
            except Exception:
                self._error_exc()  # type: ignore[attr-defined]
            self.message("LEAVING RECURSIVE DEBUGGER")
            sys.settrace(self.trace_dispatch)
            self.lastcmd = nested.lastcmd

        do_debug.__doc__ = pdb.Pdb.do_debug.__doc__

    def _prompt_for_confirmation(self, prompt: str, default: str) -> str:
        """pdb's question (where pdb 3.14 asks each of its own), asked through the session:
        pdb asks with input(), which reads the rank's own stdin."""
        self.stdout.write(prompt)
        reply = self.stdin.readline()
        return reply.strip().lower() if reply else default

    def do_clear(self, arg: str) -> None:
        # pdb's clear, whose question before clearing every breakpoint is asked through the
        # session: before 3.14 pdb asks it with input().
        if arg:
            super().do_clear(arg)
            return
        if self._prompt_for_confirmation("Clear all breaks? ", default="no") in ("y", "yes"):
            deleted = [bp for bp in bdb.Breakpoint.bpbynumber if bp]
            self.clear_all_breaks()
            for bp in deleted:
                self.message(f"Deleted {bp}")

    do_clear.__doc__ = pdb.Pdb.do_clear.__doc__
    do_cl = do_clear


class RemotePdb(ConfinedPdb):
    """The session's own debugger: continuing or quitting it outside an endpoint call ends the
    session."""

    def __init__(self, session: ThreadSession) -> None:
        io = cast(IO[str], session.io)
        super().__init__(io, io)
        self.session = session
        self._displaced: pdb.Pdb | None = None

    def set_trace(self, frame=None, **kwargs) -> None:
        """pdb's set_trace; from Python 3.14 on, pdb records the debugger that set it last
        (`pdb.set_trace()` then reuses it, and `python -m pdb -p` refuses to attach beside it):
        remember what this one displaced, for `leave_pdb`."""
        last = getattr(pdb.Pdb, "_last_pdb_instance", None)
        if last is not self:
            self._displaced = last
        super().set_trace(frame, **kwargs)

    def leave_pdb(self) -> None:
        """The session is over: if pdb still records this debugger as its last, it records
        what this one displaced again, unless that is a session's debugger that ended too."""
        if getattr(pdb.Pdb, "_last_pdb_instance", None) is self:
            displaced = self._displaced
            ended = isinstance(displaced, RemotePdb) and displaced.session.ended
            pdb.Pdb._last_pdb_instance = None if ended else displaced  # type: ignore[attr-defined]
        self._displaced = None

    def _prompt_for_confirmation(self, prompt: str, default: str) -> str:
        """The question's answer; the shell's top-level `continue`, sent instead of one, takes
        the default and goes on as the continue it is."""
        reply = super()._prompt_for_confirmation(prompt, default)
        if not self.session.released:
            return reply
        self.cmdqueue.append("continue")
        return default

    def interaction(self, *args, **kwargs) -> None:
        """pdb's prompt until a line lets the thread run on: every prompt of one stop says why
        it stopped (post-mortem, interrupted), however many lines it answers first."""
        try:
            super().interaction(*args, **kwargs)
        finally:
            self.session.resumed()

    def setup(self, f, tb):
        """pdb's, at each stop: counted, so that an editor's handles of the last stop are
        forgotten, and those of a stop that a line did not end are kept."""
        self.session.stops += 1
        return super().setup(f, tb)

    def break_here(self, frame) -> bool:
        """pdb's, without the breakpoints of an editor that is gone (one that set them and
        disconnected while the rank ran)."""
        self.session.breakpoints.drop_gone(self, self.session.rank_process.gone_editors)
        return super().break_here(frame)

    def user_line(self, frame) -> None:
        """pdb's stop at a line, but for the editor's log points, which print and go on."""
        if not self.session.breakpoints.logged(self, frame):
            super().user_line(frame)

    def set_continue(self) -> None:
        super().set_continue()
        if not self.breaks and self.session.call is None:
            self.session.end(wire.Ending.CONTINUED)

    def set_quit(self) -> None:
        super().set_quit()
        if self.session.call is None:
            self.session.end(wire.Ending.QUIT)


@dataclass
class ThreadSession:
    """One paused thread's conversation with the broker, from first stop to end."""

    rank_process: RankProcess
    identity: Identity
    call: CallContext | None
    named: bool = False
    """Whether `identity` names this session for sure: an endpoint call's, or the rank an
    interrupt stops as; any other is renamed when the process's name is taken (rank_process.py)."""
    sid: int = 0
    cmd: int = 0
    reason: wire.Stop = wire.Stop.BREAKPOINT
    exc: str = ""
    ended: bool = False
    released: bool = False
    """Whether the last line came with the shell's top-level continue (`Line.release`)."""
    stops: int = 0
    """How many times pdb stopped (`RemotePdb.setup`)."""

    def __post_init__(self) -> None:
        self.io = SessionIO(self.ask)
        self.sid, self.inbox, self.identity = self.rank_process.open_session(
            self.io, self.identity, self.named or self.call is not None
        )
        self.io.on_output = functools.partial(self.rank_process.printing, self.sid)
        self.debugger = RemotePdb(self)
        self.breakpoints = EditorBreakpoints(lambda owner, text: self.rank_process.log(owner, self.identity, text))
        self.exception: BaseException | None = None
        """What a post-mortem stop caught, while it waits."""
        self.inspector = Inspector(self)

    def ask(self, printed: tuple[str, str]) -> str:
        """Send what pdb printed and where it stands; wait for the line that answers it."""
        output, prompt = printed
        if self.inspector.stop != self.stops:
            self.inspector = Inspector(self)
        frame = self.debugger.curframe
        ident = self.identity
        self.rank_process.wait_for_input(
            wire.Prompt(
                sid=self.sid,
                cmd=self.cmd,
                job=ident.job,
                actor=ident.actor,
                rank=ident.rank,
                coords=ident.coords,
                host=ident.hostname,
                pid=ident.pid,
                function=describe_function(frame) if frame else "",
                filename=source_file(frame) if frame else "",
                lineno=self.debugger.line_shown() if frame else 0,
                output=self.rank_process.clip(output),
                prompt=prompt,
                reason=self.reason,
                exc=self.exc,
                instance=ident.instance,
            ),
            frame,
            self.debugger.raised(),
        )
        line = self.inbox.get()
        while not isinstance(line, Line):
            self.rank_process.link.post(self.answer(line))
            line = self.inbox.get()
        self.cmd, self.released = line.cmd, line.release
        self.breakpoints.drop_gone(self.debugger, self.rank_process.gone_editors)
        if PDB_COLOURS:
            self.debugger.colorize = line.colour  # type: ignore[attr-defined]
        if line.release:
            self.debugger.clear_all_breaks()
            self.breakpoints.restore(self.debugger)
        return line.text + "\n"

    def resumed(self) -> None:
        """The thread runs on from where it stopped: whatever stops it next is a breakpoint (or
        a step), not the exception or the interrupt that stopped it here."""
        self.reason, self.exc, self.exception = wire.Stop.BREAKPOINT, "", None

    def answer(self, question: wire.Inspect | wire.Complete) -> wire.Inspection | wire.Completions:
        """An editor's question, or a shell's Tab, answered between two lines: the session stays
        where it is."""
        if isinstance(question, wire.Inspect):
            return self.inspector.answer(question)
        matches = self.debugger.completions(question.line, question.begidx, question.endidx)
        return wire.Completions(ref=question.ref, matches=matches)

    def end(self, reason: str) -> None:
        """Close the session: forget interactive breakpoints and tell the broker."""
        if self.ended:
            return
        self.ended = True
        self.debugger.clear_all_breaks()
        self.debugger.leave_pdb()
        output = self.io.take_all()
        self.rank_process.close_session(
            self.sid, wire.Ended(sid=self.sid, cmd=self.cmd, output=self.rank_process.clip(output), reason=reason)
        )
        if getattr(_loose, "session", None) is self:
            del _loose.session


def session_for_this_thread(rank_process: RankProcess, identity: Identity | None = None) -> ThreadSession:
    """The session of the running endpoint call, or of this thread outside any call (named
    `identity` when given, else as `current` finds it); a thread's session of another rank process
    (its process's, before a fork) is not this rank process's."""
    call = current_call.get()
    existing = call.session if call is not None else getattr(_loose, "session", None)
    if existing is not None and not existing.ended and (call is not None or existing.rank_process is rank_process):
        return existing
    collectives.raise_timeouts()
    named = identity is not None and call is None
    session = ThreadSession(
        rank_process=rank_process,
        identity=identity if named and identity is not None else current(),
        call=call,
        named=named,
    )
    if call is not None:
        call.session = session
    else:
        _loose.session = session
    return session


def _who() -> str:
    ident = current()
    return f"{ident.actor} rank {ident.rank}"


def this_rank_process() -> RankProcess:
    """This process's RankProcess, started on first use: an interrupt, or an editor's breakpoint,
    stops one of its threads in a session opened here (`interrupt`, `break_at`)."""
    return RankProcess.get(interrupt, break_at)


def _stopping(rank_process: RankProcess | None, header: str | None, commands: list[str] | None) -> ThreadSession | None:
    """The session about to stop this thread, through this process's rank process unless another is
    given, with pdb's `header` written and its `commands` queued; None if no broker came."""
    rank_process = rank_process or this_rank_process()
    if not rank_process.wait_ready(_who()):
        return None
    session = session_for_this_thread(rank_process)
    if header:
        session.io.write(header + "\n")
    if commands:
        session.debugger.rcLines.extend(commands)
    return session


def set_trace(
    frame, header: str | None = None, rank_process: RankProcess | None = None, commands: list[str] | None = None
) -> None:
    """Stop `frame` at its next line in a broker session (the target of breakpoint())."""
    session = _stopping(rank_process, header, commands)
    if session is not None:
        session.debugger.set_trace(frame)


async def set_trace_async(frame, header: str | None = None, commands: list[str] | None = None) -> None:
    """Stop the coroutine of `frame` in a broker session whose prompt also runs `await`
    statements in it, as Python 3.14's `await pdb.set_trace_async()` does."""
    session = _stopping(None, header, commands)
    if session is not None:
        await session.debugger.set_trace_async(frame)  # type: ignore[attr-defined]


def post_mortem(raised: BaseException | TracebackType) -> None:
    """Stop at the innermost frame of `raised` (an exception, or a traceback whose exception is
    not known) until the user lets it go on; pdb's own error for an exception that has none."""
    exc = raised if isinstance(raised, BaseException) else None
    if traceback_of(raised) is None:
        raise ValueError("A valid traceback must be passed if no exception is being handled")
    rank_process = this_rank_process()
    if not rank_process.wait_ready(_who()):
        return
    session = session_for_this_thread(rank_process)
    session.reason, session.exception = wire.Stop.POST_MORTEM, exc
    session.exc = describe(exc) if exc is not None else "a traceback, its exception not given"
    debugger = session.debugger
    # A breakpoint left set kept pdb tracing this thread, and the reset below clears where
    # it stops: traced, it would stop at once inside bdb's own code (3.11, 3.12).
    sys.settrace(None)
    debugger.reset()
    try:
        debugger.post_mortem(raised)
    except bdb.BdbQuit:
        pass
    finally:
        debugger.set_continue()


def interrupt(frame, identity: Identity) -> None:
    """Stop this thread at `frame`, where a signal found it, at once: inside the call it was
    blocked in rather than at its next line, which may never come. Afterwards `n`, `s` and
    breakpoints work as after breakpoint()."""
    rank_process = this_rank_process()
    session = session_for_this_thread(rank_process, identity)
    session.reason = wire.Stop.INTERRUPTED
    _stop_at(session.debugger, frame)


def break_at(frame) -> None:
    """Stop this thread at `frame`, before the line it is about to run, in a session opened as
    breakpoint()'s is: where an editor's breakpoint in a running rank found it."""
    session = _stopping(None, None, None)
    if session is not None:
        _stop_at(session.debugger, frame)


def _stop_at(debugger: RemotePdb, frame) -> None:
    """pdb's prompt at `frame` now, not at a next line; afterwards `n`, `s` and breakpoints
    work as after breakpoint()."""
    debugger.reset()
    caller = frame
    while caller is not None:
        caller.f_trace = debugger.trace_dispatch
        debugger.botframe = caller
        caller = caller.f_back
    debugger.interaction(frame, None)
    if debugger.stoplineno != -1 or debugger.breaks:
        sys.settrace(debugger.trace_dispatch)
