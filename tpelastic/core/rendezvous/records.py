"""The shared records a run keeps in the store, and their JSON encoding.

Shared state is never pickled (the store may be reachable by others) and holds no wall-clock
times. Every record carries ``"v": SCHEMA_VERSION``; reading a record validates it completely,
and anything else under our keys is a :class:`StateCorrupt` error, never a crash deep inside.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from attrs import field, frozen

from tpelastic.core.values import value_eq, value_hash, value_repr

SCHEMA_VERSION = 1
# Bounds on what a record may hold, so a hostile or damaged one is refused before it is parsed:
# a node's record and the small ones are a few hundred bytes; a result is about 150 bytes per
# participant (this holds more than 100,000).
MAX_RECORD_BYTES = 64 * 1024
MAX_RESULT_BYTES = 16 * 1024 * 1024
MAX_NAME_CHARS = 1024  # a node id or an address
MAX_REASON_CHARS = 4096
MAX_COUNTER_DIGITS = 19  # int64


class StateCorrupt(Exception):
    """Bytes under one of our keys are not a record we can read: foreign, garbage, or damaged."""


class SchemaTooNew(StateCorrupt):
    """A record was written by a newer tpelastic whose schema this version does not know."""


def _nonneg(_instance: object, attribute: Any, value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


@frozen(kw_only=True)
class NodeInfo:
    """Who a node is. ``prev_rank`` is its rank in the round it comes from, for sticky ranks;
    ``prev_attempt`` the highest in-place attempt of that round it ran or saw opened (see
    :mod:`tpelastic.core.rendezvous.attempts`), which the next round's closer carries into the
    job-wide restart count. Both describe ``prev_round`` only."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    node: str
    addr: str = ""
    prev_round: int | None = None
    prev_rank: int | None = None
    prev_attempt: int = field(default=0, validator=_nonneg)


@frozen(kw_only=True)
class RoundResult:
    """A completed round: participants in rank order, and the job-wide restart count.

    Invariant: ``participants`` holds distinct node ids; a node's rank is its index.
    ``closed`` marks the placeholder result that a close writes so no later round can complete.
    ``void`` marks a re-formed round that was given up (a survivor it names never confirmed):
    nobody trains in it, and its participants are the members the next round waits for.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    round_no: int = field(validator=_nonneg)
    participants: tuple[NodeInfo, ...] = ()
    restart_count: int = field(default=0, validator=_nonneg)
    closed: bool = False
    # Who offered this result. Two closers may compute the same membership; naming the closer
    # keeps their offers distinct, so exactly one of them sees its own offer stored and won.
    closer: str = ""
    void: bool = False
    # node -> rank, built once: every node looks itself up in the same O(N) result, and a scan
    # per lookup would cost O(N^2) across a large world. Not part of the value's identity.
    _ranks: dict[str, int] = field(init=False, eq=False, hash=False, repr=False)

    def __attrs_post_init__(self) -> None:
        ranks: dict[str, int] = {}
        for rank, info in enumerate(self.participants):
            ranks.setdefault(info.node, rank)
        object.__setattr__(self, "_ranks", ranks)

    def rank_of(self, node: str) -> int | None:
        return self._ranks.get(node)

    @property
    def world_size(self) -> int:
        return len(self.participants)


@frozen(kw_only=True)
class ProposalRecord:
    """The next round as one member proposes it: round ``base_round``'s participants minus the
    ranks in ``gone``, ranks sticky. ``attempt`` is the newest in-place attempt of the base
    round the proposer knew of (carried into the restart count)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    base_round: int = field(validator=_nonneg)
    gone: tuple[int, ...] = ()
    proposer: str = ""
    attempt: int = field(default=0, validator=_nonneg)


@frozen(kw_only=True)
class FormedRecord:
    """What the published result of a proposed round holds, for survivors that rebuild it
    from the proposal: its closer, the attempt carried, and (to check the rebuild) its size and
    restart count; ``void`` when the round was given up."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    closer: str
    # Ranks the round left out beyond the proposal's gone (a void round's lost survivors).
    lost: tuple[int, ...] = ()
    attempt: int = field(default=0, validator=_nonneg)
    size: int = field(default=0, validator=_nonneg)
    restart_count: int = field(default=0, validator=_nonneg)
    void: bool = False


@frozen(kw_only=True)
class ClosedRecord:
    """Why the rendezvous closed: a terminal outcome of the whole job."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    outcome: str
    reason: str = ""


def _dump(kind: str, body: Mapping[str, Any]) -> bytes:
    return json.dumps({"v": SCHEMA_VERSION, "kind": kind, **body}, sort_keys=True).encode()


def _load(raw: bytes, kind: str, limit: int = MAX_RECORD_BYTES) -> dict[str, Any]:
    if len(raw) > limit:
        raise StateCorrupt(f"a {kind} record of {len(raw)} bytes (at most {limit})")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise StateCorrupt(f"not a tpelastic {kind} record: {raw[:40]!r}") from error
    if not isinstance(data, dict) or not isinstance(data.get("v"), int):
        raise StateCorrupt(f"not a tpelastic {kind} record: {raw[:40]!r}")
    if data["v"] > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{kind} record has schema version {data['v']}, this tpelastic reads up to "
            f"{SCHEMA_VERSION}: upgrade tpelastic on this node"
        )
    if data.get("kind") != kind:
        raise StateCorrupt(f"expected a {kind} record, found {data.get('kind')!r}")
    return data


def _field(data: Mapping[str, Any], name: str, kind: type, optional: bool = False) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool):
        raise StateCorrupt(f"field {name!r} should be {kind.__name__}, found {value!r}")
    return value


def encode_node(info: NodeInfo) -> bytes:
    return _dump("node", _node_body(info))


def _node_body(info: NodeInfo) -> dict[str, Any]:
    body: dict[str, Any] = {
        "node": info.node,
        "addr": info.addr,
        "prev_round": info.prev_round,
        "prev_rank": info.prev_rank,
    }
    # Written only when set, so a record without in-place attempts is byte-for-byte the v1
    # record older versions write and read.
    if info.prev_attempt:
        body["prev_attempt"] = info.prev_attempt
    return body


def _text(data: Mapping[str, Any], name: str, limit: int) -> str:
    value: str = _field(data, name, str)
    if len(value) > limit:
        raise StateCorrupt(f"field {name!r} has {len(value)} characters (at most {limit})")
    return value


def _node_from(data: Mapping[str, Any]) -> NodeInfo:
    node = _text(data, "node", MAX_NAME_CHARS)
    if not node:
        raise StateCorrupt("node id is empty")
    attempt = _field(data, "prev_attempt", int, optional=True) or 0
    if attempt < 0:
        raise StateCorrupt(f"field 'prev_attempt' should be >= 0, found {attempt!r}")
    return NodeInfo(
        node=node,
        addr=_text(data, "addr", MAX_NAME_CHARS),
        prev_round=_field(data, "prev_round", int, optional=True),
        prev_rank=_field(data, "prev_rank", int, optional=True),
        prev_attempt=attempt,
    )


def decode_node(raw: bytes) -> NodeInfo:
    return _node_from(_load(raw, "node"))


def encode_result(result: RoundResult) -> bytes:
    return _dump(
        "result",
        {
            "round": result.round_no,
            "participants": [_node_body(p) for p in result.participants],
            "restart_count": result.restart_count,
            "closed": result.closed,
            "closer": result.closer,
            # Written only when set, so every other result is the record older versions read.
            **({"void": True} if result.void else {}),
        },
    )


@lru_cache(maxsize=64)
def decode_result(raw: bytes) -> RoundResult:
    """Decode a result record. Cached by its bytes: every node's guards read the same O(N)
    result several times per step, and a decoded result is an immutable value."""
    return _decode_result(raw)


def _decode_result(raw: bytes) -> RoundResult:
    data = _load(raw, "result", MAX_RESULT_BYTES)
    entries = data.get("participants")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise StateCorrupt("participants should be a list of node records")
    participants = tuple(_node_from(e) for e in entries)
    if len({p.node for p in participants}) != len(participants):
        raise StateCorrupt("a node appears twice among the participants")
    try:
        return RoundResult(
            round_no=_field(data, "round", int),
            participants=participants,
            restart_count=_field(data, "restart_count", int),
            closed=_field(data, "closed", bool),
            closer=_field(data, "closer", str),
            void=_field(data, "void", bool, optional=True) or False,
        )
    except ValueError as error:
        raise StateCorrupt(str(error)) from error


def encode_proposal(record: ProposalRecord) -> bytes:
    return _dump(
        "proposal",
        {
            "base_round": record.base_round,
            "gone": list(record.gone),
            "proposer": record.proposer,
            "attempt": record.attempt,
        },
    )


@lru_cache(maxsize=64)
def decode_proposal(raw: bytes) -> ProposalRecord:
    """Decode a proposal. Cached by its bytes: every survivor of a round reads the same one."""
    data = _load(raw, "proposal")
    gone = data.get("gone")
    if not isinstance(gone, list) or not all(
        isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gone
    ):
        raise StateCorrupt(f"field 'gone' should be a list of ranks, found {gone!r}")
    if len(set(gone)) != len(gone):
        raise StateCorrupt("a rank appears twice among the gone")
    try:
        return ProposalRecord(
            base_round=_field(data, "base_round", int),
            gone=tuple(gone),
            proposer=_text(data, "proposer", MAX_NAME_CHARS),
            attempt=_field(data, "attempt", int),
        )
    except ValueError as error:
        raise StateCorrupt(str(error)) from error


def encode_closed(record: ClosedRecord) -> bytes:
    return _dump("closed", {"outcome": record.outcome, "reason": record.reason})


def decode_closed(raw: bytes) -> ClosedRecord:
    data = _load(raw, "closed")
    return ClosedRecord(
        outcome=_text(data, "outcome", MAX_NAME_CHARS),
        reason=_text(data, "reason", MAX_REASON_CHARS),
    )


def encode_reason(reason: str) -> bytes:
    return _dump("reason", {"reason": reason})


def decode_reason(raw: bytes) -> str:
    return _text(_load(raw, "reason"), "reason", MAX_REASON_CHARS)


def decode_counter(raw: bytes | None) -> int:
    """A store counter (``add``) as an int; absent counts as 0. Every counter of ours only
    counts up from 0, so a negative one is corrupt."""
    if raw is None:
        return 0
    if len(raw.lstrip(b"-")) > MAX_COUNTER_DIGITS:
        raise StateCorrupt(f"expected a counter, found {len(raw)} bytes: {raw[:40]!r}")
    try:
        value = int(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as error:
        raise StateCorrupt(f"expected a counter, found {raw[:40]!r}") from error
    if value < 0:
        raise StateCorrupt(f"a counter below 0: {value}")
    return value


def encode_formed(record: FormedRecord) -> bytes:
    return _dump(
        "formed",
        {
            "closer": record.closer,
            "lost": list(record.lost),
            "attempt": record.attempt,
            "size": record.size,
            "restart_count": record.restart_count,
            "void": record.void,
        },
    )


def decode_formed(raw: bytes) -> FormedRecord:
    data = _load(raw, "formed")
    lost = data.get("lost")
    if not isinstance(lost, list) or not all(
        isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in lost
    ):
        raise StateCorrupt(f"field 'lost' should be a list of ranks, found {lost!r}")
    try:
        return FormedRecord(
            closer=_text(data, "closer", MAX_NAME_CHARS),
            lost=tuple(lost),
            attempt=_field(data, "attempt", int),
            size=_field(data, "size", int),
            restart_count=_field(data, "restart_count", int),
            void=_field(data, "void", bool),
        )
    except ValueError as error:
        raise StateCorrupt(str(error)) from error
