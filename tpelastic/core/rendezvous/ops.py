"""Store operations as values: what the rendezvous core asks the driver to do, and the replies.

The core never talks to a store. It returns :class:`StoreOps` (a batch done in order, each op
atomic on its own) or :class:`StoreWait` (block until keys exist, or a deadline on the node's own
clock), and the driver feeds back :class:`OpsDone` or :class:`WaitEnded`. A compare-and-set race
on the store therefore becomes an ordinary transition that tests can drive.
"""

from __future__ import annotations

from typing import TypeAlias

from attrs import frozen

from tpelastic.core.rendezvous.records import RoundResult
from tpelastic.core.values import Instant, value_eq, value_hash, value_repr


@frozen
class Get:
    """Read a key; the reply is its bytes, or None when it does not exist."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    key: str


@frozen
class Set:
    """Write a key only this node writes; the reply is None."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    key: str
    value: bytes


@frozen
class Add:
    """Atomically add to a counter (absent counts as 0); the reply is the new value."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    key: str
    amount: int


@frozen
class SetIfAbsent:
    """Atomically create a key unless it exists; the reply is the value stored afterwards."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    key: str
    value: bytes


@frozen
class SetLeased:
    """Write a key tied to this node's lease of ``ttl`` seconds, renewing the lease: the store
    deletes the key once ``ttl`` passes without another SetLeased (the driver owns the lease;
    only stores with leases get this op). The reply is None."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    key: str
    value: bytes
    ttl: float


Op: TypeAlias = Get | Set | Add | SetIfAbsent | SetLeased
Reply: TypeAlias = bytes | int | None


@frozen
class StoreOps:
    """Effect: run ``ops`` in order and answer with one :class:`OpsDone`."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    ops: tuple[Op, ...]


@frozen
class StoreWait:
    """Effect: block until all ``keys`` exist or until ``deadline``; answer with WaitEnded."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    keys: tuple[str, ...]
    deadline: Instant


@frozen(kw_only=True)
class OpsDone:
    """Event: the replies to the last :class:`StoreOps`, one per op, in order."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    replies: tuple[Reply, ...]
    now: Instant


@frozen(kw_only=True)
class WaitEnded:
    """Event: the last :class:`StoreWait` ended; ``present`` says whether the keys all exist."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    present: bool
    now: Instant


@frozen(kw_only=True)
class JoinSucceeded:
    """Effect (outcome): this node is rank ``rank`` of the completed round ``result``."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    result: RoundResult
    rank: int


@frozen(kw_only=True)
class JoinFailed:
    """Effect (outcome): the join ended without a round. ``kind`` is closed, timeout or corrupt."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    kind: str
    reason: str


def run_ops(ops: tuple[Op, ...], table: dict[str, bytes]) -> tuple[Reply, ...]:
    """Apply ``ops`` to a plain dict, as an atomic in-memory store would (for sims and tests)."""
    replies: list[Reply] = []
    for op in ops:
        if isinstance(op, Get):
            replies.append(table.get(op.key))
        elif isinstance(op, (Set, SetLeased)):
            table[op.key] = op.value  # a dict has no leases: the key simply stays
            replies.append(None)
        elif isinstance(op, Add):
            value = int(table.get(op.key, b"0")) + op.amount
            table[op.key] = str(value).encode()
            replies.append(value)
        else:
            replies.append(table.setdefault(op.key, op.value))
    return tuple(replies)
