"""Editors' questions about paused sessions (`Inspect`) on their way to the rank's process,
and the answers on their way back to whoever asked."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import replace

from monarch_pdb import wire
from monarch_pdb.broker.upstream import UPSTREAM

KEPT = 4096
"""The most questions waiting for an answer; past it the oldest is forgotten (its asker has a
time-out of its own)."""


class Inspections:
    def __init__(self) -> None:
        self._asked: OrderedDict[int, tuple[bytes, int]] = OrderedDict()
        self._refs = itertools.count(1)

    def ask(self, asker: bytes, msg: wire.Inspect, sid: int) -> wire.Inspect:
        """The question as the session's process gets it: its session, our number for it, and
        who asked (whom its log points tell), named as `BreakRanks` names it: from the broker
        above, by the name it gives."""
        ref = next(self._refs)
        self._asked[ref] = (asker, msg.ref)
        if len(self._asked) > KEPT:
            self._asked.popitem(last=False)
        return replace(msg, ref=ref, sid=sid, owner=UPSTREAM + msg.owner if asker == UPSTREAM else asker)

    def answered(self, msg: wire.Inspection) -> tuple[bytes, wire.Inspection] | None:
        """Who asked, and the answer under their number; None for an answer nobody waits for."""
        asked = self._asked.pop(msg.ref, None)
        if asked is None:
            return None
        asker, ref = asked
        msg.ref = ref
        return asker, msg
