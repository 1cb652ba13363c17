"""Who is in a completed round, and with which rank (pure).

Ranks are sticky: a node of the previous round keeps its rank when that rank still exists in the
new world, so rank 0 (which hosts the workers' bootstrap store) moves only when its node leaves.
Members of the previous round are admitted before newcomers, so a full world never drops a
surviving member in favour of a node that just arrived.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpelastic.core.rendezvous.records import NodeInfo, RoundResult


def choose_participants(
    arrivals: Sequence[NodeInfo], previous: RoundResult | None, max_nodes: int
) -> list[NodeInfo]:
    """The arrivals that make the round: previous members first, then newcomers, by arrival."""
    unique: list[NodeInfo] = []
    seen: set[str] = set()
    for info in arrivals:
        if info.node not in seen:
            seen.add(info.node)
            unique.append(info)
    was_member = previous.rank_of if previous is not None else (lambda _node: None)
    members = [i for i in unique if was_member(i.node) is not None]
    newcomers = [i for i in unique if was_member(i.node) is None]
    return (members + newcomers)[:max_nodes]


def assign_ranks(chosen: Sequence[NodeInfo], previous: RoundResult | None) -> tuple[NodeInfo, ...]:
    """Order ``chosen`` by rank: 0..n-1, each distinct; survivors keep ranks below n."""
    size = len(chosen)
    ranked: list[NodeInfo | None] = [None] * size
    rest: list[NodeInfo] = []
    old_rank = {info.node: previous.rank_of(info.node) for info in chosen} if previous else {}
    for info in sorted(chosen, key=lambda i: _sort_key(old_rank.get(i.node))):
        rank = old_rank.get(info.node)
        if rank is not None and rank < size and ranked[rank] is None:
            ranked[rank] = info
        else:
            rest.append(info)
    arrival = {info.node: position for position, info in enumerate(chosen)}
    rest.sort(key=lambda i: arrival[i.node])
    free = (r for r, taken in enumerate(ranked) if taken is None)
    for info in rest:
        ranked[next(free)] = info
    return tuple(info for info in ranked if info is not None)


def _sort_key(rank: int | None) -> int:
    return rank if rank is not None else 1 << 62
