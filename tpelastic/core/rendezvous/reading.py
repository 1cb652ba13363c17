"""Read a join's store replies into typed facts (pure), and the requests those replies answer.

Each ``read_*`` reads the replies to one phase's request into an event of
:mod:`tpelastic.core.rendezvous.replies`; :func:`tpelastic.core.rendezvous.join_decode.decode`
picks the reader for the phase that asked. Every reader validates what it reads; unreadable
bytes under our keys give :class:`~tpelastic.core.rendezvous.replies.RepliesUnreadable` instead
of an exception, so the machine fails cleanly with a reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpelastic.core.copying import evolve
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
from tpelastic.core.rendezvous.replies import (
    Located,
    NoResults,
    RepliesUnreadable,
    ResultRead,
    RoundDecided,
    RoundForming,
    RoundTaken,
    RunClosed,
    SlotsRead,
    StatusRead,
)
from tpelastic.core.rendezvous.state import JoinState
from tpelastic.core.restart_budget import next_restart_count, round_restart_count
from tpelastic.core.values import Instant

# Nodes may arrive at a round after it is full (they wait for the next); more than this many
# beyond max_nodes is no arrival counter a real run can reach: the state is corrupt.
MAX_LATE_ARRIVALS = 4096


def _corrupt(now: Instant, key: str, error: Exception) -> RepliesUnreadable:
    return RepliesUnreadable(now=now, reason=f"corrupt rendezvous state at {key!r}: {error}")


def _bytes(reply: Reply) -> bytes | None:
    if reply is None or isinstance(reply, bytes):
        return reply
    raise StateCorrupt(f"expected bytes from the store, got {type(reply).__name__}")


def read_location(state: JoinState, event: OpsDone) -> object:
    """Replies to [closed, published]: is the run closed, and which round to probe first."""
    key = state.keys.closed()
    try:
        closed, published = (_bytes(r) for r in event.replies)
        if closed is not None:
            record = decode_closed(closed)
            why = f"{record.outcome}: {record.reason}".rstrip(": ")
            return RunClosed(now=event.now, reason=why)
        key = state.keys.published_rounds()
        start = decode_counter(published)
    except (StateCorrupt, ValueError) as error:
        return _corrupt(event.now, key, error)
    if state.from_round is not None:
        start = max(start, state.from_round + 1)
    return Located(now=event.now, round_no=start)


def probe_ops(state: JoinState, round_no: int) -> tuple[Op, ...]:
    before = (Get(state.keys.result(round_no - 1)),) if round_no > 0 else ()
    return (*before, Get(state.keys.result(round_no)))


def read_probe(state: JoinState, event: OpsDone) -> object:
    """Replies to probe_ops: the round is taken, closed, still forming, or neither it nor the
    one before has a result."""
    now = event.now
    try:
        raws = [_bytes(r) for r in event.replies]
        previous = None
        if state.round_no > 0:
            if raws[0] is None and raws[-1] is None:
                return NoResults(now=now)
            if raws[0] is None:
                r = state.round_no
                raise StateCorrupt(f"round {r} has a result but round {r - 1} has none")
            previous = decode_result(raws[0])
        current = decode_result(raws[-1]) if raws[-1] is not None else None
    except (StateCorrupt, ValueError) as error:
        return _corrupt(now, state.keys.result(state.round_no), error)
    for result in (previous, current):
        if result is not None and result.closed:
            return RunClosed(now=now, reason="the rendezvous was closed")
    if current is not None:
        return RoundTaken(now=now, result=current)
    return RoundForming(now=now, previous=previous)


def own_round_forgotten(state: JoinState) -> bool:
    """With no result of the probed round nor of the one before: is the one before the round
    this node comes from? Results are written in order and never removed, so the store then
    holds no result of it (it started again empty), and the node joins what forms as a
    newcomer. Otherwise the ``published`` hint ran ahead of the results: look further back."""
    return state.from_round is not None and state.round_no == state.from_round + 1


def as_newcomer(state: JoinState) -> JoinState:
    """The join again from its start, as a node from no round (see own_round_forgotten)."""
    node = evolve(state.node, prev_attempt=0)
    return evolve(state, node=node, from_round=None, round_no=0, may_resume=False)


def scan_from(state: JoinState) -> int:
    """The round to probe when the hint ran ahead of the results: the lowest that can be
    forming (just after the node's own, whose result exists, or 0), not one round back per
    probe: a hint of 10^9 would cost 10^9 probes. Results are contiguous from round 0, so a
    forward scan finds the forming round."""
    floor = state.from_round + 1 if state.from_round is not None else 0
    return min(floor, state.round_no - 1)


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


def read_status(state: JoinState, event: OpsDone, config: RendezvousConfig) -> object:
    """Replies to status_ops (but the proposal): closed, decided, or who has arrived, who is
    still expected and who was found dead."""
    now = event.now
    keys, r = state.keys, state.round_no
    key = keys.closed()
    try:
        raws = [_bytes(reply) for reply in event.replies]
        if raws[0] is not None:
            return RunClosed(now=now, reason=decode_closed(raws[0]).reason or "closed")
        if raws[1] is not None:
            return RoundDecided(now=now)
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
        return _corrupt(now, key, error)
    return StatusRead(
        now=now, arrivals=arrivals, pending=pending, dead=tuple(sorted(dead)), liveness=liveness
    )


def min_reached_at(
    state: JoinState, status: StatusRead, config: RendezvousConfig
) -> Instant | None:
    """When this closer first saw ``min_nodes`` arrivals (None: not yet)."""
    if state.min_reached_at is None and status.arrivals >= config.min_nodes:
        return status.now
    return state.min_reached_at


def may_complete(state: JoinState, status: StatusRead, config: RendezvousConfig) -> bool:
    """May the round complete as the status reads: every previous member accounted for, at
    least ``min_nodes`` arrived, and it is full or the last call is over?"""
    if status.pending or status.arrivals < config.min_nodes:
        return False
    reached = min_reached_at(state, status, config)
    last_call_over = reached is not None and status.now >= reached + config.last_call_timeout
    # A round after another needs no last call once every member of that one is accounted for:
    # the last call is for nodes still starting up, and a later arrival opens the next round.
    everyone = state.previous is not None
    return status.arrivals >= config.max_nodes or everyone or last_call_over


def after_status(state: JoinState, status: StatusRead, config: RendezvousConfig) -> JoinState:
    """The closer's state after reading ``status``."""
    return evolve(
        state,
        arrivals=status.arrivals,
        pending=status.pending,
        declared_dead=state.declared_dead + status.dead,
        liveness=status.liveness,
        min_reached_at=min_reached_at(state, status, config),
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


def next_wait(
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


def timeout_detail(state: JoinState, config: RendezvousConfig) -> str:
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


def read_collection(state: JoinState, event: OpsDone, config: RendezvousConfig) -> object:
    """Replies to collect_ops: who registered, the participants chosen from them, the slots
    still unwritten, and the failures reported."""
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
            return _corrupt(event.now, state.keys.slot(state.round_no, slot), error)
        slot_of[info.node] = slot
        infos.append(info)
    try:
        failures = decode_counter(raws[-1])
    except (StateCorrupt, ValueError) as error:
        return _corrupt(event.now, state.keys.failures(state.round_no), error)
    chosen = choose_participants(infos, state.previous, config.max_nodes)
    missing = tuple(
        state.keys.slot(state.round_no, i) for i, raw in enumerate(raws[:-1]) if raw is None
    )
    return SlotsRead(
        now=event.now,
        chosen=tuple(chosen),
        registered=len(infos),
        missing=missing,
        failures=failures,
    )


def awaits_a_writer(state: JoinState, slots: SlotsRead, config: RendezvousConfig) -> bool:
    """Enough registered to publish, but a counted arrival is still writing its slot: wait for
    it rather than leave a live node out of the round (bounded by the heartbeat timeout, after
    which it counts as having died between counting and writing)."""
    enough = config.min_nodes <= len(slots.chosen) < config.max_nodes
    if not (slots.missing and enough):
        return False
    since = state.unwritten_since if state.unwritten_since is not None else slots.now
    return slots.now < min(state.deadline, since + config.heartbeat_timeout)


def draft_of(state: JoinState, slots: SlotsRead) -> RoundResult:
    """The result this closer offers from the slots it read."""
    return RoundResult(
        round_no=state.round_no,
        participants=assign_ranks(list(slots.chosen), state.previous),
        restart_count=restart_count_of(
            state.previous, slots.chosen, failure_reported=slots.failures > 0
        ),
        closer=state.node.node,
    )


def too_few_detail(state: JoinState, slots: SlotsRead, config: RendezvousConfig) -> str:
    return (
        f"round {state.round_no}: only {len(slots.chosen)} of at least {config.min_nodes} "
        f"nodes registered within the join timeout ({config.join_timeout:g}s); "
        f"{state.arrivals - slots.registered} arrival(s) never wrote their slot"
    )


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


def read_result(state: JoinState, event: OpsDone) -> object:
    """The reply holding the round's result (the last one)."""
    try:
        raw = _bytes(event.replies[0])
        if raw is None:
            raise StateCorrupt(f"round {state.round_no} result vanished after it was set")
        result = decode_result(raw)
    except (StateCorrupt, ValueError) as error:
        return _corrupt(event.now, state.keys.result(state.round_no), error)
    if result.closed:
        return RunClosed(now=event.now, reason="the rendezvous was closed")
    if result.round_no != state.round_no:
        why = f"result of round {result.round_no} under round {state.round_no}'s key"
        return RepliesUnreadable(now=event.now, reason=why)
    return ResultRead(now=event.now, result=result)


def is_mine(state: JoinState, result: RoundResult) -> bool:
    """Does this node train in ``result``? Nobody trains in a void round: its participants
    join the next one as its members."""
    return not result.void and result.rank_of(state.node.node) is not None


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
