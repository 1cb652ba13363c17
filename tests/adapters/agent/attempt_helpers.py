"""Entering an in-place attempt the way the run loop does: its endpoint wait stepped to the end."""

from __future__ import annotations

from typing import Any

from tpelastic.adapters.agent.in_place import EndpointWait, Look
from tpelastic.adapters.agent.membership import Membership
from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.core import agent as core


def never(now: float) -> None:
    """A look that never has news."""
    return None


def enter(m: Membership, attempt: int, count: int, look: Look = never) -> Any:
    """Move ``m`` to ``attempt`` and step its endpoint wait, one slice a pass, as the loop does.

    Returns:
        The attempt's ``Joined``; the look's news, or ``RendezvousFailed`` (timeout).
    """
    joined = m.enter_attempt(attempt)
    if joined is not None:
        return joined
    assert m.joined is not None
    facts = m.joined.facts
    effect = core.StartWorkers(
        round=facts.round,
        group_rank=facts.group_rank,
        group_world_size=facts.group_world_size,
        restart_count=count,
        local_world_size=1,
        attempt=attempt,
    )
    wait = EndpointWait(m, effect, SYSTEM_CLOCK, m.bootstrap_timeout)
    while (outcome := wait.step(look)) is None:
        pass
    return outcome
