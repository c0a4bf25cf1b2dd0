"""Questions about paused sessions on their way to the rank's process (an editor's `Inspect`, a
shell's `Complete`), and the answers on their way back to whoever asked."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import replace
from typing import TypeVar

from monarch_pdb import wire
from monarch_pdb.broker.upstream import UPSTREAM

KEPT = 4096
"""The most questions waiting for an answer; past it the oldest is forgotten (its asker has a
time-out of its own)."""
Answer = TypeVar("Answer", bound="wire.Inspection | wire.Completions")


class Inspections:
    def __init__(self) -> None:
        self._asked: OrderedDict[int, tuple[bytes, int]] = OrderedDict()
        self._refs = itertools.count(1)

    def ask(self, asker: bytes, msg: wire.Inspect, sid: int) -> wire.Inspect:
        """The question as the session's process gets it: its session, our number for it, and
        who asked (whom its log points tell), named as `BreakRanks` names it: from the broker
        above, by the name it gives."""
        owner = UPSTREAM + msg.owner if asker == UPSTREAM else asker
        return replace(msg, ref=self.number(asker, msg.ref), sid=sid, owner=owner)

    def number(self, asker: bytes, ref: int) -> int:
        """Our number for the question `asker` numbered `ref`, under which its answer comes back."""
        ours = next(self._refs)
        self._asked[ours] = (asker, ref)
        if len(self._asked) > KEPT:
            self._asked.popitem(last=False)
        return ours

    def answered(self, msg: Answer) -> tuple[bytes, Answer] | None:
        """Who asked, and the answer under their number; None for an answer nobody waits for."""
        asked = self._asked.pop(msg.ref, None)
        if asked is None:
            return None
        asker, ref = asked
        msg.ref = ref
        return asker, msg
