"""Turn store replies into verdicts (pure). Guards and actions of the join machine read these.

Every reader validates what it reads; unreadable bytes under our keys give a ``corrupt`` verdict
instead of an exception, so the machine fails cleanly with a reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import wraps
from typing import TypeVar

from attrs import evolve, frozen

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.liveness import LivenessTracker, judge_many
from tpelastic.core.rendezvous.ops import Get, Op, OpsDone, Reply
from tpelastic.core.rendezvous.ranks import assign_ranks, choose_participants
from tpelastic.core.rendezvous.records import (
    NodeInfo,
    RoundResult,
    StateCorrupt,
    decode_closed,
    decode_counter,
    decode_node,
    decode_result,
)
from tpelastic.core.rendezvous.state import JoinState
from tpelastic.core.restart_budget import next_restart_count, round_restart_count
from tpelastic.core.values import Instant, value_eq, value_hash, value_repr

# Nodes may arrive at a round after it is full (they wait for the next); more than this many
# beyond max_nodes is no arrival counter a real run can reach: the state is corrupt.
MAX_LATE_ARRIVALS = 4096


def _corrupt(key: str, error: Exception) -> Verdict:
    return Verdict(kind="corrupt", detail=f"corrupt rendezvous state at {key!r}: {error}")


@frozen(kw_only=True)
class Verdict:
    """What a batch of replies means. ``kind`` names it; the other fields carry its data."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    kind: str
    detail: str = ""
    round_no: int = 0
    previous: RoundResult | None = None
    result: RoundResult | None = None
    state: JoinState | None = None
    wait_keys: tuple[str, ...] = ()
    wait_until: Instant = 0.0


A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
T = TypeVar("T")


def once_per_step(reader: Callable[[A, B, C], T]) -> Callable[[A, B, C], T]:
    """``reader``, remembering its last answer: asked again about the very same (state, event,
    config) objects, it answers without reading again.

    A table evaluates every guard of a (phase, event) group, and the guards and the action of a
    group all ask one reader about the same replies; a closer's reading is O(N), so reading once
    per step matters. The key is the identity of the three arguments, which are immutable
    values, and the last ones are kept alive with the answer, so an identity is never reused
    while remembered. Only for pure readers; exceptions are not remembered.
    """
    last: list[tuple[A, B, C, T] | None] = [None]

    @wraps(reader)
    def remembered(state: A, event: B, config: C) -> T:
        entry = last[0]  # read once: another thread may replace it meanwhile
        if entry is not None and entry[0] is state and entry[1] is event and entry[2] is config:
            return entry[3]
        answer = reader(state, event, config)
        last[0] = (state, event, config, answer)
        return answer

    return remembered


def _bytes(reply: Reply) -> bytes | None:
    if reply is None or isinstance(reply, bytes):
        return reply
    raise StateCorrupt(f"expected bytes from the store, got {type(reply).__name__}")


def read_location(state: JoinState, event: OpsDone) -> Verdict:
    """Replies to [closed, published]: is the run closed, and which round to probe first."""
    key = state.keys.closed()
    try:
        closed, published = (_bytes(r) for r in event.replies)
        if closed is not None:
            record = decode_closed(closed)
            return Verdict(kind="closed", detail=f"{record.outcome}: {record.reason}".rstrip(": "))
        key = state.keys.published_rounds()
        start = decode_counter(published)
    except (StateCorrupt, ValueError) as error:
        return _corrupt(key, error)
    if state.from_round is not None:
        start = max(start, state.from_round + 1)
    return Verdict(kind="probe", round_no=start)


def probe_ops(state: JoinState, round_no: int) -> tuple[Op, ...]:
    before = (Get(state.keys.result(round_no - 1)),) if round_no > 0 else ()
    return (*before, Get(state.keys.result(round_no)))


def read_probe(state: JoinState, event: OpsDone) -> Verdict:
    """Replies to probe_ops: the round is taken (look further), closed, or still forming."""
    try:
        raws = [_bytes(r) for r in event.replies]
        previous = None
        if state.round_no > 0:
            if raws[0] is None and raws[-1] is None:
                return _behind(state)
            if raws[0] is None:
                r = state.round_no
                raise StateCorrupt(f"round {r} has a result but round {r - 1} has none")
            previous = decode_result(raws[0])
        current = decode_result(raws[-1]) if raws[-1] is not None else None
    except (StateCorrupt, ValueError) as error:
        return _corrupt(state.keys.result(state.round_no), error)
    for result in (previous, current):
        if result is not None and result.closed:
            return Verdict(kind="closed", detail="the rendezvous was closed")
    if current is not None:
        return Verdict(kind="taken", round_no=state.round_no + 1, previous=current)
    return Verdict(kind="open", round_no=state.round_no, previous=previous)


def _behind(state: JoinState) -> Verdict:
    """The probed round's previous result is missing: this node looked ahead of the run.

    Results are written in order and never removed, so either the ``published`` hint ran ahead
    of them (look one round back: ``behind``), or the store holds no result of the round this
    node comes from (a store that started again empty): the node then joins what is forming as
    a newcomer (``forgotten``: locate again without ``from_round``).
    """
    if state.from_round is not None and state.round_no == state.from_round + 1:
        node = evolve(state.node, prev_attempt=0)
        newcomer = evolve(state, node=node, from_round=None, round_no=0, may_resume=False)
        return Verdict(kind="forgotten", state=newcomer)
    # Scan forward again from the lowest round that can be forming (just after the node's own,
    # whose result exists, or 0), not one round back per probe: a hint of 10^9 would cost 10^9
    # probes. Results are contiguous from round 0, so a forward scan finds the forming round.
    floor = state.from_round + 1 if state.from_round is not None else 0
    return Verdict(kind="behind", round_no=min(floor, state.round_no - 1))


def expected_members(state: JoinState) -> tuple[int, ...]:
    """The previous round's ranks this closer still waits for (all but itself, at first)."""
    if state.pending is not None:
        return state.pending
    previous = state.previous
    if previous is None:
        return ()
    return tuple(rank for rank, p in enumerate(previous.participants) if p.node != state.node.node)


def status_ops(state: JoinState) -> tuple[Op, ...]:
    keys, r = state.keys, state.round_no
    ops: list[Op] = [Get(keys.closed()), Get(keys.result(r)), Get(keys.arrivals(r))]
    previous = state.previous
    for rank in expected_members(state):
        node = previous.participants[rank].node if previous else ""
        ops += [Get(keys.member_arrived(r, rank)), Get(keys.gone(r, rank))]
        ops.append(Get(keys.heartbeat(node)))
    ops.append(Get(keys.proposal(r)))  # last: read by reform.read_status
    return tuple(ops)


def read_status(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Verdict:
    """Replies to status_ops: may the closer close now, must it wait, or is the join over?"""
    now = event.now
    keys, r = state.keys, state.round_no
    key = keys.closed()
    try:
        raws = [_bytes(reply) for reply in event.replies]
        if raws[0] is not None:
            return Verdict(kind="closed", detail=decode_closed(raws[0]).reason or "closed")
        if raws[1] is not None:
            return Verdict(kind="decided")
        key = keys.arrivals(r)
        arrivals = decode_counter(raws[2])
        if arrivals > config.max_nodes + MAX_LATE_ARRIVALS:
            raise StateCorrupt(
                f"{arrivals} arrivals cannot be true (max_nodes {config.max_nodes}, at most "
                f"{MAX_LATE_ARRIVALS} more waiting)"
            )
        if state.slot is not None and arrivals <= state.slot:
            # This node's slot came from the counter, which never goes down.
            raise StateCorrupt(f"{arrivals} arrivals, but this node holds slot {state.slot}")
        key = f"the member, gone and heartbeat keys of {keys.round_prefix(r)}"
        pending, dead, liveness = _pending_after(state, raws[3:-1], now, config)
    except (StateCorrupt, ValueError) as error:
        return _corrupt(key, error)
    reached = state.min_reached_at
    if reached is None and arrivals >= config.min_nodes:
        reached = now
    seen = state.declared_dead + tuple(sorted(dead))
    new = _evolve_status(state, arrivals, pending, seen, liveness, reached)
    last_call_over = reached is not None and now >= reached + config.last_call_timeout
    full = arrivals >= config.max_nodes
    # A round after another needs no last call once every member of that one is accounted for:
    # the last call is for nodes still starting up, and a later arrival opens the next round.
    everyone = state.previous is not None
    if not pending and arrivals >= config.min_nodes and (full or everyone or last_call_over):
        return Verdict(kind="close", state=new)
    if now >= state.deadline:
        return Verdict(kind="timeout", detail=_timeout_detail(new, config), state=new)
    wait_keys, until = _next_wait(new, config, now)
    return Verdict(kind="wait", state=new, wait_keys=wait_keys, wait_until=until)


def _evolve_status(
    state: JoinState,
    arrivals: int,
    pending: tuple[int, ...],
    dead: tuple[str, ...],
    liveness: LivenessTracker,
    reached: Instant | None,
) -> JoinState:
    return evolve(
        state,
        arrivals=arrivals,
        pending=pending,
        declared_dead=dead,
        liveness=liveness,
        min_reached_at=reached,
    )


def _pending_after(
    state: JoinState, raws: Sequence[bytes | None], now: Instant, config: RendezvousConfig
) -> tuple[tuple[int, ...], frozenset[str], LivenessTracker]:
    """Previous members still expected: not arrived, not gone, not dead to this observer."""
    previous = state.previous
    if previous is None:
        return (), frozenset(), state.liveness
    absent: list[tuple[int, str]] = []
    beats: list[tuple[str, bytes | None]] = []
    for index, rank in enumerate(expected_members(state)):
        arrived, gone, beat = raws[3 * index : 3 * index + 3]
        if arrived is None and gone is None:
            node = previous.participants[rank].node
            absent.append((rank, node))
            beats.append((node, beat))
    # All members' heartbeats in one judgement: one tracker update per gather, not one per member.
    liveness, dead = judge_many(
        state.liveness, beats, now, config.heartbeat_timeout, config.leased_liveness
    )
    still = tuple(rank for rank, node in absent if node not in dead)
    return still, dead, liveness


def _next_wait(
    state: JoinState, config: RendezvousConfig, now: Instant
) -> tuple[tuple[str, ...], Instant]:
    """Which key to block on, and until when: the earliest moment the verdict could change."""
    keys, r = state.keys, state.round_no
    until = min(state.deadline, now + config.heartbeat_interval)
    if state.arrivals < config.min_nodes:
        return (keys.slot(r, config.min_nodes - 1),), until
    assert state.min_reached_at is not None
    last_call_ends = state.min_reached_at + config.last_call_timeout
    if last_call_ends > now:
        until = min(until, last_call_ends)
    if state.pending:
        return (keys.member_arrived(r, state.pending[0]),), until
    return (keys.slot(r, config.max_nodes - 1),), until


def _timeout_detail(state: JoinState, config: RendezvousConfig) -> str:
    if state.arrivals < config.min_nodes:
        return (
            f"round {state.round_no}: only {state.arrivals} of at least {config.min_nodes} "
            f"nodes joined within the join timeout ({config.join_timeout:g}s)"
        )
    waiting_for = len(state.pending or ())
    return f"round {state.round_no}: {waiting_for} member(s) of the last round never came"


def collect_ops(state: JoinState) -> tuple[Op, ...]:
    keys, r = state.keys, state.round_no
    slots = tuple(Get(keys.slot(r, i)) for i in range(state.arrivals))
    return (*slots, Get(keys.failures(r)))


def read_collection(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Verdict:
    """Replies to collect_ops: the result to offer, the slots still unwritten, or (unwritten
    past the join deadline) a timeout."""
    raws = [_bytes(reply) for reply in event.replies]
    infos: list[NodeInfo] = []
    slot_of: dict[str, int] = {}
    for slot, raw in enumerate(raws[:-1]):
        if raw is None:
            continue
        try:
            info = decode_node(raw)
            # A node writes only the slot it took, and a retried join writes that same slot
            # again: one node in two slots is a copied record, never a state the protocol makes.
            if info.node in slot_of:
                raise StateCorrupt(f"node {info.node!r} is in slot {slot_of[info.node]} too")
        except (StateCorrupt, ValueError) as error:
            return _corrupt(state.keys.slot(state.round_no, slot), error)
        slot_of[info.node] = slot
        infos.append(info)
    try:
        failures = decode_counter(raws[-1])
    except (StateCorrupt, ValueError) as error:
        return _corrupt(state.keys.failures(state.round_no), error)
    chosen = choose_participants(infos, state.previous, config.max_nodes)
    missing = tuple(
        state.keys.slot(state.round_no, i) for i, raw in enumerate(raws[:-1]) if raw is None
    )
    if missing and len(chosen) < config.max_nodes and len(chosen) >= config.min_nodes:
        # Enough to publish, but a counted arrival is still writing its slot: wait for it
        # rather than leave a live node out of the round (bounded by the heartbeat timeout,
        # after which it counts as having died between counting and writing).
        since = state.unwritten_since if state.unwritten_since is not None else event.now
        if event.now < min(state.deadline, since + config.heartbeat_timeout):
            waiting = evolve(state, unwritten_since=since)
            return Verdict(kind="unwritten", wait_keys=missing, state=waiting)
    if len(chosen) < config.min_nodes:
        # A slot counted but never written (its node died between taking and writing it) must
        # not hold the closer past the join deadline.
        if event.now >= state.deadline:
            return Verdict(
                kind="timeout",
                detail=(
                    f"round {state.round_no}: only {len(chosen)} of at least {config.min_nodes} "
                    f"nodes registered within the join timeout ({config.join_timeout:g}s); "
                    f"{state.arrivals - len(infos)} arrival(s) never wrote their slot"
                ),
            )
        return Verdict(kind="unwritten", wait_keys=missing)
    draft = RoundResult(
        round_no=state.round_no,
        participants=assign_ranks(chosen, state.previous),
        restart_count=restart_count_of(state.previous, chosen, failure_reported=failures > 0),
        closer=state.node.node,
    )
    return Verdict(kind="publish", result=draft)


def restart_count_of(
    previous: RoundResult | None, chosen: Sequence[NodeInfo], *, failure_reported: bool
) -> int:
    """The new round's restart count: the previous round's, plus the in-place attempts its
    members report having spent in it (the highest one: attempts are job-wide, so two members
    that ran attempt 2 spent two units together, not four), plus one for a reported failure."""
    if previous is None:
        return next_restart_count(0, failure_reported)
    attempts = max((p.prev_attempt for p in chosen if p.prev_round == previous.round_no), default=0)
    return round_restart_count(previous.restart_count, attempts, failure_reported)


def read_result(state: JoinState, event: OpsDone) -> Verdict:
    """The reply holding the round's result (the last one): mine, not mine, or closed."""
    try:
        raw = _bytes(event.replies[0])
        if raw is None:
            raise StateCorrupt(f"round {state.round_no} result vanished after it was set")
        result = decode_result(raw)
    except (StateCorrupt, ValueError) as error:
        return _corrupt(state.keys.result(state.round_no), error)
    if result.closed:
        return Verdict(kind="closed", detail="the rendezvous was closed", result=result)
    if result.round_no != state.round_no:
        return Verdict(
            kind="corrupt",
            detail=f"result of round {result.round_no} under round {state.round_no}'s key",
        )
    if result.void or result.rank_of(state.node.node) is None:
        # Nobody trains in a void round: its participants join the next one as its members.
        return Verdict(kind="not_mine", result=result)
    return Verdict(kind="mine", result=result)


def draft_node(state: JoinState) -> NodeInfo:
    """This node as it registers: with its rank in the previous round, when it was a member,
    and the in-place attempt of that round it reached (``state.node.prev_attempt``, from its
    request) when that round is the one it comes from; else 0."""
    previous = state.previous
    rank = previous.rank_of(state.node.node) if previous else None
    member = previous is not None and rank is not None
    attempt = state.node.prev_attempt
    if not member or previous is None or previous.round_no != state.from_round:
        attempt = 0
    return evolve(
        state.node,
        prev_round=previous.round_no if member and previous else None,
        prev_rank=rank,
        prev_attempt=attempt,
    )
