"""Restarting a round in place: opening an attempt and entering one.

A worker failure with budget left, over a rendezvous that can restart a round in place (the
dynamic handler), makes the core order ``StopWorkers`` and ``OpenAttempt(round, n)``; once the
open landed (``OpenLanded``, with the keep-alive then), ``StartWorkers(..., attempt=n)``; a
member that sees attempt ``n`` opened gets ``StopWorkers`` and ``StartWorkers(..., attempt=n)``.
Same members, ranks and world: each attempt only gets its own store namespace, a fresh bootstrap
endpoint (so nothing an earlier attempt left is read again) and its own exit barrier. See
specs/agent.md, "Restarting in place".

Entering an attempt does not wait inside its effect: ``StartWorkers`` moves to the attempt and
leaves an :class:`EndpointWait`, which the run loop steps one slice per pass (the core's
bounded wait, ``core/rendezvous/peer_wait.py``) until rank 0's endpoint is in and the workers
start, or a look's news or the core's timeout ends it.
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
from tpelastic.core import membership as members
from tpelastic.core.agent.events import RendezvousFailureKind
from tpelastic.core.rendezvous import peer_wait

if TYPE_CHECKING:
    from tpelastic.adapters.agent.pumps import Inbox

log = logging.getLogger("tpelastic.agent")  # report.log's logger, without importing report

Look = Callable[[float], Any | None]
"""One look at the rendezvous at ``now``: the observation when it is news for the agent."""


class EndpointWait:
    """Waiting for rank 0's endpoint of the attempt ``effect`` starts, one slice per pass.

    The core's bounded wait decides: a slice of waiting for the endpoint (at most
    ``look_every``), then a look, and so on until the endpoint is in, a look has news, or the
    wait's timeout is over (never without a last look).
    """

    def __init__(
        self, membership: Membership, effect: core.StartWorkers, clock: Clock, timeout: float
    ) -> None:
        self.effect = effect
        self._membership, self._clock = membership, clock
        self._config = peer_wait.PeerWaitConfig(timeout=timeout)
        self._state = peer_wait.PeerWaitState()
        what = f"rank 0's endpoint of round {effect.round} attempt {effect.attempt}"
        self._due = self._step(peer_wait.PeerWaitRequested(now=clock.now(), what=what))

    def _step(self, event: object) -> object:
        result = peer_wait.step(self._state, event, self._config)
        self._state = result.state
        (due,) = result.effects  # every row of the wait orders exactly one thing
        return due

    def step(self, look: Look) -> Joined | Any | None:
        """Carry out what the wait has due: one slice of waiting for the endpoint, or a look.

        Returns:
            The attempt as the current :class:`Joined` once the endpoint is in; the look's news
            (for the node step), or ``RendezvousFailed(timeout)`` when the wait is over; None
            while it goes on.

        Raises:
            RendezvousError: the store could not be reached, or holds no valid endpoint.
        """
        due, effect = self._due, self.effect
        if isinstance(due, peer_wait.AwaitPeer):
            left = self._clock.remaining(due.until)
            try:
                joined = self._membership.attempt_joined(effect.attempt, effect.restart_count, left)
            except rz.RendezvousTimeoutError:
                self._due = self._step(peer_wait.PeerSilent(now=self._clock.now()))
                return None
            self._due = self._step(peer_wait.PeerAnswer(now=self._clock.now()))
            return joined
        if isinstance(due, peer_wait.LookDue):
            now = self._clock.now()
            seen = look(now)
            self._due = self._step(peer_wait.LookAnswered(now=now, news=seen is not None))
            if isinstance(self._due, peer_wait.WaitInterrupted):
                return seen
            if isinstance(self._due, peer_wait.PeerWaitFailed):
                return core.RendezvousFailed(now=now, reason=self._due.reason, kind="timeout")
            return None
        raise RuntimeError(f"the endpoint wait has nothing to do after {due!r}")


class InPlaceEffects:
    """``OpenAttempt``, and entering an attempt before its ``StartWorkers`` starts workers."""

    def __init__(
        self,
        spec: WorkerSpec,
        membership: Membership,
        observers: Observers,
        clock: Clock,
        inbox: Inbox,
    ) -> None:
        self._spec, self._membership, self._obs = spec, membership, observers
        self._clock, self._inbox = clock, inbox
        self._publish = publish.Publisher(spec.metrics)

    def open(self, effect: core.OpenAttempt) -> None:
        """Open the attempt for every member. Its outcome is the core's next observation: the
        open landed, with this node's keep-alive then (``OpenLanded``: the core starts the
        attempt's workers only if the keep-alive held through the open's wait), or a store
        error, which is a lost rendezvous."""
        asked = self._clock.now()
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
        now = self._clock.now()
        last_beat = self._membership.last_beat()
        landed = members.OpenLanded(
            now=now,
            round=effect.round,
            attempt=effect.attempt,
            last_beat=now if last_beat is None else last_beat,  # no keep-alive: none lapses
            silent_until=self._membership.store_silent_until(),
            asked_at=asked,
        )
        self._inbox.put(landed)

    def enter(self, effect: core.StartWorkers) -> Joined | EndpointWait | None:
        """Move to ``effect.attempt``: the attempt when this node is in it already, else the
        wait for its endpoint. None when it could not be entered: the failure is in the inbox,
        the loop takes it next and starts no workers. (An attempt that could not be opened
        ends its step before this: see ``SimpleElasticAgent._feed``.)"""
        try:
            joined = self._membership.enter_attempt(effect.attempt)
        except rz.RendezvousError as error:
            self._inbox.put(self._failed(effect, error))
            return None
        if joined is not None:
            return self.entered(effect, joined)
        timeout = self._membership.bootstrap_timeout
        return EndpointWait(self._membership, effect, self._clock, timeout)

    def wait(self, wait: EndpointWait, look: Look) -> Joined | Any | None:
        """One pass of ``wait`` (see :meth:`EndpointWait.step`), a store error as a failed
        rendezvous for the node step."""
        try:
            outcome = wait.step(look)
        except rz.RendezvousError as error:
            return self._failed(wait.effect, error)
        if isinstance(outcome, Joined):
            return self.entered(wait.effect, outcome)
        if isinstance(outcome, core.RendezvousFailed):
            self._obs.rendezvous("failed", "FAILED", outcome.reason)
        return outcome

    def entered(self, effect: core.StartWorkers, joined: Joined) -> Joined:
        self._publish.restarted_in_place(joined.facts, self._spec.max_restarts)
        # One rdzv.attempt per node and attempt, opener and followers alike.
        self._obs.rendezvous(
            "attempt",
            "RUNNING",
            f"round {effect.round} attempt {effect.attempt}: restart count "
            f"{effect.restart_count}, master {joined.facts.master_addr}:"
            f"{joined.facts.master_port}",
        )
        return joined

    def _failed(self, effect: core.StartWorkers, error: rz.RendezvousError) -> Any:
        kind: RendezvousFailureKind = "connection"
        if isinstance(error, rz.RendezvousTimeoutError):
            kind = "timeout"
        elif isinstance(error, rz.RendezvousStateError):
            kind = "corrupt"
        why = f"attempt {effect.attempt} of round {effect.round}: {error}"
        self._obs.rendezvous("failed", "FAILED", why)
        return core.RendezvousFailed(now=self._clock.now(), reason=why, kind=kind)


def attempt_name(round_no: int, attempt: int) -> str:
    """The workers' attempt label (log folders): ``r3`` for a round's first start, ``r3a2``
    for its in-place attempt 2."""
    return f"r{round_no}" if attempt == 0 else f"r{round_no}a{attempt}"


__all__ = ["EndpointWait", "InPlaceEffects", "Look", "attempt_name"]
