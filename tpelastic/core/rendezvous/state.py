"""The state one node keeps while it joins a rendezvous round, and the events that drive it."""

from __future__ import annotations

import enum
from typing import Any

from attrs import field, frozen

from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.records import NodeInfo, ProposalRecord, RoundResult
from tpelastic.core.values import Instant, value_eq, value_hash, value_repr


class JoinPhase(enum.Enum):
    IDLE = "idle"
    RESUMING = "resuming"  # (a retried join) reading the round it arrived in, to take up its place
    LOCATING = "locating"  # reading the closed flag and where the latest round is
    PROBING = "probing"  # reading round results until it finds the round still forming
    ARRIVING = "arriving"  # taking an arrival slot in that round
    REGISTERING = "registering"  # writing who it is into its slot
    FOLLOWING = "following"  # waiting for the closer to publish the result
    REFORMING = "reforming"  # (a member of the last round) reading whether it may confirm
    CONFIRMING = "confirming"  # (a survivor named by the proposal) counting itself in
    GATHERING = "gathering"  # (closer) reading who has arrived, who is pending, who is dead
    WAITING = "waiting"  # (closer) blocked until a key appears or a deadline passes
    COLLECTING = "collecting"  # (closer) reading the arrivals to build the result
    PUBLISHING = "publishing"  # (closer) offering its result; the first offer wins
    ANNOUNCING = "announcing"  # (closer that won) bumping the published-rounds hint
    READING_RESULT = "reading_result"
    COMPLETE = "complete"
    CLOSED = "closed"
    TIMED_OUT = "timed_out"
    CORRUPT = "corrupt"


TERMINAL = frozenset({JoinPhase.COMPLETE, JoinPhase.CLOSED, JoinPhase.TIMED_OUT, JoinPhase.CORRUPT})

# Why a node joins. The reasons after "rejoin" end the previous world, so a node that was a member
# of it announces the next round (its peers see that and rejoin too).
OPENING_REASONS = frozenset({"failure", "scale_up", "membership"})
JOIN_REASONS = frozenset({"first", "rejoin", "waiting"}) | OPENING_REASONS


def _nonneg(_instance: object, attribute: Any, value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def _reason(_instance: object, _attribute: object, value: str) -> None:
    if value not in JOIN_REASONS:
        raise ValueError(f"join reason must be one of {sorted(JOIN_REASONS)}, got {value!r}")


@frozen(kw_only=True)
class JoinState:
    """One node's view of the round it is joining.

    ``previous`` is the store's result of round ``round_no - 1`` (None for round 0); it decides
    who must arrive or be declared dead before this round may complete (one world at a time).
    ``pending`` holds the previous round's ranks the closer still waits for; None until this
    node first acts as a closer (only closers need it, and it costs O(previous world size)).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: JoinPhase = JoinPhase.IDLE
    keys: RunKeys = RunKeys("")
    node: NodeInfo = NodeInfo(node="?")
    reason: str = field(default="first", validator=_reason)
    from_round: int | None = None
    round_no: int = 0
    slot: int | None = None
    previous: RoundResult | None = None
    deadline: Instant = 0.0
    follow_until: Instant = 0.0
    min_reached_at: Instant | None = None
    arrivals: int = 0
    pending: tuple[int, ...] | None = None
    declared_dead: tuple[str, ...] = ()
    liveness: LivenessTracker = LivenessTracker()
    draft: RoundResult | None = None
    result: RoundResult | None = None
    failure: str = ""
    # A retried join: the slot it held in ``round_no`` before the store was lost (None: unknown).
    arrived_slot: int | None = None
    # Whether this join may still take up a place it already holds instead of arriving anew
    # (see resuming.finds_member). Reset after one look, so a join never loops between resuming
    # and locating.
    may_resume: bool = False
    # The adapter's word that this node's heartbeats kept landing, so no peer can have found it
    # dead: only then may it take up its place in a world that is still training.
    heartbeats_held: bool = True
    # When this closer first found a counted arrival's slot unwritten (None: not yet). A node
    # writes its slot right after counting itself, so the closer waits for it (up to the
    # heartbeat timeout: longer means it died in between) rather than leave a live node out.
    unwritten_since: Instant | None = None
    # The proposal of this round this survivor confirmed (see reform.py), for the last one to
    # build the round from.
    proposal: ProposalRecord | None = None
    # When a closer that found this round proposed stops waiting for the survivors' result and
    # publishes the round void (None: it has not seen the proposal yet).
    void_at: Instant | None = None
    # The read in flight is of the proposed round's small ``formed`` record, not its result.
    reading_digest: bool = False

    @property
    def is_closer(self) -> bool:
        return self.slot == 0


@frozen(kw_only=True)
class JoinRequested:
    """Event: the agent asks to join. ``from_round`` is the round it was in, if any.

    A join retried after the store was lost says what it knows of the join it lost (see
    :func:`retry_request`): ``arrived_round`` (the round where it took, or may have taken, a
    slot), ``arrived_slot`` (that slot, when the store's reply came back), ``deadline`` (the lost
    join's, which the retry keeps) and ``heartbeats_held`` (False when its heartbeats may have
    failed long enough for a peer to find it dead).

    ``attempt`` is the highest in-place attempt of ``from_round`` this node ran or saw opened
    (0: none). It registers as the node's ``prev_attempt`` when it is a member of that round, so
    the next round's restart count includes the attempts spent in it.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    run_id: str
    node: str
    now: Instant
    addr: str = ""
    from_round: int | None = None
    reason: str = field(default="first", validator=_reason)
    arrived_round: int | None = None
    arrived_slot: int | None = None
    deadline: Instant | None = None
    heartbeats_held: bool = True
    attempt: int = field(default=0, validator=_nonneg)
    # The result of ``from_round`` this node holds (it completed with it), which a survivor
    # then need not read again; None: read it from the store.
    held: RoundResult | None = None


# Phases in which a join holds no slot yet: a retry from there simply joins again.
_NOT_ARRIVED = frozenset(
    {JoinPhase.IDLE, JoinPhase.REFORMING, JoinPhase.LOCATING, JoinPhase.PROBING}
)


def worth_retrying(
    lost: JoinState, *, retried: bool, next_try: Instant, waited_out: bool = False
) -> bool:
    """Is a join whose store went away worth retrying at ``next_try``?

    Yes while it holds a place worth taking up (it arrived in a round, or is already a retry
    of one) and its own deadline is not reached; a store unreachable from the first call is
    reported at once (the caller's store client has already waited out the outage). A loss
    the store client ``waited_out`` as long as its outage policy allows is final
    (specs/store_outage.md O8): retrying it up to the join deadline would only hide it.
    """
    if waited_out:
        return False
    if lost.phase is JoinPhase.IDLE or lost.phase in TERMINAL or next_try >= lost.deadline:
        return False
    return lost.phase not in _NOT_ARRIVED or retried


def retry_request(lost: JoinState, *, now: Instant, heartbeats_held: bool = True) -> JoinRequested:
    """The event that retries ``lost``, a join whose store went away before it finished.

    Carries what the node knows: the round it arrived in and its slot there (a resumed
    ``RESUMING`` join passes on the ones it was given), its reason, the round it came from (and
    the in-place attempt of it, kept as ``lost.node.prev_attempt``), and the lost join's
    deadline.

    Raises:
        ValueError: ``lost`` never started or already ended (nothing to retry).
    """
    if lost.phase is JoinPhase.IDLE or lost.phase in TERMINAL:
        raise ValueError(f"a join in phase {lost.phase.name} cannot be retried")
    arrived = lost.phase not in _NOT_ARRIVED
    slot = lost.arrived_slot if lost.phase is JoinPhase.RESUMING else lost.slot
    return JoinRequested(
        run_id=lost.keys.run_id,
        node=lost.node.node,
        now=now,
        addr=lost.node.addr,
        from_round=lost.from_round,
        reason=lost.reason,
        arrived_round=lost.round_no if arrived else None,
        arrived_slot=slot if arrived else None,
        deadline=lost.deadline,
        heartbeats_held=heartbeats_held,
        attempt=lost.node.prev_attempt,
    )
