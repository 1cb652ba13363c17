"""What a member of a completed round writes when it leaves, finds a peer dead, wants the next
round, or ends the job; and how it reads whether a new round is forming (all pure).

These are single batches of atomic operations, not machines: each is one decision with one
write, and its outcome needs no reply other than "done".
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import Add, Get, Op, Reply, Set, SetIfAbsent, SetLeased
from tpelastic.core.rendezvous.records import (
    ClosedRecord,
    ProposalRecord,
    RoundResult,
    StateCorrupt,
    decode_closed,
    decode_counter,
    decode_reason,
    encode_closed,
    encode_proposal,
    encode_reason,
    encode_result,
)
from tpelastic.core.values import value_eq, value_hash, value_repr


def leave_ops(
    keys: RunKeys,
    result: RoundResult,
    node: str,
    why: str = "left",
    *,
    proposer: str = "",
    attempt: int = 0,
) -> tuple[Op, ...]:
    """A graceful leave: mark ``node`` gone for the next round, propose that round as this one
    without ``node`` (the survivors confirm it instead of joining anew, see ``reform.py``), and
    open it for the others. The proposal goes before the opening, so whoever sees the round
    opened finds it; the first proposal wins (set-if-absent). ``attempt``: the newest in-place
    attempt of the round the writer knows of.

    Leaving never closes the rendezvous: the survivors form the next round without this node.
    """
    rank = result.rank_of(node)
    if rank is None:
        return ()
    nxt = result.round_no + 1
    proposal = ProposalRecord(
        base_round=result.round_no, gone=(rank,), proposer=proposer or node, attempt=attempt
    )
    return (
        Set(keys.gone(nxt, rank), encode_reason(why)),
        SetIfAbsent(keys.proposal(nxt), encode_proposal(proposal)),
        SetIfAbsent(keys.opened(nxt), encode_reason("membership")),
    )


def report_dead_ops(
    keys: RunKeys, result: RoundResult, node: str, *, reporter: str = "", attempt: int = 0
) -> tuple[Op, ...]:
    """A member found ``node`` dead on its own clock: same writes as a leave, reason 'dead'."""
    return leave_ops(keys, result, node, why="dead", proposer=reporter, attempt=attempt)


def open_next_round_ops(keys: RunKeys, result: RoundResult, reason: str) -> tuple[Op, ...]:
    """End the current world so every member rejoins (scale-up, or a failure to restart)."""
    return (SetIfAbsent(keys.opened(result.round_no + 1), encode_reason(reason)),)


def close_ops(keys: RunKeys, forming_round: int, outcome: str, reason: str) -> tuple[Op, ...]:
    """End the job for everyone: set the closed record, and take the forming round's result slot
    with a closed placeholder so no round can complete after the close, however late a closer is.
    """
    placeholder = RoundResult(round_no=forming_round, closed=True)
    return (
        SetIfAbsent(keys.closed(), encode_closed(ClosedRecord(outcome=outcome, reason=reason))),
        SetIfAbsent(keys.result(forming_round), encode_result(placeholder)),
    )


def heartbeat_ops(keys: RunKeys, node: str, config: RendezvousConfig) -> tuple[Op, ...]:
    """One heartbeat: bump the node's counter, or (leased liveness) write its key under its lease
    of ``heartbeat_timeout`` seconds, which renews the lease."""
    key = keys.heartbeat(node)
    if config.leased_liveness:
        return (SetLeased(key, b"alive", config.heartbeat_timeout),)
    return (Add(key, 1),)


def ring_successor(result: RoundResult, node: str) -> str | None:
    """The member this node watches: the next rank, wrapping. None when alone or not a member."""
    rank = result.rank_of(node)
    if rank is None or result.world_size < 2:
        return None
    return result.participants[(rank + 1) % result.world_size].node


def ring_predecessor(result: RoundResult, node: str) -> str | None:
    """The member that watches this node: the previous rank, wrapping. None when alone or not
    a member."""
    rank = result.rank_of(node)
    if rank is None or result.world_size < 2:
        return None
    return result.participants[(rank - 1) % result.world_size].node


@frozen(kw_only=True)
class RoundWatch:
    """What a member of round ``round_no`` learns from one look at the next round."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    closed: ClosedRecord | None
    next_opened: str | None
    waiting: int
    # Why the round's next in-place attempt (see attempts.py) was opened; None while it is not.
    next_attempt: str | None = None


def watch_ops(keys: RunKeys, round_no: int, attempt: int = 0) -> tuple[Op, ...]:
    """One look at what ends the current world: a close, the next round opening, arrivals at
    it, and the next in-place attempt of this round (for a member running ``attempt``)."""
    nxt = round_no + 1
    return (
        Get(keys.closed()),
        Get(keys.opened(nxt)),
        Get(keys.arrivals(nxt)),
        Get(keys.attempt(round_no, attempt + 1)),
    )


def read_watch(replies: Sequence[Reply]) -> RoundWatch:
    """Decode the replies to :func:`watch_ops`. Raises StateCorrupt on foreign bytes."""
    closed, opened, arrivals, attempt = replies
    if not (attempt is None or isinstance(attempt, bytes)):
        raise StateCorrupt("attempt flag is not bytes")
    if not (closed is None or isinstance(closed, bytes)):
        raise StateCorrupt("closed flag is not bytes")
    if not (opened is None or isinstance(opened, bytes)):
        raise StateCorrupt("opened flag is not bytes")
    if not (arrivals is None or isinstance(arrivals, bytes)):
        raise StateCorrupt("arrival counter is not bytes")
    return RoundWatch(
        closed=decode_closed(closed) if closed is not None else None,
        next_opened=decode_reason(opened) if opened is not None else None,
        waiting=decode_counter(arrivals),
        next_attempt=decode_reason(attempt) if attempt is not None else None,
    )


def read_watch_at(ops: Sequence[Op], replies: Sequence[Reply]) -> RoundWatch:
    """:func:`read_watch` of the replies to ``ops`` (:func:`watch_ops`), naming the key whose
    reply is unreadable.

    Raises:
        StateCorrupt: ``corrupt rendezvous state at KEY: why``.
    """
    try:
        return read_watch(replies[:4])
    except StateCorrupt:
        for index, op in enumerate(ops[:4]):
            alone: list[Reply] = [None] * 4
            alone[index] = replies[index]
            try:
                read_watch(alone)
            except StateCorrupt as error:
                key = getattr(op, "key", "?")
                raise StateCorrupt(f"corrupt rendezvous state at {key!r}: {error}") from None
        raise
