"""The end of a run: the exit barrier every node of a round meets at, and departing.

The barrier is a counter in the round's (or in-place attempt's) store. ``EnterExitBarrier``
adds this node to it (:func:`arrive`); the run loop then reads it (:func:`arrived`) as an
observation, ``ExitBarrierRead``, every poll while the agent is at the barrier. Whether the
world is all there, or the wait is over, is the core's decision (specs/agent.md).

Departing (:func:`depart`, once the agent is terminal) is the core's departure table
(specs/departure.md): whether this node says it is done, whether the store's host then waits
for its peers, and until when; this module carries out its effects, one slice at a time.
"""

from __future__ import annotations

from collections.abc import Callable

from tpelastic.adapters.agent.membership import Joined, Membership, counter_value
from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.rendezvous.errors import RendezvousConnectionError
from tpelastic.core.agent import departure as dp
from tpelastic.core.agent.departure import departure_config

_STOP_CHECK = 0.1  # how often a pause between counter reads checks for a stop signal


def _arrived_key(round_no: int) -> str:
    return f"agent/exit/{round_no}/arrived"


def arrive(membership: Membership, round_no: int) -> None:
    """Add this node to round ``round_no``'s exit barrier (in the current attempt's store).

    Raises:
        RendezvousConnectionError: the store could not be reached.
    """
    joined = membership.joined
    assert joined is not None
    try:
        joined.store.add(_arrived_key(round_no), 1)
    except Exception as error:
        raise RendezvousConnectionError(f"arriving at the exit barrier: {error}") from error


def arrived(membership: Membership, round_no: int) -> int:
    """How many nodes have arrived at round ``round_no``'s exit barrier.

    Raises:
        RendezvousConnectionError: the store could not be reached.
        RendezvousStateError: the counter is not a decimal number.
    """
    joined = membership.joined
    assert joined is not None
    key = _arrived_key(round_no)
    try:
        blob = joined.store.get(key)
    except Exception as error:
        raise RendezvousConnectionError(f"reading {key!r}: {error}") from error
    return counter_value(blob, 0)


def depart(
    membership: Membership,
    exit_code: int,
    exit_barrier_timeout: float,
    clock: Clock = SYSTEM_CLOCK,
    *,
    stopped: Callable[[], bool] = lambda: False,
) -> str:
    """Carry out the finished agent's departure (``core/agent/departure.py`` decides who waits,
    for what and how long): say this node is done, and on the store's host wait in slices
    for the peers. Returns why the departure ended. Never raises."""
    joined = membership.joined
    config = departure_config(exit_barrier_timeout)
    state = dp.DepartureState()
    world = joined.facts.group_world_size if joined is not None else None
    key = f"agent/exit/{joined.facts.round}/departed" if joined is not None else ""
    event: object = dp.DepartureStarted(
        now=clock.now(), exit_code=exit_code, hosts_store=membership.hosts_store, world=world
    )
    while True:
        done = dp.step(state, event, config)
        state = done.state
        if state.phase in dp.TERMINAL:
            return state.reason
        (effect,) = done.effects  # every live row orders exactly one thing
        if stopped():
            event = dp.DepartStopped(now=clock.now())
            continue
        event = _carry_out(effect, joined, key, membership, clock, stopped)


def _carry_out(
    effect: object,
    joined: Joined | None,
    key: str,
    membership: Membership,
    clock: Clock,
    stopped: Callable[[], bool],
) -> object:
    """One effect of the departure, and what came of it (the next observation)."""
    if isinstance(effect, dp.AwaitAlone):
        alone = membership.wait_until_alone(max(0.0, clock.remaining(effect.until)))
        return dp.PeersRead(now=clock.now(), alone=alone)
    assert joined is not None
    if isinstance(effect, dp.ReadDeparted):
        while not stopped() and clock.remaining(effect.at) > 0:
            clock.sleep(min(_STOP_CHECK, clock.remaining(effect.at)))
        if stopped():
            return dp.DepartStopped(now=clock.now())
    try:
        if isinstance(effect, dp.MarkDeparted):
            count = int(joined.store.add(key, 1))
        else:
            count = counter_value(joined.store.get(key), 0)
    except Exception as error:  # a peer that hosted the store is gone: nothing to wait for
        return dp.DepartFailed(now=clock.now(), reason=str(error) or type(error).__name__)
    return dp.DepartedRead(now=clock.now(), departed=count)


__all__ = ["arrive", "arrived", "depart"]
