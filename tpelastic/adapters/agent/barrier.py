"""The end of a run: the exit barrier every node of a round meets at, and departing.

The barrier is a counter in the round's (or in-place attempt's) store. ``EnterExitBarrier``
adds this node to it (:func:`arrive`); the run loop then reads it (:func:`arrived`) as an
observation, ``ExitBarrierRead``, every poll while the agent is at the barrier. Whether the
world is all there, or the wait is over, is the core's decision (specs/agent.md).
"""

from __future__ import annotations

from collections.abc import Callable

from tpelastic.adapters.agent.membership import Membership, counter_value, wait_counter
from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.rendezvous.errors import RendezvousConnectionError

DEPART_WAIT = 10.0  # how long a finished node keeps the store up for peers still closing
_STOP_CHECK = 0.1  # how often the wait for the peers' disconnect checks for a stop signal


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
    timeout: float,
    clock: Clock = SYSTEM_CLOCK,
    *,
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """Say this node is done (the job succeeded, or failed for everyone); the store's host
    stays up (at most ``timeout`` s, capped at :data:`DEPART_WAIT`, and not once ``stopped()``:
    a stop signal came) until every peer of the current attempt has said so, so a peer still
    learns how the job ended. Never raises."""
    joined = membership.joined
    wait = min(DEPART_WAIT, timeout)
    if joined is None:
        # No world to count departures in (the job ended in its first join): the host keeps
        # its store up until the peers, who may be reading the close, have disconnected.
        if membership.hosts_store:
            deadline = clock.deadline(wait)
            while not stopped() and clock.remaining(deadline) > 0:
                if membership.wait_until_alone(min(_STOP_CHECK, clock.remaining(deadline))):
                    return
        return
    key = f"agent/exit/{joined.facts.round}/departed"
    try:
        joined.store.add(key, 1)
        if not membership.hosts_store:
            return
        deadline = clock.deadline(wait)
        world = joined.facts.group_world_size
        wait_counter(joined.store, key, world, deadline, 0.02, clock, stopped=stopped)
    except Exception:  # a peer that hosted the store is gone: nothing left to wait for
        pass


__all__ = ["DEPART_WAIT", "arrive", "arrived", "depart"]
