"""The restart budget: how many restarts the *job* has used, and whether one more is allowed.

The budget is a job-wide fact, not a per-agent counter. Each completed rendezvous round carries
``restart_count``, computed once by the node that closes the round::

    restart_count(next round) = restart_count(previous round) + (1 if any node reported a worker
                                                                  failure for the next round else 0)

so every node of a round agrees on it, and a round spends at most one unit however many nodes
failed at once (:func:`next_restart_count`). A failure with budget left and no membership change
restarts the round's workers *in place* instead: attempt ``n`` of a round runs with the count
``restart_count(round) + n``, and the next round's closer carries the highest attempt its members
report into the new round's count (:func:`round_restart_count`; specs/rendezvous_join.md, R16),
so attempts are spent job-wide like rounds. A membership change (a node joins, leaves or dies)
forms a new round without spending anything. A job with ``max_restarts = k`` therefore runs at most
``k + 1`` attempts (:func:`attempts_allowed`): the first one plus ``k`` restarts.

Every transition of the budget view is in :data:`TABLE`; it is what one node knows of the job's
budget, fed with the rounds it takes part in and the failures it sees.
"""

from __future__ import annotations

import enum

from attrs import evolve, field, frozen, validators

# The count arithmetic lives in its own module so the launch path can skip this one's table.
from tpelastic.core.restart_count import (
    attempts_allowed,
    can_restart,
    next_restart_count,
    round_restart_count,
)
from tpelastic.core.table import Row, Step, build_table
from tpelastic.core.values import Instant, value_eq, value_hash, value_repr


class BudgetPhase(enum.Enum):
    AVAILABLE = "AVAILABLE"  # restart_count < max_restarts: a failure can still be retried
    EXHAUSTED = "EXHAUSTED"  # restart_count == max_restarts: the next failure ends the job


@frozen(kw_only=True)
class BudgetConfig:
    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    max_restarts: int = field(validator=validators.ge(0))


@frozen(kw_only=True)
class BudgetState:
    """One node's view of the job's budget."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: BudgetPhase = BudgetPhase.AVAILABLE
    # The count of the last round this node took part in; never decreases.
    restart_count: int = field(default=0, validator=validators.ge(0))
    # True between this node reporting a failure and the next round it takes part in.
    failure_pending: bool = False


def initial_state(config: BudgetConfig) -> BudgetState:
    """A node's view before its first round (a job with ``max_restarts == 0`` starts exhausted)."""
    phase = BudgetPhase.AVAILABLE if can_restart(0, config.max_restarts) else BudgetPhase.EXHAUSTED
    return BudgetState(phase=phase)


# -- events ------------------------------------------------------------------------------------


@frozen(kw_only=True)
class RoundAgreed:
    """A rendezvous round this node is part of completed with this job-wide restart count."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    restart_count: int = field(validator=validators.ge(0))


@frozen(kw_only=True)
class FailureReported:
    """A worker failure on this node asks for a restart."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class MembershipChanged:
    """A node joined, left or died: the world re-forms without spending budget."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    reason: str = "membership"


BudgetEventT = RoundAgreed | FailureReported | MembershipChanged

# -- effects -----------------------------------------------------------------------------------


@frozen(kw_only=True)
class RequestRestart:
    """Effect: rejoin the rendezvous reporting a failure (the next round spends one unit)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    restart_count: int  # the count the failed attempt ran with


@frozen(kw_only=True)
class RequestRerendezvous:
    """Effect: rejoin the rendezvous without reporting a failure (nothing is spent)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    reason: str


@frozen(kw_only=True)
class FailJob:
    """Effect: the job cannot restart again and must fail."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    reason: str
    restart_count: int


# -- guards ------------------------------------------------------------------------------------


def _consistent(state: BudgetState, event: RoundAgreed, config: BudgetConfig) -> bool:
    # Counts never go backwards, never pass the budget, and a round after our own failure report
    # must have spent a unit on it.
    floor = state.restart_count + (1 if state.failure_pending else 0)
    return floor <= event.restart_count <= config.max_restarts


def leaves_budget(state: BudgetState, event: RoundAgreed, config: BudgetConfig) -> bool:
    """Is the agreed count consistent and still below max_restarts?"""
    return _consistent(state, event, config) and event.restart_count < config.max_restarts


def uses_last_restart(state: BudgetState, event: RoundAgreed, config: BudgetConfig) -> bool:
    """Is the agreed count consistent and equal to max_restarts?"""
    return _consistent(state, event, config) and event.restart_count == config.max_restarts


def count_unchanged(state: BudgetState, event: RoundAgreed, config: BudgetConfig) -> bool:
    """Is the agreed count the one already known, with no failure of ours pending?"""
    return not state.failure_pending and event.restart_count == state.restart_count


# -- actions -----------------------------------------------------------------------------------

Out = tuple[BudgetState, tuple[object, ...]]


def adopt_count(state: BudgetState, event: RoundAgreed, config: BudgetConfig) -> Out:
    return evolve(state, restart_count=event.restart_count, failure_pending=False), ()


def request_restart(state: BudgetState, event: FailureReported, config: BudgetConfig) -> Out:
    effect = RequestRestart(restart_count=state.restart_count)
    return evolve(state, failure_pending=True), (effect,)


def fail_job(state: BudgetState, event: FailureReported, config: BudgetConfig) -> Out:
    return state, (FailJob(reason="budget exhausted", restart_count=state.restart_count),)


def rerendezvous(state: BudgetState, event: MembershipChanged, config: BudgetConfig) -> Out:
    return state, (RequestRerendezvous(reason=event.reason),)


B = BudgetPhase
# Rows are grouped by event, then by source phase: the order the exported table shows them in.
ROWS = (
    Row(
        src=B.AVAILABLE,
        on=RoundAgreed,
        dst=B.AVAILABLE,
        guard="leaves_budget",
        action="adopt_count",
    ),
    Row(
        src=B.AVAILABLE,
        on=RoundAgreed,
        dst=B.EXHAUSTED,
        guard="uses_last_restart",
        action="adopt_count",
        note="the restart this round runs is the last one allowed",
    ),
    Row(
        src=B.EXHAUSTED,
        on=RoundAgreed,
        dst=B.EXHAUSTED,
        guard="count_unchanged",
        action="adopt_count",
        note="a membership round after the budget ran out spends nothing",
    ),
    Row(
        src=B.AVAILABLE,
        on=FailureReported,
        dst=B.AVAILABLE,
        action="request_restart",
        note="one unit is spent when the next round's closer counts the report",
    ),
    Row(src=B.EXHAUSTED, on=FailureReported, dst=B.EXHAUSTED, action="fail_job"),
    Row(src=B.AVAILABLE, on=MembershipChanged, dst=B.AVAILABLE, action="rerendezvous"),
    Row(src=B.EXHAUSTED, on=MembershipChanged, dst=B.EXHAUSTED, action="rerendezvous"),
)

TABLE = build_table(
    name="restart_budget",
    phases=BudgetPhase,
    initial=B.AVAILABLE,
    events=(RoundAgreed, FailureReported, MembershipChanged),
    rows=ROWS,
    guards={
        "leaves_budget": leaves_budget,
        "uses_last_restart": uses_last_restart,
        "count_unchanged": count_unchanged,
    },
    actions={
        "adopt_count": adopt_count,
        "request_restart": request_restart,
        "fail_job": fail_job,
        "rerendezvous": rerendezvous,
    },
    doc=(
        "Every transition of one node's view of the job-wide restart budget is in this table; "
        "guards and actions live in `tpelastic/core/restart_budget.py`. The restart count is "
        "agreed per rendezvous round (the round's closer computes it with `next_restart_count`: "
        "at most one unit per round), so all nodes of a round hold the same count. A worker "
        "failure asks for a restart while `restart_count < max_restarts` and fails the job "
        "otherwise; a membership change re-forms the world and spends nothing. A job with "
        "`max_restarts = k` makes at most `k + 1` attempts. A job with `max_restarts = 0` starts "
        "`EXHAUSTED` (see `initial_state`)."
    ),
)


def step(state: BudgetState, event: BudgetEventT, config: BudgetConfig) -> Step[BudgetState]:
    """Apply one observation to this node's budget view.

    Returns:
        The next view and its effects (``RequestRestart``, ``RequestRerendezvous`` or
        ``FailJob``). A round whose count is inconsistent (lower than known, above the budget, or
        not counting our own reported failure) is rejected: state unchanged, one ``Rejected``.
    """
    return TABLE.step(state, event, config)


__all__ = [
    "TABLE",
    "BudgetConfig",
    "BudgetPhase",
    "BudgetState",
    "FailJob",
    "FailureReported",
    "MembershipChanged",
    "RequestRerendezvous",
    "RequestRestart",
    "RoundAgreed",
    "attempts_allowed",
    "can_restart",
    "initial_state",
    "next_restart_count",
    "round_restart_count",
    "step",
]
