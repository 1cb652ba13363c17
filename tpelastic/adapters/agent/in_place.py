"""Restarting a round in place: opening an attempt and entering one.

A worker failure with budget left, over a rendezvous that can restart a round in place (the
dynamic handler), makes the core order ``StopWorkers``, ``OpenAttempt(round, n)`` and
``StartWorkers(..., attempt=n)``; a member that sees attempt ``n`` opened gets ``StopWorkers``
and ``StartWorkers(..., attempt=n)``. Same members, ranks and world: each attempt only gets its
own store namespace, a fresh bootstrap endpoint (so nothing an earlier attempt left is read
again) and its own exit barrier. See specs/agent.md, "Restarting in place".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpelastic.adapters.agent import publish
from tpelastic.adapters.agent.membership import Joined, Membership
from tpelastic.adapters.agent.observers import Observers
from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.rendezvous import errors as rz
from tpelastic.core import agent as core
from tpelastic.core.agent.events import RendezvousFailureKind

if TYPE_CHECKING:
    from tpelastic.adapters.agent.pumps import Inbox

log = logging.getLogger("tpelastic.agent")  # report.log's logger, without importing report


class InPlaceEffects:
    """``OpenAttempt``, and entering an attempt before its ``StartWorkers`` starts workers.

    Args:
        look: one look at the rendezvous with the workers stopped (``look(now)``), for what
            ends the wait for rank 0's endpoint early.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        membership: Membership,
        observers: Observers,
        clock: Clock,
        inbox: Inbox,
        *,
        look: Callable[[float], Any | None],
    ) -> None:
        self._spec, self._membership, self._obs = spec, membership, observers
        self._clock, self._inbox, self._look = clock, inbox, look

    def open(self, effect: core.OpenAttempt) -> None:
        """Open the attempt for every member; a store error is a lost rendezvous (the step's
        StartWorkers then starts nothing: the failure is taken first)."""
        try:
            self._membership.open_attempt(effect.attempt, effect.reason)
        except rz.RendezvousError as error:
            why = f"could not open attempt {effect.attempt} of round {effect.round}: {error}"
            self._obs.rendezvous("failed", "FAILED", why)
            now = self._clock.now()
            self._inbox.put(core.RendezvousFailed(now=now, reason=why, kind="connection"))
            return
        log.warning(
            "round %d: restarting in place as attempt %d (%s)",
            effect.round,
            effect.attempt,
            effect.reason,
        )

    def enter(self, effect: core.StartWorkers) -> Joined | None:
        """Move to ``effect.attempt`` and agree on its endpoint. None when an effect's outcome is
        in the inbox instead (the attempt could not be opened, a newer round or attempt, a
        close, a lost store): the loop takes that first and starts no workers."""
        if self._inbox.holds_outcome():
            return None
        kind: RendezvousFailureKind = "connection"
        try:
            outcome = self._membership.start_attempt(
                effect.attempt, effect.restart_count, self._look
            )
        except rz.RendezvousError as error:
            if isinstance(error, rz.RendezvousTimeoutError):
                kind = "timeout"
            elif isinstance(error, rz.RendezvousStateError):
                kind = "corrupt"
            why = f"attempt {effect.attempt} of round {effect.round}: {error}"
            self._obs.rendezvous("failed", "FAILED", why)
            self._inbox.put(core.RendezvousFailed(now=self._clock.now(), reason=why, kind=kind))
            return None
        if not isinstance(outcome, Joined):
            self._inbox.put(outcome)
            return None
        publish.restarted_in_place(outcome.facts, self._spec.max_restarts)
        # One rdzv.attempt per node and attempt, opener and followers alike.
        self._obs.rendezvous(
            "attempt",
            "RUNNING",
            f"round {effect.round} attempt {effect.attempt}: restart count "
            f"{effect.restart_count}, master {outcome.facts.master_addr}:"
            f"{outcome.facts.master_port}",
        )
        return outcome


def attempt_name(round_no: int, attempt: int) -> str:
    """The workers' attempt label (log folders): ``r3`` for a round's first start, ``r3a2``
    for its in-place attempt 2."""
    return f"r{round_no}" if attempt == 0 else f"r{round_no}a{attempt}"


__all__ = ["InPlaceEffects", "attempt_name"]
