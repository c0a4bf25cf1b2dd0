"""The keyboard and the screen of the interactive shell: GNU readline's state, lines printed
above its prompt while it waits for a key, Ctrl-Z and Ctrl-C at the prompt, the two prompts'
histories, and lines typed before a prompt could read them. It knows nothing of commands: the
shell tells it what to print and what to do at the prompt.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import select
import shutil
import signal
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import TextIO

from cmd2 import rl_utils
from cmd2.rl_utils import (
    RlType,
    readline,
    rl_force_redisplay,
    rl_get_display_prompt,
    rl_get_point,
    rl_set_prompt,
    rl_type,
)
from cmd2.terminal_utils import async_alert_str

from monarch_pdb.client.connection import readable

EOF = "eof"
"""What cmd2 hands over for Ctrl-D at either prompt."""
PDB_HISTORY_SUFFIX = ".pdb"
PDB_HISTORY_LENGTH = 1000
RL_STATE_CALLBACK, RL_STATE_ENDED, RL_STATE_ACTING = 0x0080000, 0x2000000 | 0x8000000, 0x0000020 | 0x0004000 | 0x1000000
"""GNU readline's state bits (readline.h): a line begun through the callback interface, as
CPython's input() begins one; that line accepted or ended; a key being acted on (dispatching,
completing) or the screen being drawn."""
ALERT_SIGNAL = signal.SIGUSR1
"""How the connection's thread asks the shell's own to print lines above the prompt: readline's
wait for a key ends on a signal, and its handler runs on readline's thread, between two keys.
A Ctrl-C that readline has not acted on is pressed home with it too. The calls it interrupts
are restarted (SA_RESTART), but for select(), which never is, and which is readline's wait for
a key: else a write of readline's to a terminal that reads slowly fails with EINTR, the C
library drops what it held, and a key typed as a line comes shows nowhere."""
RETRY_ALERT_AFTER = 0.05
"""Seconds until the shell's thread is signalled again, while lines wait at a free prompt or a
Ctrl-C waits for its handler: a signal that lands while readline acts on a key, or just before
it waits, is handled only once Python runs again on its thread."""


@dataclass
class PdbHistory:
    """The lines typed at the pdb prompt, kept apart from the commands (whose history cmd2
    keeps) and saved beside them. readline holds one history at a time; `swap` trades them."""

    path: str
    lines: list[str]
    in_readline: bool = False

    @classmethod
    def load(cls, commands_file: str) -> PdbHistory:
        path = commands_file + PDB_HISTORY_SUFFIX if commands_file else ""
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, ValueError):
            lines = []
        return cls(path, lines[-PDB_HISTORY_LENGTH:])

    def swap(self) -> None:
        held = readline_history()
        readline.clear_history()
        for line in self.lines:
            readline.add_history(line)
        self.lines, self.in_readline = held, not self.in_readline

    def save(self) -> None:
        if not self.path:
            return
        lines = readline_history() if self.in_readline else self.lines
        try:
            with open(self.path, "w", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in lines[-PDB_HISTORY_LENGTH:] if "\n" not in line)
        except OSError:
            pass


def readline_history() -> list[str]:
    return [readline.get_history_item(i) for i in range(1, readline.get_current_history_length() + 1)]


def readline_state() -> int:
    return ctypes.c_ulong.in_dll(rl_utils.readline_lib, "rl_readline_state").value


def hung_up(fd: int) -> bool:
    """Whether the terminal on `fd` has gone (its window closed), rather than sent Ctrl-D."""
    poller = select.poll()
    poller.register(fd, 0)
    return any(events & select.POLLHUP for _, events in poller.poll(0))


def typed_lines(text: str) -> list[str]:
    """The lines of what the terminal handed over: Enter ends one as CR, or as NL where the
    terminal turns one into the other (CR NL, a pasted Windows line, ends one line)."""
    return re.split(r"\r\n|\r|\n", text.removesuffix("\n").removesuffix("\r"))


@dataclass
class TypedAhead:
    """Lines typed at the terminal while the shell waits for a broker: they run once it answers,
    but a line of `leave_on` and Ctrl-D leave at once."""

    leave_on: frozenset[str]
    """The lines that leave (the shell's quit and its aliases)."""
    lines: list[str] = field(default_factory=list)
    partial: bytes = b""
    leaving: str | None = None
    """The line that leaves, as typed, or EOF for Ctrl-D."""

    def take(self, chunk: bytes) -> bool:
        """What the terminal gave (b"": end of input); False once it says to leave."""
        if not chunk:
            self.leaving = EOF
            return False
        *done, self.partial = (self.partial + chunk).split(b"\n")
        for line in (raw.decode(errors="replace") for raw in done):
            if line.strip() in self.leave_on:
                self.leaving = line
                return False
            if line.strip():
                self.lines.append(line)
        return True


class Terminal:
    """The shell's terminal. Lines come from the connection's thread (`alert`) and go above the
    prompt on the shell's thread; so does the news that the shell must act on at the prompt
    (`act_at_prompt`), whose printing `settle` returns."""

    def __init__(
        self,
        stdin: TextIO,
        stdout: TextIO,
        write: Callable[[str], None],
        lock: threading.RLock,
        wake: Callable[[], None],
        settle: Callable[[], str],
        prompt: Callable[[], str | None],
        other_delims: str,
        history_file: str,
    ) -> None:
        self.stdin, self.stdout = stdin, stdout
        self.write = write
        self.lock = lock
        """cmd2's terminal lock: held while a command runs, free while the prompt waits."""
        self.wake = wake
        """Makes the shell's thread, busy or between lines, look at what waits."""
        self.settle = settle
        self.new_prompt = prompt
        """The prompt to draw instead of the one on screen, if the shell's changed."""
        self.keyboard = stdin.isatty()
        self.readline = rl_type == RlType.GNU and self.keyboard
        self.alerts_above_prompt = self.readline and stdout.isatty()
        """Whether lines that come at the prompt can go above it; else they follow the next command."""
        self.interactive = False
        """Whether a person reads lines at the prompt (the shell's loop began), not a script."""
        self.alerts: list[str] = []
        self.alerts_lock = threading.Lock()
        self.alerts_retry: threading.Timer | None = None
        self.signals_heard = -1
        """The pipe Python writes the number of each signal it catches to (set_wakeup_fd)."""
        self.interrupt_lock = threading.RLock()
        self.interrupt_taken = threading.Event()
        """Clear from a Ctrl-C heard on `signals_heard` until it is taken."""
        self.at_prompt = False
        """`read_line` waits for a line."""
        self.interrupt_owed = False
        """A Ctrl-C came at the prompt; the alert signal's handler raises its KeyboardInterrupt."""
        self.interrupting = False
        """The KeyboardInterrupt of a Ctrl-C at the prompt is on its way to `read_line`: no more
        signals meanwhile."""
        self.news = False
        """The shell must act at the prompt (`settle`) before the lines that wait are shown."""
        self.typed_ahead: list[str] = []
        """Lines typed before the prompt could read them (while waiting for a broker, or while an
        attached rank runs), read in turn as if typed at it."""
        self.pdb_history = PdbHistory.load(history_file)
        atexit.register(self.pdb_history.save)
        self.other_delims = other_delims
        """readline's word delimiters of the other prompt."""

    def start(self) -> None:
        """The shell's loop begins. A paste arrives as one line, each of its lines then run in
        turn, so none is taken for keys typed while a rank runs (CPython turns readline's
        bracketed paste off)."""
        if self.readline:
            readline.parse_and_bind("set enable-bracketed-paste on")
            signal.signal(signal.SIGTSTP, self.suspend)
            signal.signal(ALERT_SIGNAL, self.signalled)
            signal.siginterrupt(ALERT_SIGNAL, False)
            self.watch_interrupts()
        self.interactive = True

    def size(self) -> os.terminal_size:
        """The size of the terminal the results go to; without one, what COLUMNS and LINES
        say, else 80 by 24."""
        try:
            return os.get_terminal_size(self.stdout.fileno())
        except (OSError, ValueError):
            return shutil.get_terminal_size()

    def switch_prompts(self) -> None:
        """Between our prompt and pdb's: each recalls its own lines and completes its own words."""
        if not self.readline:
            return
        self.pdb_history.swap()
        held = readline.get_completer_delims()
        readline.set_completer_delims(self.other_delims)
        self.other_delims = held

    # --- lines above the prompt ----------------------------------------------------------

    def alert(self, lines: list[str]) -> None:
        """Runs on the connection's thread. At a prompt the lines go above it at once, printed
        by the shell's thread; while a command runs (cmd2's terminal lock is held) they wait
        for the command's end. (cmd2's async_alert prints from this thread, which can meet
        readline as it accepts a line and draw a prompt that is not there.)"""
        if not self.interactive:
            return
        with self.alerts_lock:
            self.alerts += lines
        if self.alerts_above_prompt and self.lock.acquire(blocking=False):
            self.lock.release()
            ident = threading.main_thread().ident
            assert ident is not None
            if not self.interrupting:  # else the next try: see `signalled`
                signal.pthread_kill(ident, ALERT_SIGNAL)
            with self.alerts_lock:
                if self.alerts_retry is None:
                    self.alerts_retry = threading.Timer(RETRY_ALERT_AFTER, self.retry_alerts)
                    self.alerts_retry.daemon = True
                    self.alerts_retry.start()
        else:
            self.wake()

    def act_at_prompt(self) -> None:
        """Runs on the connection's thread: the shell's `settle` is to run on its own thread,
        at the prompt if it waits, else between two lines."""
        self.news = True
        self.alert([])

    def retry_alerts(self) -> None:
        with self.alerts_lock:
            self.alerts_retry = None
        if self.alerts or self.news:
            self.alert([])

    def print_alerts(self) -> None:
        """On the shell's thread (the alert signal's handler): the lines that wait go above the
        prompt while readline waits for a key. Before it has drawn the prompt, and while it acts
        on a key, they wait for the next try; once it has accepted the line, for the command's
        end. The signal waits meanwhile, so that its handler cannot print inside this printing.
        (Not from readline's pre-input hook: readline drops what a hook raises, a Ctrl-C's
        KeyboardInterrupt too.)"""
        if not (self.alerts_above_prompt and (self.alerts or self.news)):
            return
        signal.pthread_sigmask(signal.SIG_BLOCK, {ALERT_SIGNAL})
        try:
            if not self.reading_line():
                self.wake()
            elif not readline_state() & RL_STATE_ACTING:
                shown = rl_get_display_prompt()
                text = self.take_news() + self.take_alerts()
                new_prompt = self.new_prompt()
                if new_prompt is not None:
                    rl_set_prompt(new_prompt)
                if text:
                    self.write(
                        async_alert_str(
                            terminal_columns=self.size().columns,
                            prompt=shown,
                            line=readline.get_line_buffer(),
                            cursor_offset=rl_get_point(),
                            alert_msg=text.rstrip("\n") + "\n",
                        )
                    )
                elif new_prompt is not None:
                    self.write("\r\x1b[K")  # readline redraws from the line's start, not after the old prompt
                else:
                    return  # news settled that printed nothing: the screen is as it was
                rl_force_redisplay()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {ALERT_SIGNAL})

    def take_news(self) -> str:
        """On the shell's thread: act on the news, if it came, and give back what that printed."""
        if not self.news:
            return ""
        self.news = False
        return self.settle()

    def take_alerts(self) -> str:
        with self.alerts_lock:
            lines, self.alerts = self.alerts, []
        return "\n".join(lines)

    def show_alerts(self) -> None:
        """On the shell's thread, between two lines: what arrived while a command ran."""
        text = self.take_alerts()
        if text:
            self.write(text + "\n")

    # --- keys ------------------------------------------------------------------------------

    def watch_interrupts(self) -> None:
        """Ctrl-C at a prompt drops the line at once, however busy readline is. A SIGINT that
        lands while readline acts on a key is only noted by Python: readline goes on to wait for
        the next key, and the KeyboardInterrupt would come once the line is accepted, which
        would then run as nothing at all. So a thread reads of each SIGINT on Python's signal
        pipe and sends the alert signal, which ends readline's wait, until `read_line` (or a
        command) has the interrupt."""
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        self.signals_heard = read_end
        self.interrupt_taken.set()
        handler = signal.getsignal(signal.SIGINT)

        def on_sigint(signum: int, frame: FrameType | None) -> None:
            if not self.at_prompt:
                self.take_interrupt()
                if callable(handler):
                    handler(signum, frame)
            elif not self.interrupting:
                self.interrupt_owed = True
                signal.pthread_kill(threading.get_ident(), ALERT_SIGNAL)

        signal.signal(signal.SIGINT, on_sigint)
        threading.Thread(target=self.chase_interrupts, name="ctrl-c", daemon=True).start()

    def chase_interrupts(self) -> None:
        """On a thread of its own: signal the shell's thread after each SIGINT until it is taken
        (what was drained from the pipe before was taken already)."""
        ident = threading.main_thread().ident
        assert ident is not None
        while True:
            readable([self.signals_heard], None)
            with self.interrupt_lock:
                if signal.SIGINT not in self.heard_signals():
                    continue
                self.interrupt_taken.clear()
            while not self.interrupt_taken.wait(RETRY_ALERT_AFTER):
                if not self.interrupting:
                    signal.pthread_kill(ident, ALERT_SIGNAL)

    def take_interrupt(self) -> None:
        """On the shell's thread, once a command or `read_line` has the KeyboardInterrupt, or
        the line was accepted first: those Python caught before now need no more signals."""
        self.interrupt_owed = self.interrupting = False
        if self.signals_heard < 0:
            return
        with self.interrupt_lock:
            self.heard_signals()
            self.interrupt_taken.set()

    def heard_signals(self) -> set[int]:
        """The signals Python caught since the last look (their numbers, read off its pipe)."""
        heard: set[int] = set()
        try:
            while chunk := os.read(self.signals_heard, 512):
                heard.update(chunk)
        except BlockingIOError:
            pass
        return heard

    def signalled(self, signum: int, frame: FrameType | None) -> None:
        """The alert signal's handler, on the shell's thread: a Ctrl-C at the prompt, else the
        lines that wait. The Ctrl-C's KeyboardInterrupt is raised here, not in SIGINT's own
        handler: Python runs the handlers in the order of their signals' numbers, and one still
        waiting when the exception ends readline's wait would run with it set, and fail. SIGINT's
        handler sends this signal, so that this handler, the last, raises in the same pass."""
        if self.interrupt_owed and not readline_state() & RL_STATE_ACTING:
            self.interrupt_owed, self.interrupting = False, True
            raise KeyboardInterrupt
        self.print_alerts()

    def suspend(self, signum: int, frame: object) -> None:
        """Ctrl-Z: stop, as any program does. At a prompt, the terminal is first set back as it
        was before readline took it (the shell that resumes us does not set it again), and on
        `fg` set for readline again, the prompt and the line being typed drawn anew. (readline's
        own handler is in place only while it acts on a key, not while it waits for one.)"""
        at_prompt = self.reading_line() and not readline_state() & RL_STATE_ACTING
        if at_prompt:
            rl_utils.readline_lib.rl_deprep_terminal()
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        try:
            os.kill(os.getpid(), signal.SIGTSTP)
        finally:
            signal.signal(signal.SIGTSTP, self.suspend)
        if at_prompt:
            rl_utils.readline_lib.rl_prep_terminal(1)
            self.write("\r\x1b[K")  # where a process group no one can resume was never stopped
            rl_force_redisplay()

    def reading_line(self) -> bool:
        """Whether readline waits for the keys of a line it has begun (its prompt is on screen)."""
        if not self.readline:
            return False
        state = readline_state()
        return bool(state & RL_STATE_CALLBACK) and not state & RL_STATE_ENDED

    def line_begun(self) -> str:
        """What has been typed of the line at the prompt."""
        return readline.get_line_buffer()

    def word_to_complete(self) -> tuple[str, int, int]:
        """For Tab: the line at the prompt, and where the word to complete begins and ends."""
        return readline.get_line_buffer(), readline.get_begidx(), readline.get_endidx()

    def read_line(self, read: Callable[[], str], interrupted: Callable[[], None]) -> str:
        """A line read now by `read` (cmd2's). Ctrl-C at a prompt drops the line being typed
        (`interrupted` is told) and draws a fresh prompt below it, as pdb does. (cmd2 would write
        `^C` over the prompt, readline having gone back to its start, and hand on an empty line,
        which pdb takes for its last command again.) A terminal that closes ends the shell
        as its SIGHUP does, whichever of the two the kernel delivers first: the end of input is
        not Ctrl-D, and there is no terminal left to say goodbye on."""
        while True:
            if self.alerts_above_prompt:
                self.show_alerts()  # what came since the last line, before the prompt is drawn
                if self.news:
                    self.alert([])  # acted on at the prompt, which it may change
            self.at_prompt = True
            try:
                with self.keys_kept_on_interrupt():
                    return read()
            except KeyboardInterrupt:
                if self.readline:
                    termios.tcflush(self.stdin.fileno(), termios.TCIFLUSH)  # the line's keys not read yet
                interrupted()
                with self.lock:
                    self.write("\n")
            except EOFError:
                if self.keyboard and hung_up(self.stdin.fileno()):
                    sys.exit(128 + signal.SIGHUP)
                raise
            finally:
                self.at_prompt = False
                self.take_interrupt()  # one still owed as the line was accepted came too late for it

    @contextlib.contextmanager
    def keys_kept_on_interrupt(self) -> Iterator[None]:
        """While readline reads a line, the terminal keeps the keys not read yet when Ctrl-C is
        pressed (NOFLSH), and `read_line` throws them away once it has the interrupt: else
        readline, told by select() that a key waits, may read after the terminal threw it away
        and wait there for the next key, where no signal ends its wait."""
        if not self.readline:
            yield
            return
        fd = self.stdin.fileno()
        before = termios.tcgetattr(fd)
        kept = list(before)
        kept[3] |= termios.NOFLSH
        termios.tcsetattr(fd, termios.TCSANOW, kept)
        try:
            yield
        finally:
            with contextlib.suppress(termios.error):  # the terminal has gone (its window closed)
                termios.tcsetattr(fd, termios.TCSANOW, before)

    def next_typed(self, prompt: str) -> str:
        """The next line typed ahead, shown after `prompt` as if typed at it."""
        line = self.typed_ahead.pop(0)
        self.write(f"{prompt}{'' if line == EOF else line}\n")
        if self.readline and line.strip() and line != EOF:
            readline.add_history(line)
        return line

    def typed(self, text: str) -> list[str]:
        """The lines of keys typed while no prompt reads them, as the terminal hands them over;
        EOF for Ctrl-D."""
        if text:
            return typed_lines(text)
        if hung_up(self.stdin.fileno()):
            sys.exit(128 + signal.SIGHUP)
        return [EOF]

    def keep_typed_lines(self) -> None:
        """Take the whole lines typed that no one has read yet (the terminal holds them until
        read) into the lines that wait, so that they count as typed before now."""
        if not self.keyboard:
            return
        fd = self.stdin.fileno()
        while readable([fd], 0) and (chunk := os.read(fd, 4096)):
            self.typed_ahead += typed_lines(chunk.decode(errors="replace"))
