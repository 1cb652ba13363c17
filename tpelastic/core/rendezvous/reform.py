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
from tpelastic.core.rendezvous.reading import Verdict, _bytes
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
from tpelastic.core.rendezvous.state import JoinState

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


def read_check(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Verdict:
    """Replies to :func:`check_ops`: ``closed``, ``corrupt``, ``decided`` (R+1 has a result:
    read it), ``confirm`` (the proposal names this node; ``state`` holds it) or ``locate``."""
    base = state.from_round or 0
    keys = state.keys
    key = keys.closed()
    try:
        raws = [_bytes(r) for r in event.replies]
        closed, proposal_raw, current = raws[0], raws[-2], raws[-1]
        if closed is not None:
            return Verdict(kind="closed", detail=decode_closed(closed).reason or "closed")
        if current is not None:
            return Verdict(kind="decided", state=evolve(state, round_no=base + 1))
        previous = state.previous if _holds_base(state) else None
        if previous is None:
            if raws[1] is None or proposal_raw is None:
                return Verdict(kind="locate")
            key = keys.result(base)
            previous = decode_result(raws[1])
        if proposal_raw is None:
            return Verdict(kind="locate")
        key = keys.proposal(base + 1)
        proposal = decode_proposal(proposal_raw)
    except (StateCorrupt, ValueError) as error:
        return Verdict(kind="corrupt", detail=f"corrupt rendezvous state at {key!r}: {error}")
    if previous.closed:
        return Verdict(kind="closed", detail="the rendezvous was closed")
    rank = previous.rank_of(state.node.node)
    if rank is None or rank in proposal.gone or not usable(proposal, previous, config):
        return Verdict(kind="locate")
    confirming = evolve(
        state,
        round_no=base + 1,
        previous=previous,
        proposal=proposal,
        slot=None,
        may_resume=False,
    )
    return Verdict(kind="confirm", state=confirming)


def confirm_ops(state: JoinState) -> tuple[Op, ...]:
    return (Add(state.keys.confirmed(state.round_no), 1),)


def read_confirm(state: JoinState, event: OpsDone) -> Verdict:
    """The reply to :func:`confirm_ops`: ``last`` (this add completed the count: publish the
    round, ``result`` holds it), ``first`` (it watches the others, as a closer) or
    ``follow``."""
    assert state.previous is not None and state.proposal is not None
    count = event.replies[0]
    if isinstance(count, int) and count == 1 < survivors(state.previous, state.proposal):
        return Verdict(kind="first")
    if isinstance(count, int) and count == survivors(state.previous, state.proposal):
        # The count carries what the publisher reports as spent (R16), as a closer's does with
        # its members' reports. The proposal's attempt was written before the survivors'
        # agents judged the loss, so it cannot carry a refund of a collateral restart (A15).
        attempt = state.node.prev_attempt
        result = reformed(state.previous, state.proposal, closer=state.node.node, attempt=attempt)
        return Verdict(kind="last", result=result)
    # Below the size: others still confirm. Above it can only be a damaged counter: wait for
    # whatever result lands (or the void that a stalled proposal ends in).
    return Verdict(kind="follow")


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


def read_status(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Verdict:
    """:func:`reading.read_status`, and when round ``state.round_no`` was proposed (the last
    reply of ``status_ops``) the closer neither collects nor publishes it: it watches the
    survivors the proposal names. One that can no longer confirm (marked gone, found dead, or
    joining the usual way) gives the round up at once; so does ``takeover_delay`` of the
    closer's own clock without a result. ``void`` then carries the void round (``result``);
    else it waits on the result, looking again every heartbeat interval."""
    verdict = reading.read_status(state, event, config)
    if verdict.kind not in ("close", "wait", "timeout") or state.previous is None:
        return verdict
    key = state.keys.proposal(state.round_no)
    try:
        raw = _bytes(event.replies[-1])
        proposal = decode_proposal(raw) if raw is not None else None
    except (StateCorrupt, ValueError) as error:
        return Verdict(kind="corrupt", detail=f"corrupt rendezvous state at {key!r}: {error}")
    previous = state.previous
    if proposal is None or not usable(proposal, previous, config):
        return verdict
    new = verdict.state or state
    now = event.now
    void_at = new.void_at if new.void_at is not None else now + config.takeover_delay
    new = evolve(new, void_at=void_at, proposal=proposal)
    mine = previous.rank_of(state.node.node)
    pending = set(new.pending or ())
    lost = tuple(
        rank
        for rank in range(previous.world_size)
        if rank not in proposal.gone and rank != mine and rank not in pending
    )
    if lost or now >= void_at:
        # The void round's members are those that may still come: the next round's closer
        # waits for them. Fewer than min_nodes: keep them all (the closer judges them).
        kept = survivors(previous, proposal) - len(lost)
        gone = proposal.gone + lost if kept >= config.min_nodes else proposal.gone
        attempt = state.node.prev_attempt  # what this node reports as spent, as above
        void = reformed(
            previous,
            evolve(proposal, gone=gone),
            closer=state.node.node,
            attempt=attempt,
            void=True,
        )
        return Verdict(kind="void", state=new, result=void)
    if now >= state.deadline:
        return verdict
    until = min(void_at, state.deadline, now + config.heartbeat_interval)
    wait_keys = (state.keys.result(state.round_no),)
    return Verdict(kind="wait", state=new, wait_keys=wait_keys, wait_until=until)


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


def read_formed(state: JoinState, event: OpsDone) -> Verdict:
    """The reply to ``Get(formed)`` for a survivor that confirmed: the round rebuilt from the
    proposal it holds (``mine``), or, void, ``not_mine`` (it moves on as a member of it)."""
    assert state.previous is not None and state.proposal is not None
    key = state.keys.formed(state.round_no)
    try:
        raw = _bytes(event.replies[0])
        if raw is None:
            raise StateCorrupt(f"round {state.round_no}'s formed record vanished after it was set")
        record = decode_formed(raw)
    except (StateCorrupt, ValueError) as error:
        return Verdict(kind="corrupt", detail=f"corrupt rendezvous state at {key!r}: {error}")
    result = rebuilt(state.previous, state.proposal, record)
    if result.world_size != record.size or result.restart_count != record.restart_count:
        detail = f"corrupt rendezvous state at {key!r}: it does not match the proposal"
        return Verdict(kind="corrupt", detail=detail)
    if result.void or result.rank_of(state.node.node) is None:
        return Verdict(kind="not_mine", result=result)
    return Verdict(kind="mine", result=result)


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


def read_any_result(state: JoinState, event: OpsDone) -> Verdict:
    """:func:`reading.read_result`, or :func:`read_formed` when the read was of the formed
    record."""
    if state.reading_digest:
        return read_formed(state, event)
    return reading.read_result(state, event)
