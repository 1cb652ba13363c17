"""The end of a run: the exit barrier every node of a round waits at, and departing.

Moved out of the run loop so that it stays one screenful per job; the behaviour is the loop's
(see specs/agent.md: ``EnterExitBarrier`` and the exit codes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpelastic.adapters.agent.membership import Membership, wait_counter
from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.core import agent as core

DEPART_WAIT = 10.0  # how long a finished node keeps the store up for peers still closing


def exit_barrier(
    membership: Membership,
    round_no: int,
    *,
    timeout: float,
    poll: float,
    look: Callable[[float], Any | None],
    clock: Clock = SYSTEM_CLOCK,
) -> Any:
    """Arrive at round ``round_no``'s exit barrier and wait for every node of the round.

    ``look(now)`` is asked between polls for anything that ends the wait early (a close, a
    newer round).

    Returns:
        The observation for the agent machine: ``ExitBarrierPassed``, ``ExitBarrierTimedOut``
        after ``timeout`` seconds, what ``look`` saw, or ``RendezvousFailed`` when the store
        went away (our workers did succeed).
    """
    joined = membership.joined
    assert joined is not None
    store, world = joined.store, joined.facts.group_world_size
    key = f"agent/exit/{round_no}/arrived"
    deadline = clock.deadline(timeout)
    try:
        store.add(key, 1)
        while not wait_counter(store, key, world, clock.now(), poll, clock):
            now = clock.now()
            seen = look(now)
            if seen is not None:
                return seen
            if now >= deadline:
                return core.ExitBarrierTimedOut(now=now)
            clock.sleep(poll)
    except Exception as error:  # the store went away under us: our workers did succeed
        now = clock.now()
        return core.RendezvousFailed(now=now, reason=str(error), kind="connection")
    return core.ExitBarrierPassed(now=clock.now())


def depart(membership: Membership, timeout: float, clock: Clock = SYSTEM_CLOCK) -> None:
    """Say this node is done (the job succeeded, or failed for everyone); the store's host
    stays up (at most ``timeout`` s, capped at :data:`DEPART_WAIT`) until every peer of the
    current attempt has said so, so a peer still learns how the job ended. Never raises."""
    joined = membership.joined
    if joined is None:
        # No world to count departures in (the job ended in its first join): the host keeps
        # its store up until the peers, who may be reading the close, have disconnected.
        if membership.hosts_store:
            membership.wait_until_alone(min(DEPART_WAIT, timeout))
        return
    key = f"agent/exit/{joined.facts.round}/departed"
    try:
        joined.store.add(key, 1)
        if not membership.hosts_store:
            return
        deadline = clock.deadline(min(DEPART_WAIT, timeout))
        wait_counter(joined.store, key, joined.facts.group_world_size, deadline, 0.02, clock)
    except Exception:  # a peer that hosted the store is gone: nothing left to wait for
        pass


__all__ = ["DEPART_WAIT", "depart", "exit_barrier"]
