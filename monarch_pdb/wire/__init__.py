"""The wire protocol: every message type, and how it is signed, encoded and checked.

Every part speaks it through this package's names (`wire.Cast`, `wire.Codec`); its modules
say who says what:

- `codec`: signing, framing, batching and replay (one `Codec` per thread);
- `schema`: how a message or a record is declared, and checked as it arrives;
- `words`: the enums whose words travel; `records`: a rank (`RankRef`) and the rows, answers
  and stacks more than one conversation carries;
- `handshake`: what every peer says (hello, welcome, heartbeats, goodbye, errors);
- `rank_messages`: a rank process and its broker; `clients`: a shell or an editor and its broker;
  `brokers`: a broker and the broker above it.

Nothing else in the project builds or reads the maps that travel. A message that is too large,
badly signed, replayed, too old (its signed time stamp is off by more than `max_age`),
undecodable, of an unknown type or with a field of the wrong type (anywhere inside it, or a word
no enum knows) is refused with `Dropped`; receivers count it and move on.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False
"""Each module loads when one of its names is first asked for (`__getattr__`): a rank that never
stops declares only what it says to its broker, not the sixty-odd types of shells and brokers."""
if TYPE_CHECKING:
    from monarch_pdb.wire.brokers import (
        BranchEnded,
        BranchLost,
        BranchOutput,
        BranchRanks,
        BranchSession,
        BranchSessions,
        CastDown,
        OutputWanted,
    )
    from monarch_pdb.wire.clients import (
        EVENT_TOPIC,
        OUTPUT_TOPIC,
        PEEK_MARGIN,
        Attach,
        Attached,
        BreakGroup,
        Breakpoints,
        BreakpointsResult,
        Cast,
        CastProgress,
        CastResult,
        CastStarted,
        CatchUp,
        Complete,
        Completions,
        Continue,
        Continued,
        Detach,
        Detached,
        Event,
        EventRow,
        Events,
        Follow,
        FollowedSession,
        Following,
        Inspect,
        Inspection,
        Interrupt,
        Interrupting,
        Item,
        JobList,
        ListAll,
        ListJobs,
        ListSessions,
        LogEntry,
        Missing,
        OutputLive,
        OutputLog,
        OutputSince,
        Peek,
        PeekResult,
        Printed,
        Released,
        Resumed,
        Send,
        SessionEnded,
        SessionGroup,
        SessionGroups,
        SessionList,
        SessionOutput,
        Stacks,
        StacksResult,
        Tick,
    )
    from monarch_pdb.wire.codec import (
        AUTH_FAILED,
        BATCH,
        BATCH_BYTES,
        ITEM_HEADER,
        MAX_AGE,
        MAX_BODY,
        MAX_OUTPUT,
        PROTOCOL,
        REPLAY_MEMORY,
        Codec,
        ReplayGuard,
        clip,
    )
    from monarch_pdb.wire.handshake import (
        DROPPED_AFTER_BEATS,
        LOST_AFTER_BEATS,
        Bye,
        Error,
        Heartbeat,
        Hello,
        Unknown,
        Welcome,
    )
    from monarch_pdb.wire.rank_messages import (
        THREAD,
        BreakRanks,
        BreakReport,
        Dismiss,
        EditorGone,
        Ended,
        Input,
        InterruptRanks,
        Logged,
        Output,
        PeekRanks,
        PeekReport,
        Present,
        PresentRank,
        Prompt,
        StackReport,
        TakeStacks,
        is_thread,
        thread_instance,
    )
    from monarch_pdb.wire.records import (
        CastGroup,
        Frame,
        JobRow,
        LocalValue,
        RankRef,
        SessionRow,
        Spot,
        StackGroup,
        ThreadStack,
    )
    from monarch_pdb.wire.schema import (
        Dropped,
        Message,
        Record,
        build,
        message,
        message_types,
        record,
    )
    from monarch_pdb.wire.words import (
        Client,
        Ending,
        EventKind,
        Query,
        RankState,
        Reading,
        Role,
        Stop,
        Threads,
        Word,
    )

MODULES = ("codec", "schema", "words", "records", "handshake", "rank_messages", "brokers", "clients")
"""Where a name is looked for, the modules every peer needs first."""
_NOWHERE = object()


def __getattr__(name: str) -> object:
    """A name of the wire, its module loaded on first use; from then on a plain attribute."""
    for module in MODULES if not name.startswith("_") else ():
        found = getattr(import_module(f"{__name__}.{module}"), name, _NOWHERE)
        if found is not _NOWHERE:
            globals()[name] = found
            return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
