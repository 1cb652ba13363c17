"""What an agent observes (past tense, each at the observer's ``now``) and what it orders.

Effects are orders for the driver, carried out in the order a step lists them. The one rule that
matters: **StopWorkers always comes before JoinRendezvous, OpenNextRound, OpenAttempt or
StartWorkers in one step** (a node fences its own workers before it takes part in a new world
or starts a new attempt).
"""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen, validators

from tpelastic.core.group_values import WorkerFailure
from tpelastic.core.values import Duration, Instant, value_eq, value_hash, value_repr

Outcome = Literal["succeeded", "failed"]
# The reason a round is opened for when a member is gone (found dead, left, or fenced itself).
PEER_LOST = "membership"
RendezvousFailureKind = Literal["timeout", "closed", "connection", "corrupt"]

# -- events ------------------------------------------------------------------------------------


@frozen(kw_only=True)
class AgentStarted:
    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class RoundCompleted:
    """A rendezvous round this node joined completed; these are its facts for this node."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    round: int = field(validator=validators.ge(0))
    group_rank: int = field(validator=validators.ge(0))
    group_world_size: int = field(validator=validators.ge(1))
    restart_count: int = field(validator=validators.ge(0))
    # The round's in-place attempt the node comes into (fixed membership: the newest opened).
    attempt: int = field(default=0, validator=validators.ge(0))


@frozen(kw_only=True)
class RendezvousFailed:
    """The world could not be formed."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    reason: str
    kind: RendezvousFailureKind = field(
        validator=validators.in_(("timeout", "closed", "connection", "corrupt"))
    )


@frozen(kw_only=True)
class WorkersSucceeded:
    """Every local worker of the current attempt exited with code 0."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class WorkersFailed:
    """Local workers failed; ``failures`` is ordered earliest first (the root cause first)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    failures: tuple[WorkerFailure, ...] = field(validator=validators.min_len(1))


@frozen(kw_only=True)
class WorkerStuck:
    """A local worker made no progress for ``idle_for`` seconds (a hang). ``cause`` names the
    rank it waits for, when the observer found one (e.g. a peer that never reached the
    collective this worker waits in)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    local_rank: int = field(validator=validators.ge(0))
    idle_for: Duration
    cause: str = ""


@frozen(kw_only=True)
class NodesWaiting:
    """``count`` nodes are waiting to join the next round."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    count: int = field(validator=validators.ge(0))


@frozen(kw_only=True)
class NextRoundOpened:
    """A peer opened round ``round``: this node is fenced out of the world it is in.
    ``reason`` is the opener's: :data:`PEER_LOST` when a peer died, left or was fenced."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    round: int = field(validator=validators.ge(0))
    reason: str


@frozen(kw_only=True)
class AttemptOpened:
    """A member of round ``round`` (maybe this node) opened its in-place ``attempt``: every
    member restarts its workers for that attempt, keeping the round's ranks and world."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    round: int = field(validator=validators.ge(0))
    attempt: int = field(validator=validators.ge(1))
    reason: str


@frozen(kw_only=True)
class OwnAttemptOpened:
    """This node's own open of its round's in-place ``attempt`` landed in the store, and its
    keep-alive held when it did (the membership machine judged it): start the attempt's
    workers. The open is a store write that may wait out an outage longer than the heartbeat
    timeout, so the start is decided when it lands, not when the failure asked for it."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    round: int = field(validator=validators.ge(0))
    attempt: int = field(validator=validators.ge(1))


@frozen(kw_only=True)
class KeepAliveLapsed:
    """This node's heartbeats stopped landing long enough that a peer may find it dead (e.g.
    the process was paused, or the store stopped answering): its workers must not train on."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    reason: str


@frozen(kw_only=True)
class KeepAliveRestored:
    """A heartbeat of this fenced node landed again (the store answers it): it may re-join."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class TimePassed:
    """Nothing else happened by ``now`` (a held failure's window may be over)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class ExitBarrierRead:
    """``arrived`` nodes of the round have reached its exit barrier (the counter, decoded)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    arrived: int = field(validator=validators.ge(0))


@frozen(kw_only=True)
class RendezvousClosed:
    """The rendezvous was closed (by any node) with this outcome: the job is over."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    outcome: Outcome = field(validator=validators.in_(("succeeded", "failed")))
    reason: str = ""


@frozen(kw_only=True)
class SignalReceived:
    """The agent process received a terminating signal."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    signum: int = field(validator=[validators.ge(1), validators.le(127)])


AgentEventT = (
    AgentStarted
    | RoundCompleted
    | RendezvousFailed
    | WorkersSucceeded
    | WorkersFailed
    | WorkerStuck
    | NodesWaiting
    | NextRoundOpened
    | AttemptOpened
    | OwnAttemptOpened
    | KeepAliveLapsed
    | KeepAliveRestored
    | TimePassed
    | ExitBarrierRead
    | RendezvousClosed
    | SignalReceived
)
AGENT_EVENTS: tuple[type, ...] = (
    AgentStarted,
    RoundCompleted,
    RendezvousFailed,
    WorkersSucceeded,
    WorkersFailed,
    WorkerStuck,
    NodesWaiting,
    NextRoundOpened,
    AttemptOpened,
    OwnAttemptOpened,
    KeepAliveLapsed,
    KeepAliveRestored,
    TimePassed,
    ExitBarrierRead,
    RendezvousClosed,
    SignalReceived,
)

# -- effects -----------------------------------------------------------------------------------


@frozen(kw_only=True)
class JoinRendezvous:
    """Join the next round; ``failure`` reports a worker failure (the round spends one unit).

    ``charged_attempt``: the highest in-place attempt of the last round this join reports as
    spent, when a peer's loss refunded the newer ones; None: every attempt the node ran or saw
    opened (the rendezvous knows them).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    failure: bool
    charged_attempt: int | None = field(
        default=None, validator=validators.optional(validators.ge(0))
    )


@frozen(kw_only=True)
class StartWorkers:
    """Start the local workers for this round's world, as its in-place ``attempt`` (0: the
    round's first start; each attempt has its own namespace and bootstrap endpoint)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    round: int
    group_rank: int
    group_world_size: int
    restart_count: int
    local_world_size: int
    attempt: int = 0


@frozen(kw_only=True)
class StopWorkers:
    """Stop every local worker that is still running (idempotent)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    reason: str


@frozen(kw_only=True)
class OpenNextRound:
    """Ask the rendezvous to open a new round after ``after_round`` (no budget is spent)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    reason: str
    after_round: int


@frozen(kw_only=True)
class OpenAttempt:
    """Open in-place ``attempt`` of ``round`` for every member (first writer wins: a member
    opening the same attempt at once spends nothing more)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    round: int
    attempt: int
    reason: str


@frozen(kw_only=True)
class EnterExitBarrier:
    """Arrive at the exit barrier of ``round``; the driver then reads how many nodes arrived
    (``ExitBarrierRead``) until the agent leaves the barrier."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    round: int


@frozen(kw_only=True)
class LeaveRendezvous:
    """Leave gracefully: the others see a membership change; the rendezvous stays open."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    reason: str


@frozen(kw_only=True)
class CloseRendezvous:
    """Close the rendezvous for every node: the job is over with ``outcome``."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    outcome: Outcome
    reason: str


@frozen(kw_only=True)
class ReportFailure:
    """Report why this agent failed; ``failures`` (earliest first) when workers failed."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    reason: str
    exit_code: int
    failures: tuple[WorkerFailure, ...] = ()


AGENT_EFFECTS: tuple[type, ...] = (
    JoinRendezvous,
    StartWorkers,
    StopWorkers,
    OpenNextRound,
    OpenAttempt,
    EnterExitBarrier,
    LeaveRendezvous,
    CloseRendezvous,
    ReportFailure,
)
"""The agent's own effect types (its steps also return ``Emit`` and ``Rejected``)."""


__all__ = [
    "AGENT_EFFECTS",
    "AGENT_EVENTS",
    "AgentEventT",
    "AgentStarted",
    "AttemptOpened",
    "CloseRendezvous",
    "EnterExitBarrier",
    "ExitBarrierRead",
    "JoinRendezvous",
    "KeepAliveLapsed",
    "KeepAliveRestored",
    "LeaveRendezvous",
    "NextRoundOpened",
    "NodesWaiting",
    "OpenAttempt",
    "PEER_LOST",
    "OpenNextRound",
    "Outcome",
    "OwnAttemptOpened",
    "RendezvousClosed",
    "RendezvousFailed",
    "ReportFailure",
    "RoundCompleted",
    "SignalReceived",
    "StartWorkers",
    "StopWorkers",
    "TimePassed",
    "WorkerStuck",
    "WorkersFailed",
    "WorkersSucceeded",
]
