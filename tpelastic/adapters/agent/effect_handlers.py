"""The run loop's effect handlers: how ``SimpleElasticAgent`` carries out each effect.

The loop (:mod:`loop`) feeds the core agent table and hands every effect of a step, in order, to
its ``_execute``, which calls the handler named ``_do_<EffectType>``. Those handlers are here:
recording events, joining a round, starting and stopping workers, opening the next round, the
exit barrier, closing or leaving the rendezvous and the failure report. A blocking one (joining,
the barrier) queues its outcome as the loop's next observation. The in-place restart ones
(``_do_OpenAttempt``) are in :mod:`in_place`.

Kept apart from :mod:`loop` so the loop stays one job; :class:`EffectHandlers` is mixed into
``SimpleElasticAgent`` and uses its queue, membership, observers and worker methods.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from tpelastic.adapters.agent import publish
from tpelastic.adapters.agent.env import worker_envs
from tpelastic.adapters.agent.in_place import attempt_name
from tpelastic.adapters.agent.membership import Joined, Membership
from tpelastic.adapters.agent.observers import Observers
from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.rendezvous import errors as rz
from tpelastic.adapters.workers.api import ProcessFailure
from tpelastic.core import agent as core
from tpelastic.core import membership as members
from tpelastic.core.agent.events import RendezvousFailureKind
from tpelastic.core.group_values import WorkerGroup, make_group
from tpelastic.core.values import Emit, Rejected

log = logging.getLogger("tpelastic.agent")  # report.log's logger, without importing report


class EffectHandlers:
    """The effect handlers of the run loop (mixed into ``SimpleElasticAgent``).

    Handlers are named ``_do_<EffectType>`` so the loop's ``_execute`` can find them.
    """

    _spec: WorkerSpec
    _clock: Clock
    _membership: Membership
    _queue: deque[Any]
    _obs: Observers
    _state: core.AgentState
    _join_reason: str | None
    _group: WorkerGroup | None
    _failures: dict[int, ProcessFailure]

    if TYPE_CHECKING:  # provided by the loop, its subclasses and InPlaceRestarts

        def _look(self, now: float, *, running: bool) -> Any | None: ...
        def _enter_attempt(self, effect: core.StartWorkers) -> Joined | None: ...
        def _start_workers(self, envs: dict[int, dict[str, str]], attempt: str) -> None: ...
        def _stop_workers(self, reason: str) -> None: ...
        def _worker_pids(self) -> dict[int, int]: ...
        def _watch(self, round_no: int, attempt: int = 0) -> None: ...
        def _unwatch(self) -> None: ...

    def _do_Emit(self, effect: Emit) -> None:
        # "null" records nothing, so the event is not built and its sink not imported: the
        # steps before the first worker emit several of these (issue 5).
        if self._spec.events != "null":
            from tpelastic.adapters.sinks.events import EventSource, event_from_emit, record

            record(
                event_from_emit(effect, EventSource.AGENT, self._clock.wall()), self._spec.events
            )
        if effect.name == "agent.warning":
            log.warning("%s", effect.as_dict().get("reason"))

    def _do_Rejected(self, effect: Rejected) -> None:
        log.warning("agent rejected %s in %s: %s", effect.event, effect.phase, effect.reason)

    def _do_JoinRendezvous(self, effect: core.JoinRendezvous) -> None:
        reason, self._join_reason = self._join_reason, None
        started = self._clock.now()
        try:
            joined = self._membership.join(failure=effect.failure, reason=reason)
        except rz.RendezvousClosedError as error:
            self._queue.append(self._closed_while_joining(str(error)))
            return
        except rz.RendezvousError as error:
            timed_out = isinstance(error, rz.RendezvousTimeoutError)
            kind: RendezvousFailureKind = "timeout" if timed_out else "connection"
            if isinstance(error, rz.RendezvousStateError):
                kind = "corrupt"
            self._obs.rendezvous("timed_out" if timed_out else "failed", "FAILED", str(error))
            now = self._clock.now()
            self._queue.append(core.RendezvousFailed(now=now, reason=str(error), kind=kind))
            return
        facts = joined.facts
        publish.round_joined(
            facts, self._clock.now() - started, self._spec.max_restarts, self._spec.local_world_size
        )
        self._obs.rendezvous(
            "round_joined",
            "RUNNING",
            f"round {facts.round}: rank {facts.group_rank} of {facts.group_world_size}, "
            f"restart count {facts.restart_count}",
            round_no=facts.round,
            rank=facts.group_rank,
        )
        self._queue.append(
            core.RoundCompleted(
                now=self._clock.now(),
                round=facts.round,
                group_rank=facts.group_rank,
                group_world_size=facts.group_world_size,
                restart_count=facts.restart_count,
            )
        )

    def _closed_while_joining(self, why: str) -> Any:
        """The join's close with one more look at it, for the node step to read."""
        now = self._clock.now()
        try:
            closed = self._membership.look().closed
        except Exception:  # the store may be gone with the job: the core reads None
            closed = None
        return members.JoinClosed(now=now, why=why, closed=closed)

    def _do_StartWorkers(self, effect: core.StartWorkers) -> None:
        joined = self._enter_attempt(effect) if effect.attempt else self._membership.joined
        if joined is None:
            return  # what ended the attempt before it started is queued (see in_place)
        spec = self._spec
        envs = worker_envs(
            role=spec.role,
            local_world_size=spec.local_world_size,
            facts=joined.facts,
            max_restarts=spec.max_restarts,
            run_id=spec.rdzv_handler.get_run_id(),
        )
        self._group = make_group(
            role=spec.role,
            local_world_size=spec.local_world_size,
            round=effect.round,
            restart_count=effect.restart_count,
            group_rank=effect.group_rank,
            group_world_size=effect.group_world_size,
        )
        self._failures = {}
        envs = self._obs.worker_envs(envs, effect.round, self._clock.now())
        publish.workers(HEALTHY=spec.local_world_size)
        log.info(
            "round %d%s: node %d of %d, restart %d/%d, starting %d worker(s), master %s:%d",
            effect.round,
            f" attempt {effect.attempt}" if effect.attempt else "",
            effect.group_rank,
            effect.group_world_size,
            effect.restart_count,
            spec.max_restarts,
            spec.local_world_size,
            joined.facts.master_addr,
            joined.facts.master_port,
        )
        self._start_workers(envs, attempt=attempt_name(effect.round, effect.attempt))
        self._watch(effect.round, effect.attempt)

    def _do_StopWorkers(self, effect: core.StopWorkers) -> None:
        log.info("stopping workers: %s", effect.reason)
        pids = set(self._worker_pids().values())
        self._unwatch()
        self._stop_workers(effect.reason)
        self._obs.workers_stopped(pids)
        failed = len(self._failures)  # this attempt's failed workers stay counted as FAILED
        publish.workers(STOPPED=self._spec.local_world_size - failed, FAILED=failed)

    def _do_OpenNextRound(self, effect: core.OpenNextRound) -> None:
        try:
            self._membership.open_next_round(effect.reason)
        except rz.RendezvousError as error:
            log.warning("could not open the next round: %s", error)
        self._join_reason = effect.reason

    def _do_EnterExitBarrier(self, effect: core.EnterExitBarrier) -> None:
        spec = self._spec
        poll = min(spec.monitor_interval, 0.05)
        look = functools.partial(self._look, running=False)
        from tpelastic.adapters.agent.barrier import exit_barrier

        ended = exit_barrier(
            self._membership,
            effect.round,
            timeout=spec.exit_barrier_timeout,
            poll=poll,
            look=look,
            clock=self._clock,
        )
        self._queue.append(ended)

    def _do_CloseRendezvous(self, effect: core.CloseRendezvous) -> None:
        try:
            self._membership.close(effect.outcome, effect.reason)
        except Exception as error:  # closing is best effort: a peer may have closed already
            log.warning("could not close the rendezvous: %s", error)
        self._obs.rendezvous("closed", node_state(effect.outcome), f"closed here: {effect.reason}")

    def _do_LeaveRendezvous(self, effect: core.LeaveRendezvous) -> None:
        self._membership.leave()
        ok = self._state.phase is core.AgentPhase.SUCCEEDED  # left after the barrier timed out
        self._obs.rendezvous("left", "SUCCEEDED" if ok else "FAILED", effect.reason)

    def _do_ReportFailure(self, effect: core.ReportFailure) -> None:
        from tpelastic.adapters.agent import report

        name = self._spec.get_entrypoint_name()
        report.print_failure(name, effect.reason, effect.exit_code, self._failures)


def node_state(outcome: str) -> str:
    """The NodeState name an ``rdzv`` event gives a closed rendezvous's ``outcome``."""
    return "SUCCEEDED" if outcome == "succeeded" else "FAILED"


__all__ = ["EffectHandlers", "node_state"]
