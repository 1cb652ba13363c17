"""What an agent observes (past tense, each at the observer's ``now``) and what it orders.

Effects are orders for the driver, carried out in the order a step lists them. The one rule that
matters: **StopWorkers always comes before JoinRendezvous or OpenNextRound in one step** (a node
fences its own workers before it takes part in a new world).
"""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen, validators

from tpelastic.core.values import Duration, Instant
from tpelastic.core.worker_group import WorkerFailure

Outcome = Literal["succeeded", "failed"]
RendezvousFailureKind = Literal["timeout", "closed", "connection"]

# -- events ------------------------------------------------------------------------------------


@frozen(kw_only=True)
class AgentStarted:
    now: Instant


@frozen(kw_only=True)
class RoundCompleted:
    """A rendezvous round this node joined completed; these are its facts for this node."""

    now: Instant
    round: int = field(validator=validators.ge(0))
    group_rank: int = field(validator=validators.ge(0))
    group_world_size: int = field(validator=validators.ge(1))
    restart_count: int = field(validator=validators.ge(0))


@frozen(kw_only=True)
class RendezvousFailed:
    """The world could not be formed."""

    now: Instant
    reason: str
    kind: RendezvousFailureKind = field(
        validator=validators.in_(("timeout", "closed", "connection"))
    )


@frozen(kw_only=True)
class WorkersSucceeded:
    """Every local worker of the current attempt exited with code 0."""

    now: Instant


@frozen(kw_only=True)
class WorkersFailed:
    """Local workers failed; ``failures`` is ordered earliest first (the root cause first)."""

    now: Instant
    failures: tuple[WorkerFailure, ...] = field(validator=validators.min_len(1))


@frozen(kw_only=True)
class WorkerStuck:
    """A local worker made no progress for ``idle_for`` seconds (a hang)."""

    now: Instant
    local_rank: int = field(validator=validators.ge(0))
    idle_for: Duration


@frozen(kw_only=True)
class NodesWaiting:
    """``count`` nodes are waiting to join the next round."""

    now: Instant
    count: int = field(validator=validators.ge(0))


@frozen(kw_only=True)
class NextRoundOpened:
    """A peer opened round ``round``: this node is fenced out of the world it is in."""

    now: Instant
    round: int = field(validator=validators.ge(0))
    reason: str


@frozen(kw_only=True)
class ExitBarrierPassed:
    """Every node of the round reached the exit barrier."""

    now: Instant


@frozen(kw_only=True)
class ExitBarrierTimedOut:
    """Not every node reached the exit barrier in time."""

    now: Instant


@frozen(kw_only=True)
class RendezvousClosed:
    """The rendezvous was closed (by any node) with this outcome: the job is over."""

    now: Instant
    outcome: Outcome = field(validator=validators.in_(("succeeded", "failed")))
    reason: str = ""


@frozen(kw_only=True)
class SignalReceived:
    """The agent process received a terminating signal."""

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
    | ExitBarrierPassed
    | ExitBarrierTimedOut
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
    ExitBarrierPassed,
    ExitBarrierTimedOut,
    RendezvousClosed,
    SignalReceived,
)

# -- effects -----------------------------------------------------------------------------------


@frozen(kw_only=True)
class JoinRendezvous:
    """Join the next round; ``failure`` reports a worker failure (the round spends one unit)."""

    failure: bool


@frozen(kw_only=True)
class StartWorkers:
    """Start the local workers for this round's world."""

    round: int
    group_rank: int
    group_world_size: int
    restart_count: int
    local_world_size: int


@frozen(kw_only=True)
class StopWorkers:
    """Stop every local worker that is still running (idempotent)."""

    reason: str


@frozen(kw_only=True)
class OpenNextRound:
    """Ask the rendezvous to open a new round after ``after_round`` (no budget is spent)."""

    reason: str
    after_round: int


@frozen(kw_only=True)
class EnterExitBarrier:
    """Wait at the exit barrier of ``round`` for the other nodes."""

    round: int


@frozen(kw_only=True)
class LeaveRendezvous:
    """Leave gracefully: the others see a membership change; the rendezvous stays open."""

    reason: str


@frozen(kw_only=True)
class CloseRendezvous:
    """Close the rendezvous for every node: the job is over with ``outcome``."""

    outcome: Outcome
    reason: str


@frozen(kw_only=True)
class ReportFailure:
    """Report why this agent failed; ``failures`` (earliest first) when workers failed."""

    reason: str
    exit_code: int
    failures: tuple[WorkerFailure, ...] = ()


__all__ = [
    "AGENT_EVENTS",
    "AgentEventT",
    "AgentStarted",
    "CloseRendezvous",
    "EnterExitBarrier",
    "ExitBarrierPassed",
    "ExitBarrierTimedOut",
    "JoinRendezvous",
    "LeaveRendezvous",
    "NextRoundOpened",
    "NodesWaiting",
    "OpenNextRound",
    "Outcome",
    "RendezvousClosed",
    "RendezvousFailed",
    "ReportFailure",
    "RoundCompleted",
    "SignalReceived",
    "StartWorkers",
    "StopWorkers",
    "WorkerStuck",
    "WorkersFailed",
    "WorkersSucceeded",
]
