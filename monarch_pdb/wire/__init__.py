"""The wire protocol: every message type, and how it is signed, encoded and checked.

Every part speaks it through this package's names (`wire.Cast`, `wire.Codec`); its modules
say who says what:

- `codec`: signing, framing, batching and replay (one `Codec` per thread);
- `schema`: how a message or a record is declared, and checked as it arrives;
- `words`: the enums whose words travel; `records`: a rank (`RankRef`) and the rows, answers
  and stacks more than one conversation carries;
- `handshake`: what every peer says (hello, welcome, heartbeats, goodbye, errors);
- `agents`: a rank's agent and its broker; `clients`: a shell or an editor and its broker;
  `brokers`: a broker and the broker above it.

Nothing else in the project builds or reads the maps that travel. A message that is too large,
badly signed, replayed, too old (its signed time stamp is off by more than `max_age`),
undecodable, of an unknown type or with a field of the wrong type (anywhere inside it, or a word
no enum knows) is refused with `Refused`; receivers count it and move on.
"""

from monarch_pdb.wire.schema import (
    Refused, Message, Record, REGISTRY, message, record, build,
)
from monarch_pdb.wire.codec import (
    PROTOCOL, MAX_BODY, MAX_OUTPUT, REPLAY_MEMORY, MAX_AGE, BATCH, BATCH_BYTES, ITEM_HEADER,
    AUTH_FAILED, ReplayGuard, Codec, clip,
)
from monarch_pdb.wire.words import (
    Word, Role, Client, Threads, Stop, RankState, EventKind, Ending, Query,
)
from monarch_pdb.wire.records import (
    RankRef, SessionRow, JobRow, CastGroup, Frame, ThreadStack, LocalValue, StackGroup, Spot,
)
from monarch_pdb.wire.handshake import (
    LOST_AFTER_BEATS, DROPPED_AFTER_BEATS, Hello, Welcome, Heartbeat, Unknown, Bye, Error,
)
from monarch_pdb.wire.agents import (
    PresentRank, THREAD, thread_instance, is_thread, Prompt, Output, Ended, Input, Dismiss, Present,
    TakeStacks, StackReport, InterruptRanks, PeekRanks, PeekReport, BreakRanks, BreakReport, Logged,
    EditorGone,
)
from monarch_pdb.wire.clients import (
    EVENT_TOPIC, OUTPUT_TOPIC, SessionGroup, Missing, Released, FollowedSession, LogEntry, EventRow,
    ListSessions, SessionList, SessionGroups, ListJobs, JobList, Attach, Attached, Detach, Detached,
    Send, Complete, Completions, SessionOutput, Resumed, SessionEnded, Cast, CastStarted,
    CastProgress, CastResult, Continue, Continued, Event, Printed, OutputLive, Follow, Following,
    OutputSince, OutputLog, Tick, CatchUp, Events, ListAll, Stacks, StacksResult, Interrupt,
    Interrupting, PEEK_MARGIN, Peek, PeekResult, Item, Inspect, Inspection, Breakpoints, BreakGroup,
    BreakpointsResult,
)
from monarch_pdb.wire.brokers import (
    BranchSession, BranchSessions, BranchRanks, BranchEnded, BranchLost, BranchOutput, OutputWanted,
    CastDown,
)
