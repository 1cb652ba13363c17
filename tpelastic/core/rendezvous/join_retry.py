"""Every transition of retrying a join whose store went away is in this table.

A join can lose the store after its node arrived in a round; the round may then complete with
it while the store is away. The join is retried, ``delay`` seconds later, while it is worth
retrying (``state.worth_retrying``: it holds a place worth taking up, its own deadline is not
reached, and the store client did not already wait the outage out as long as its policy
allows), with what the node knows of the join it lost (``state.retry_request``: its round, its
slot, its deadline, and whether its own heartbeats held meanwhile). A join that could not reach
the store before it arrived is reported at once, unless it is already a retry.

Pure: the driver feeds ``JoinLost`` when the store fails under a join and ``RetryDue`` when the
delay is over; it carries out ``RetryAt`` (sleep until then), ``Rejoin`` (run the join machine
from that request) and ``GiveUp`` (report the store's error).
"""

from __future__ import annotations

import enum

from attrs import evolve, field, frozen

from tpelastic.core.rendezvous.state import JoinRequested, JoinState, retry_request, worth_retrying
from tpelastic.core.table import Action, Guard, Row, Step, build_table
from tpelastic.core.values import Duration, Instant, _positive, value_eq, value_hash, value_repr


class RetryPhase(enum.Enum):
    JOINING = "joining"  # a join (the first, or a retry) runs
    WAITING = "waiting"  # the retry is due at ``due``
    GAVE_UP = "gave_up"


@frozen(kw_only=True)
class JoinRetryConfig:
    """``delay``: how long after losing the store the join is retried."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    delay: Duration = field(default=1.0, validator=_positive)


@frozen(kw_only=True)
class RetryState:
    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: RetryPhase = RetryPhase.JOINING
    retried: bool = False  # the running join is a retry
    lost: JoinState | None = None  # the join the store failed under, while the retry waits


@frozen(kw_only=True)
class JoinLost:
    """The store failed under a join in ``state``; ``waited_out``: the store client already
    waited the outage out as long as its policy allows."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    state: JoinState
    waited_out: bool = False


@frozen(kw_only=True)
class RetryDue:
    """The retry's delay is over; ``heartbeats_held``: the node's heartbeats kept landing."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    heartbeats_held: bool = True


@frozen(kw_only=True)
class RetryAt:
    """Effect: the join is retried at ``at`` (this node's clock)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    at: Instant


@frozen(kw_only=True)
class Rejoin:
    """Effect: run the join machine from ``request`` (it takes up the place the node holds)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    request: JoinRequested


@frozen(kw_only=True)
class GiveUp:
    """Effect (outcome): the store's error is the join's end."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash


def worth_it(state: RetryState, event: JoinLost, config: JoinRetryConfig) -> bool:
    """``state.worth_retrying`` at the instant the retry would run."""
    return worth_retrying(
        event.state,
        retried=state.retried,
        next_try=event.now + config.delay,
        waited_out=event.waited_out,
    )


def not_worth_it(state: RetryState, event: JoinLost, config: JoinRetryConfig) -> bool:
    """Not :func:`worth_it`."""
    return not worth_it(state, event, config)


Out = tuple[RetryState, tuple[object, ...]]


def wait(state: RetryState, event: JoinLost, config: JoinRetryConfig) -> Out:
    return evolve(state, lost=event.state), (RetryAt(at=event.now + config.delay),)


def give_up(state: RetryState, event: JoinLost, config: JoinRetryConfig) -> Out:
    return evolve(state, lost=None), (GiveUp(),)


def rejoin(state: RetryState, event: RetryDue, config: JoinRetryConfig) -> Out:
    assert state.lost is not None
    request = retry_request(state.lost, now=event.now, heartbeats_held=event.heartbeats_held)
    return evolve(state, retried=True, lost=None), (Rejoin(request=request),)


P = RetryPhase
ROWS = (
    Row(src=P.JOINING, on=JoinLost, dst=P.WAITING, guard="worth_it", action="wait"),
    Row(
        src=P.JOINING,
        on=JoinLost,
        dst=P.GAVE_UP,
        guard="not_worth_it",
        action="give_up",
        note="no place to take up, past its deadline, or the outage already waited out",
    ),
    Row(src=P.WAITING, on=RetryDue, dst=P.JOINING, action="rejoin"),
)
GUARDS: dict[str, Guard] = {"worth_it": worth_it, "not_worth_it": not_worth_it}
ACTIONS: dict[str, Action] = {"wait": wait, "give_up": give_up, "rejoin": rejoin}
TABLE = build_table(
    name="join_retry",
    phases=RetryPhase,
    initial=P.JOINING,
    events=(JoinLost, RetryDue),
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    terminal=frozenset({P.GAVE_UP}),
    doc=__doc__ or "",
)


def step(state: RetryState, event: object, config: JoinRetryConfig) -> Step[RetryState]:
    """Apply one event to a join's retry (unknown pairs are rejected cleanly)."""
    return TABLE.step(state, event, config)


__all__ = [
    "TABLE",
    "GiveUp",
    "JoinLost",
    "JoinRetryConfig",
    "Rejoin",
    "RetryAt",
    "RetryDue",
    "RetryPhase",
    "RetryState",
    "step",
]
