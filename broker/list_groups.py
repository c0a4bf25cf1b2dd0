"""`list` past a screenful: the rows grouped by where their ranks stopped, made where the rows
are (the broker, or the root of a tree over what it mirrors), so that a shell is sent a few
groups, not 131,072 rows to decode only to group them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, groupby
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING

from monarch_pdb import wire
from monarch_pdb.broker.inflight import in_parts
from monarch_pdb.ranks import RankSet, format_ranks

if TYPE_CHECKING:
    from monarch_pdb.broker.entries import Session

KEY = attrgetter("job", "actor", "function", "lineno", "state", "attached")
"""What the ranks of one group share."""


@dataclass(slots=True)
class Members:
    """What a group gathers from its rows as they come."""

    ranks: list[int] = field(default_factory=list)
    coords: defaultdict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    hosts: dict[str, None] = field(default_factory=dict)
    """Each host once, in the order first seen."""


def group_rows(rows: Iterable[wire.SessionRow]) -> list[wire.SessionGroup]:
    """A group per job, actor, function, line, state and holder, in the order of each group's
    first row: its ranks, each coordinate's values and its hosts (131,072 rows at the root of a
    tree for each `list`)."""
    groups: dict[tuple, Members] = {}
    for row in rows:
        key = KEY(row)
        members = groups.get(key)
        if members is None:
            members = groups[key] = Members()
        members.ranks.append(row.rank)
        members.hosts[row.host] = None
        coords = members.coords
        for dim, value in row.coords.items():
            coords[dim].add(value)
    return [
        wire.SessionGroup(
            job,
            actor,
            function,
            lineno,
            state,
            ranks=format_ranks(m.ranks),
            count=len(set(m.ranks)),
            coords={dim: format_ranks(v) for dim, v in m.coords.items()},
            hosts=list(m.hosts),
            attached=attached,
        )
        for (job, actor, function, lineno, state, attached), m in groups.items()
    ]


PLACE = attrgetter("job", "actor", "function", "lineno", "reason", "attached", "host")
"""Where a paused session stands, as its group knows it (a paused session's state is its stop),
who holds it, and its host."""
RANK, DIMS, VALUES = attrgetter("rank"), attrgetter("dims"), attrgetter("values")


def group_sessions(sessions: Iterable[Session], states: dict[wire.Stop, wire.RankState]) -> list[wire.SessionGroup]:
    """The groups `group_rows` makes of the paused sessions' rows, made from the sessions
    themselves: a step of Python per run of sessions that stand at one place on one host (the
    sessions of a host come in batches), none per session (1,048,576 at the root of a tree),
    and no row made for any, nor any sort of them. `states` is how each stop reads in `list`."""
    by_host: defaultdict[tuple, list] = defaultdict(list)
    for place, run in groupby(zip(map(PLACE, sessions), sessions), key=itemgetter(0)):
        by_host[place].extend(map(itemgetter(1), run))
    places: defaultdict[tuple, list[tuple[int, str, list[Session], list[int]]]] = defaultdict(list)
    for (*place, host), members in by_host.items():
        ranks = list(map(RANK, members))
        places[tuple(place)].append((min(ranks), host, members, ranks))
    made = []
    for (job, actor, function, lineno, reason, attached), on_hosts in places.items():
        on_hosts.sort(key=lambda item: item[0])  # hosts in the order of their lowest rank
        coords: dict[str, set[int]] = {}
        for _, _, members, _ in on_hosts:
            dims = list(map(DIMS, members))
            if dims.count(dims[0]) == len(dims):  # one mesh: its coordinates column by column
                by_dims = {dims[0]: list(map(VALUES, members))}
            else:
                by_dims = defaultdict(list)
                for sess in members:
                    by_dims[sess.dims].append(sess.values)
            for names, values in by_dims.items():
                for i, dim in enumerate(names):  # column by column: zip(*values) costs more than the rest together
                    coords.setdefault(dim, set()).update(map(itemgetter(i), values))
        rank_set = RankSet.of(list(chain.from_iterable(item[3] for item in on_hosts)))
        made.append(
            (
                on_hosts[0][0],
                wire.SessionGroup(
                    job,
                    actor,
                    function,
                    lineno,
                    states[reason],
                    ranks=rank_set.text(),
                    count=len(rank_set),
                    coords={dim: format_ranks(values) for dim, values in coords.items()},
                    hosts=[host for _, host, _, _ in on_hosts],
                    attached=attached,
                ),
            )
        )
    made.sort(key=lambda item: (item[1].job, item[1].actor, item[0]))
    return [group for _, group in made]


GROUP_FIXED = 8 * len(wire.SessionGroup.__slots__)
"""A few bytes for each field."""


def group_weight(group: wire.SessionGroup) -> int:
    """About the bytes a group takes in a message: its texts, and a few for each field, host
    and coordinate."""
    return (
        len(group.job)
        + len(group.actor)
        + len(group.function)
        + len(group.state)
        + len(group.ranks)
        + len(group.attached)
        + sum(len(dim) + len(values) + 2 for dim, values in group.coords.items())
        + sum(len(host) + 2 for host in group.hosts)
        + GROUP_FIXED
    )


def group_parts(groups: list[wire.SessionGroup], part_size: int) -> Iterator[tuple[list[wire.SessionGroup], bool]]:
    """Groups of a list in parts, as `in_parts` cuts them."""
    return in_parts(((group, group_weight(group)) for group in groups), part_size)
