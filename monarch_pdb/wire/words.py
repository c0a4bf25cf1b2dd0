"""The words that travel: states, event kinds, endings, roles. Each is an enum here, and its
own text on the wire, in JSON and in print; a word no enum knows is refused."""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A word that travels: on the wire, in JSON and in print it is its own text."""

    def __str__(self) -> str:
        return str.__str__(self)


class Role(Word):
    """Who a peer of a broker is: what it says in its hello, or, for the parent, how the broker
    knows it."""

    RANK = "rank"
    """A process that runs ranks: this package's side in it (`monarch_pdb.rank`)."""
    SHELL = "shell"
    """A shell, an editor or a coding agent's server (its hello's `client` says which)."""
    BROKER = "broker"
    """A broker below this one (`--upstream`): it speaks for every rank below it."""
    PARENT = "parent"
    """The broker above, as this broker's registry knows it: it holds sessions and sends lines
    as a shell does, for the shells connected up there. It never says hello: a broker welcomes
    only the other roles."""


class Client(Word):
    """Which kind of client a shell-role peer is: its hello's `client`, and who `list` says is
    attached to a session."""

    SHELL = "shell"
    EDITOR = "editor"
    """An editor's Debug Adapter Protocol server (`monarch-pdb dap`)."""
    AGENT = "agent"
    """A coding agent's Model Context Protocol server (`monarch-pdb mcp`)."""


class Threads(Word):
    """Whose stacks a stack request wants: the thread running each rank, or every thread."""

    MAIN = "main"
    ALL = "all"


class Reading(Word):
    """What a `Peek` reads in each rank."""

    EXPRESSION = "expression"
    """Its expression's value, as pdb's `p` prints it."""
    COLLECTIVES = "collectives"
    """The rank's torch.distributed process groups and where its main thread stands, as JSON
    (`monarch_pdb.rank.process_groups`); the expression is left empty."""


class Stop(Word):
    """Why a session waits for input."""

    BREAKPOINT = "breakpoint"
    POST_MORTEM = "post-mortem"
    INTERRUPTED = "interrupted"


class RankState(Word):
    """Where a rank stands in `list --all`: stopped (why, as `Stop` says), or not."""

    BREAKPOINT = "breakpoint"
    POST_MORTEM = "post-mortem"
    INTERRUPTED = "interrupted"
    RUNNING = "running"
    QUIT = "quit"
    """Runs, its last call having ended by quitting the debugger."""
    LOST = "lost"
    """Its process or its connection is gone."""
    FINISHED = "finished"
    """Its process said goodbye."""


class EventKind(Word):
    BREAKPOINT = "breakpoint"
    POST_MORTEM = "post-mortem"
    INTERRUPTED = "interrupted"
    ENDED = "ended"
    LOST = "lost"
    RELEASED = "released"
    """Free again: the shell that held it went away."""
    TAKEN = "taken"
    """Another shell took it over (attach --force)."""
    TWICE = "twice"
    """A second process runs the rank: `detail` names both."""
    BROKER_LOST = "broker-lost"
    """A broker below went away with its ranks: `where` is its host, `count` how many ranks."""
    BROKER_JOINED = "broker-joined"
    """A broker below joined (again): `where` is its host."""
    BROKER_SILENT = "broker-silent"
    """A broker below does not answer, its connection standing: its ranks are unreachable
    until it does; `where` is its host, `count` how many ranks."""
    BROKER_BACK = "broker-back"
    """A broker below that did not answer answers again: its ranks are as they were."""
    STALLED = "stalled"
    """Running ranks whose stacks have not changed for `stall_after` seconds, told once: `where`
    is their place, `detail` how long and where the actor's other ranks are."""
    RESUMED = "resumed"
    """Released by the top-level continue: it runs until a stop that is news, or its end.
    Shells say nothing of it; an editor shows its threads running (see also `Resumed`)."""


class Ending(Word):
    """How a session ended, when one word says it; an exception says "raised KeyError"."""

    RETURNED = "returned"
    """Its endpoint call returned, or its program stopped tracing."""
    QUIT = "quit"
    CONTINUED = "continued"
    """Continued with no breakpoint left: no longer traced."""
    LOST = "lost"
    TAKEN = "taken"
    """(To the shell that held it.) Another shell took it over."""
    UNKNOWN = "unknown"
    """(To a shell.) The broker does not know the session: it restarted."""
    RECONNECTED = "reconnected"
    """Its process said hello again on a new connection before the old one was lost."""
    FINISHED = "finished"
    """(A cast's outcome.) Its endpoint returned."""


class Query(Word):
    """What an `Inspect` asks of a paused session's frames."""

    STACK = "stack"
    """Its frames, innermost first: `name` the function, `file` and `line` where it stands,
    `handle` the frame's index (only the program's own frames, without the library's and
    installed packages', when `mine`)."""
    SCOPES = "scopes"
    """A frame's Locals and Globals, each with a `handle` to ask for its variables."""
    VARIABLES = "variables"
    """The children of a `handle`: `count` of them from `start` (0: all)."""
    EVALUATE = "evaluate"
    """An expression's value in a frame, with a handle when it has children."""
    BREAKPOINTS = "breakpoints"
    """Make `spots` the editor's breakpoints in the file `expression`: an item for each, its
    `value` empty when set, else why not."""
    EXCEPTION = "exception"
    """What a post-mortem stop caught: `name` its type, `value` its message, `type` the
    traceback as Python prints it."""
    SET = "set"
    """Give the child `name` of `handle` (as `VARIABLES` names it) the value of `expression`,
    evaluated in that scope's frame (else the current one); the child as it is now."""
    SOURCE = "source"
    """The text of the file `expression` (a frame's `file`, as `STACK` names it) as the rank
    knows it, in `value`: for code with no file on the editor's disk (a cell, generated code,
    a script shipped by value, a file only the rank's host has)."""
