"""Re-forming a round from the one before, without a full re-join (pure readings).

When one member of round R leaves or is found dead, the member that writes its ``gone`` mark
also writes a *proposal* for R+1 (``membership.leave_ops``): R's participants minus that rank.
Every other member already holds R's result, so it need not arrive, register and be collected
again. A survivor joining from R reads ``closed``, results R and R+1 and the proposal in one
batch; when the proposal names it (and keeps at least ``min_nodes``), it *confirms* with one
``add`` on ``r<R+1>/confirmed``, after it stopped its workers of R. The survivor whose add
makes the count reach the proposal's size publishes R+1 (set-if-absent, like any closer):
R's participants minus the gone, ranks sticky (``ranks.assign_ranks``), computed locally in
O(N) by that one node. Everyone else waits on the result key and reads it. Per survivor: three
store round trips, one write, no O(N) reads but the result.

A proposal can stall: a survivor it names died too (two losses at once), or does not confirm
in time. A node closing R+1 (a follower whose wait ran out, or a node waiting in R+1 for a
round to join) then waits ``takeover_delay`` on its own clock for the result and, when none
came, publishes R+1 *void*: the same participants, marked void (``RoundResult.void``). Nobody
trains in a void round; every node reading one moves on to R+2 as a member of R+1 and joins it
the usual way, whose closer waits for each of them to arrive, leave or be found dead. The void
and the last confirmer's result race on one set-if-absent key, so exactly one stands and every
node follows it.
"""

from __future__ import annotations

from tpelastic.core.copying import evolve
from tpelastic.core.rendezvous import reading
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.ops import Add, Get, Op, OpsDone, Set
from tpelastic.core.rendezvous.ranks import assign_ranks
from tpelastic.core.rendezvous.reading import _bytes
from tpelastic.core.rendezvous.records import (
    FormedRecord,
    NodeInfo,
    ProposalRecord,
    RoundResult,
    StateCorrupt,
    decode_closed,
    decode_formed,
    decode_proposal,
    decode_result,
    encode_formed,
)
from tpelastic.core.rendezvous.replies import (
    Confirmed,
    ReformChecked,
    RepliesUnreadable,
    ResultRead,
    RoundDecided,
    RunClosed,
    StatusRead,
)
from tpelastic.core.rendezvous.state import JoinState
from tpelastic.core.values import Instant

# Reasons a member of R joins R+1 with when R+1 was opened by someone else: only these confirm
# a proposal. A member that opens R+1 itself (failure, scale-up) joins the usual way.
CONFIRMING_REASONS = frozenset({"rejoin", "membership"})


def _holds_base(state: JoinState) -> bool:
    """The join was handed the result of the round it comes from (``JoinRequested.held``)."""
    return state.previous is not None and state.previous.round_no == state.from_round


def check_ops(state: JoinState) -> tuple[Op, ...]:
    """One batch: closed, result R (the round it comes from, unless the node holds it), the
    proposal and the result of R+1."""
    keys = state.keys
    base = state.from_round or 0
    held = () if _holds_base(state) else (Get(keys.result(base)),)
    return (
        Get(keys.closed()),
        *held,
        Get(keys.proposal(base + 1)),
        Get(keys.result(base + 1)),
    )


def usable(proposal: ProposalRecord, previous: RoundResult, config: RendezvousConfig) -> bool:
    """A proposal of the round after ``previous`` that can complete: its gone ranks exist and
    at least ``min_nodes`` survive."""
    size = previous.world_size
    if proposal.base_round != previous.round_no or any(g >= size for g in proposal.gone):
        return False
    return size - len(proposal.gone) >= config.min_nodes


def survivors(previous: RoundResult, proposal: ProposalRecord) -> int:
    return previous.world_size - len(proposal.gone)


def read_check(state: JoinState, event: OpsDone, config: RendezvousConfig) -> object:
    """Replies to :func:`check_ops`: closed, R+1 decided, or R's result and the proposal of
    R+1 (either None when the store has none)."""
    base = state.from_round or 0
    keys, now = state.keys, event.now
    key = keys.closed()
    try:
        raws = [_bytes(r) for r in event.replies]
        closed, proposal_raw, current = raws[0], raws[-2], raws[-1]
        if closed is not None:
            return RunClosed(now=now, reason=decode_closed(closed).reason or "closed")
        if current is not None:
            return RoundDecided(now=now)
        previous = state.previous if _holds_base(state) else None
        if previous is None:
            if raws[1] is None or proposal_raw is None:
                return ReformChecked(now=now)
            key = keys.result(base)
            previous = decode_result(raws[1])
        if proposal_raw is None:
            return ReformChecked(now=now, previous=previous)
        key = keys.proposal(base + 1)
        proposal = decode_proposal(proposal_raw)
    except (StateCorrupt, ValueError) as error:
        return RepliesUnreadable(now=now, reason=f"corrupt rendezvous state at {key!r}: {error}")
    if previous.closed:
        return RunClosed(now=now, reason="the rendezvous was closed")
    return ReformChecked(now=now, previous=previous, proposal=proposal)


def names_me(state: JoinState, check: ReformChecked, config: RendezvousConfig) -> bool:
    """The proposal names this node among the survivors, and can complete."""
    previous, proposal = check.previous, check.proposal
    if previous is None or proposal is None:
        return False
    rank = previous.rank_of(state.node.node)
    return rank is not None and rank not in proposal.gone and usable(proposal, previous, config)


def confirming(state: JoinState, check: ReformChecked) -> JoinState:
    """A survivor named by the proposal, about to count itself in."""
    return evolve(
        state,
        round_no=(state.from_round or 0) + 1,
        previous=check.previous,
        proposal=check.proposal,
        slot=None,
        may_resume=False,
    )


def confirm_ops(state: JoinState) -> tuple[Op, ...]:
    return (Add(state.keys.confirmed(state.round_no), 1),)


def first_to_confirm(state: JoinState, confirmed: Confirmed) -> bool:
    """This add was the first of several: it watches the others, as a closer."""
    assert state.previous is not None and state.proposal is not None
    return confirmed.count == 1 < survivors(state.previous, state.proposal)


def last_to_confirm(state: JoinState, confirmed: Confirmed) -> bool:
    """This add completed the count: it publishes the round. (Below the size, others still
    confirm; above it can only be a damaged counter: it waits for whatever result lands, or
    the void that a stalled proposal ends in.)"""
    assert state.previous is not None and state.proposal is not None
    return confirmed.count == survivors(state.previous, state.proposal)


def confirmed_round(state: JoinState) -> RoundResult:
    """The round the last confirmer publishes. The count carries what the publisher reports
    as spent (R16), as a closer's does with its members' reports. The proposal's attempt was
    written before the survivors' agents judged the loss, so it cannot carry a refund of a
    collateral restart (A15)."""
    assert state.previous is not None and state.proposal is not None
    attempt = state.node.prev_attempt
    return reformed(state.previous, state.proposal, closer=state.node.node, attempt=attempt)


def reformed(
    previous: RoundResult,
    proposal: ProposalRecord,
    *,
    closer: str,
    attempt: int | None = None,
    void: bool = False,
) -> RoundResult:
    """Round R+1 as the proposal makes it: R's participants minus the gone, ranks sticky."""
    gone = set(proposal.gone)
    spent = proposal.attempt if attempt is None else attempt
    # Each entry reports the attempt carried, as a joining member's record would (R16).
    chosen = [
        NodeInfo(
            node=p.node,
            addr=p.addr,
            prev_round=previous.round_no,
            prev_rank=rank,
            prev_attempt=spent,
        )
        for rank, p in enumerate(previous.participants)
        if rank not in gone
    ]
    return RoundResult(
        round_no=previous.round_no + 1,
        participants=assign_ranks(chosen, previous),
        restart_count=reading.restart_count_of(previous, chosen, failure_reported=False),
        closer=closer,
        void=void,
    )


def read_status(state: JoinState, event: OpsDone, config: RendezvousConfig) -> object:
    """:func:`reading.read_status`, and whether round ``state.round_no`` was proposed (the
    last reply of ``status_ops``) as a re-form of the previous round that can complete: the
    closer then neither collects nor publishes it, but watches the survivors the proposal
    names; ``lost`` are those that can no longer confirm (marked gone, found dead, or joining
    the usual way)."""
    status = reading.read_status(state, event, config)
    previous = state.previous
    if not isinstance(status, StatusRead) or previous is None:
        return status
    key = state.keys.proposal(state.round_no)
    try:
        raw = _bytes(event.replies[-1])
        proposal = decode_proposal(raw) if raw is not None else None
    except (StateCorrupt, ValueError) as error:
        why = f"corrupt rendezvous state at {key!r}: {error}"
        return RepliesUnreadable(now=event.now, reason=why)
    if proposal is None or not usable(proposal, previous, config):
        return status
    mine = previous.rank_of(state.node.node)
    pending = set(status.pending)
    lost = tuple(
        rank
        for rank in range(previous.world_size)
        if rank not in proposal.gone and rank != mine and rank not in pending
    )
    return evolve(status, proposal=proposal, lost=lost)


def void_at(state: JoinState, status: StatusRead, config: RendezvousConfig) -> Instant:
    """When a closer that found its round proposed gives it up without a result: takeover_delay
    after it first saw the proposal, on its own clock."""
    return state.void_at if state.void_at is not None else status.now + config.takeover_delay


def proposal_stalled(state: JoinState, status: StatusRead, config: RendezvousConfig) -> bool:
    """A named survivor can no longer confirm, or the survivors did not publish in time."""
    if status.proposal is None:
        return False
    return bool(status.lost) or status.now >= void_at(state, status, config)


def watching(state: JoinState, status: StatusRead, config: RendezvousConfig) -> JoinState:
    """The closer's state after reading a status of a proposed round."""
    assert status.proposal is not None
    return evolve(state, void_at=void_at(state, status, config), proposal=status.proposal)


def void_round(state: JoinState, status: StatusRead, config: RendezvousConfig) -> RoundResult:
    """The void round a stalled proposal ends in. Its members are those that may still come:
    the next round's closer waits for them. Fewer than min_nodes: keep them all (the closer
    judges them)."""
    previous, proposal = state.previous, status.proposal
    assert previous is not None and proposal is not None
    kept = survivors(previous, proposal) - len(status.lost)
    gone = proposal.gone + status.lost if kept >= config.min_nodes else proposal.gone
    attempt = state.node.prev_attempt  # what this node reports as spent, as confirmed_round
    return reformed(
        previous, evolve(proposal, gone=gone), closer=state.node.node, attempt=attempt, void=True
    )


def proposal_wait(
    state: JoinState, config: RendezvousConfig, now: Instant
) -> tuple[tuple[str, ...], Instant]:
    """What a closer watching a proposal blocks on (the result), and until when: it looks
    again every heartbeat interval."""
    assert state.void_at is not None
    until = min(state.void_at, state.deadline, now + config.heartbeat_interval)
    return (state.keys.result(state.round_no),), until


def formed_ops(state: JoinState, draft: RoundResult) -> tuple[Op, ...]:
    """After winning the publish of a proposed round (or its void): the few bytes survivors
    rebuild it from. Nothing for a round formed the usual way."""
    if state.proposal is None:
        return ()
    proposal = state.proposal
    assert proposal is not None and state.previous is not None
    lost = tuple(
        rank
        for rank, p in enumerate(state.previous.participants)
        if rank not in proposal.gone and draft.rank_of(p.node) is None
    )
    record = FormedRecord(
        closer=draft.closer,
        lost=lost,
        attempt=max((p.prev_attempt for p in draft.participants), default=0),
        size=draft.world_size,
        restart_count=draft.restart_count,
        void=draft.void,
    )
    return (Set(state.keys.formed(state.round_no), encode_formed(record)),)


def read_formed(state: JoinState, event: OpsDone) -> object:
    """The reply to ``Get(formed)`` for a survivor that confirmed: the round rebuilt from the
    proposal it holds."""
    assert state.previous is not None and state.proposal is not None
    key = state.keys.formed(state.round_no)
    now = event.now
    try:
        raw = _bytes(event.replies[0])
        if raw is None:
            raise StateCorrupt(f"round {state.round_no}'s formed record vanished after it was set")
        record = decode_formed(raw)
    except (StateCorrupt, ValueError) as error:
        return RepliesUnreadable(now=now, reason=f"corrupt rendezvous state at {key!r}: {error}")
    result = rebuilt(state.previous, state.proposal, record)
    if result.world_size != record.size or result.restart_count != record.restart_count:
        detail = f"corrupt rendezvous state at {key!r}: it does not match the proposal"
        return RepliesUnreadable(now=now, reason=detail)
    return ResultRead(now=now, result=result)


# The last rebuild: every survivor of a process (the simulator's, the benchmark's threads)
# rebuilds the same O(N) round from the same values; kept with its inputs, compared by identity.
_LAST_REBUILD: list[tuple[RoundResult, ProposalRecord, FormedRecord, RoundResult] | None] = [None]


def rebuilt(previous: RoundResult, proposal: ProposalRecord, record: FormedRecord) -> RoundResult:
    entry = _LAST_REBUILD[0]  # read once: another thread may replace it meanwhile
    if entry is not None and entry[0] is previous and entry[1] == proposal and entry[2] == record:
        return entry[3]
    if record.lost:
        proposal = evolve(proposal, gone=proposal.gone + record.lost)
    result = reformed(
        previous, proposal, closer=record.closer, attempt=record.attempt, void=record.void
    )
    _LAST_REBUILD[0] = (previous, proposal, record, result)
    return result


def read_any_result(state: JoinState, event: OpsDone) -> object:
    """:func:`reading.read_result`, or :func:`read_formed` when the read was of the formed
    record."""
    if state.reading_digest:
        return read_formed(state, event)
    return reading.read_result(state, event)
