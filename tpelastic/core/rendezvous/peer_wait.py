"""Every transition of a bounded wait for what a peer publishes is in this table.

A member of an in-place attempt waits for rank 0's bootstrap endpoint of that attempt (rank 0
publishes at once; the others wait). Waiting is bounded twice: in all by the wait's own
``timeout`` (the bootstrap timeout), and in slices of ``look_every`` seconds, after each of
which the member looks at the rendezvous, because what ends the wait otherwise is only seen by
a look: rank 0 found dead (the next round opened), a newer attempt, the close; the wait never
times out without a last look at its deadline. The membership
machine decides whether a look has news (``tpelastic.core.node.has_news``); the adapter answers
with that verdict.

Pure: the adapter carries out ``AwaitPeer`` (try to get the peer's answer until an instant of
its own clock; rank 0's own publish answers at once) and ``LookDue`` (one look), and feeds back
what happened; the outcome is ``PeerAnswered``, ``WaitInterrupted`` (the look's observation
goes to the node step instead) or ``PeerWaitFailed`` (timeout).
"""

from __future__ import annotations

import enum

from attrs import evolve, field, frozen, validators

from tpelastic.core.table import Action, Guard, Row, Step, build_table
from tpelastic.core.values import Duration, Instant, _positive, value_eq, value_hash, value_repr


class WaitPhase(enum.Enum):
    IDLE = "idle"
    WAITING = "waiting"  # a slice of waiting for the peer is out
    LOOKING = "looking"  # a look at the rendezvous is out
    ANSWERED = "answered"
    INTERRUPTED = "interrupted"
    TIMED_OUT = "timed_out"


TERMINAL = frozenset({WaitPhase.ANSWERED, WaitPhase.INTERRUPTED, WaitPhase.TIMED_OUT})


@frozen(kw_only=True)
class PeerWaitConfig:
    """``timeout``: the whole wait; ``look_every``: the slice after which the member looks."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    timeout: Duration = field(validator=_positive)
    look_every: Duration = field(default=0.5, validator=_positive)


@frozen(kw_only=True)
class PeerWaitState:
    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: WaitPhase = WaitPhase.IDLE
    what: str = ""  # what is waited for, for the timeout's line
    deadline: Instant = 0.0
    looks: int = field(default=0, validator=validators.ge(0))


# -- events ------------------------------------------------------------------------------------


@frozen(kw_only=True)
class PeerWaitRequested:
    """Start waiting for ``what`` (e.g. rank 0's endpoint of round 3 attempt 1)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    what: str


@frozen(kw_only=True)
class PeerAnswer:
    """The peer's answer arrived (the adapter decoded and validated it)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class PeerSilent:
    """The slice ended without the peer's answer."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class LookAnswered:
    """The look is done; ``news``: what it saw reaches the node's agent (it ends the wait)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    news: bool


WAIT_EVENTS: tuple[type, ...] = (PeerWaitRequested, PeerAnswer, PeerSilent, LookAnswered)


# -- effects -----------------------------------------------------------------------------------


@frozen(kw_only=True)
class AwaitPeer:
    """Effect: try to get the peer's answer until ``until`` (this node's clock)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    until: Instant


@frozen(kw_only=True)
class LookDue:
    """Effect: look at the rendezvous once and say whether it has news."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash


@frozen(kw_only=True)
class PeerAnswered:
    """Outcome: the peer's answer is in."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash


@frozen(kw_only=True)
class WaitInterrupted:
    """Outcome: a look's news ends the wait; that observation goes to the node step next."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash


@frozen(kw_only=True)
class PeerWaitFailed:
    """Outcome: nothing came within the timeout (``kind`` is ``timeout``)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    kind: str
    reason: str


# -- guards ------------------------------------------------------------------------------------


def news(state: PeerWaitState, event: LookAnswered, config: PeerWaitConfig) -> bool:
    """The look saw something for the agent."""
    return event.news


def time_left(state: PeerWaitState, event: LookAnswered, config: PeerWaitConfig) -> bool:
    """The look saw nothing for the agent, and the wait's deadline is ahead."""
    return not event.news and event.now < state.deadline


def time_up(state: PeerWaitState, event: LookAnswered, config: PeerWaitConfig) -> bool:
    """The look saw nothing for the agent, and the wait's deadline has passed."""
    return not event.news and event.now >= state.deadline


# -- actions -----------------------------------------------------------------------------------

Out = tuple[PeerWaitState, tuple[object, ...]]


def _slice(state: PeerWaitState, now: Instant, config: PeerWaitConfig) -> AwaitPeer:
    return AwaitPeer(until=min(state.deadline, now + config.look_every))


def start(state: PeerWaitState, event: PeerWaitRequested, config: PeerWaitConfig) -> Out:
    new = evolve(state, what=event.what, deadline=event.now + config.timeout, looks=0)
    return new, (_slice(new, event.now, config),)


def answered(state: PeerWaitState, event: PeerAnswer, config: PeerWaitConfig) -> Out:
    return state, (PeerAnswered(),)


def look(state: PeerWaitState, event: PeerSilent, config: PeerWaitConfig) -> Out:
    return evolve(state, looks=state.looks + 1), (LookDue(),)


def time_out(state: PeerWaitState, event: LookAnswered, config: PeerWaitConfig) -> Out:
    reason = f"{state.what}: nothing within {config.timeout:g} s"
    return state, (PeerWaitFailed(kind="timeout", reason=reason),)


def interrupt(state: PeerWaitState, event: LookAnswered, config: PeerWaitConfig) -> Out:
    return state, (WaitInterrupted(),)


def wait_again(state: PeerWaitState, event: LookAnswered, config: PeerWaitConfig) -> Out:
    return state, (_slice(state, event.now, config),)


P = WaitPhase
ROWS = (
    Row(src=P.IDLE, on=PeerWaitRequested, dst=P.WAITING, action="start"),
    Row(src=P.WAITING, on=PeerAnswer, dst=P.ANSWERED, action="answered"),
    Row(
        src=P.WAITING,
        on=PeerSilent,
        dst=P.LOOKING,
        action="look",
        note="only a look sees what else ends the wait; the last one comes at the deadline",
    ),
    Row(src=P.LOOKING, on=LookAnswered, dst=P.INTERRUPTED, guard="news", action="interrupt"),
    Row(src=P.LOOKING, on=LookAnswered, dst=P.WAITING, guard="time_left", action="wait_again"),
    Row(
        src=P.LOOKING,
        on=LookAnswered,
        dst=P.TIMED_OUT,
        guard="time_up",
        action="time_out",
        note="never without a last look: news at the deadline is not a failure",
    ),
)
GUARDS: dict[str, Guard] = {
    "news": news,
    "time_left": time_left,
    "time_up": time_up,
}
ACTIONS: dict[str, Action] = {
    "start": start,
    "answered": answered,
    "look": look,
    "time_out": time_out,
    "interrupt": interrupt,
    "wait_again": wait_again,
}
TABLE = build_table(
    name="peer_wait",
    phases=WaitPhase,
    initial=P.IDLE,
    events=WAIT_EVENTS,
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    terminal=TERMINAL,
    doc=__doc__ or "",
)


def step(state: PeerWaitState, event: object, config: PeerWaitConfig) -> Step[PeerWaitState]:
    """Apply one event to a bounded wait (unknown pairs are rejected cleanly)."""
    return TABLE.step(state, event, config)


__all__ = [
    "TABLE",
    "TERMINAL",
    "WAIT_EVENTS",
    "AwaitPeer",
    "LookAnswered",
    "LookDue",
    "PeerAnswer",
    "PeerAnswered",
    "PeerSilent",
    "PeerWaitConfig",
    "PeerWaitFailed",
    "PeerWaitRequested",
    "PeerWaitState",
    "WaitInterrupted",
    "WaitPhase",
    "step",
]
