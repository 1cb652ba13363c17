"""How the run loop carries out the core's effects: a collaborator per concern, one table.

The loop (:mod:`loop`) steps the core and hands every effect, in order, to the handler the
table built by :func:`effect_table` holds for the effect's type. The collaborators here are plain
objects, each constructed with exactly what it needs:

* :class:`ReportEffects`: events, warnings and the failure report;
* :class:`RendezvousEffects`: joining a round, opening the next one, the exit barrier, closing
  and leaving;
* :class:`WorkerEffects`: starting and stopping the workers (through the agent's own worker
  methods), and the pump and round watcher that go with them;
* :class:`~tpelastic.adapters.agent.in_place.InPlaceEffects`: opening and entering an in-place
  attempt.

No handler waits: a join runs on its pump (:class:`~tpelastic.adapters.agent.pumps.JoinPump`),
whose end reaches the loop through its inbox and is decoded here (:meth:`RendezvousEffects.ended`)
into the next observation; an in-place attempt
whose endpoint is still to come leaves its wait for the loop to step, one slice a pass
(:class:`~tpelastic.adapters.agent.in_place.EndpointWait`). What the effects
of one run leave for the loop and for each other (the worker group, the failures, why the next
join happens) is the run's :class:`RunRecord`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from attrs import Factory, define

from tpelastic.adapters.agent import publish
from tpelastic.adapters.agent.env import worker_envs
from tpelastic.adapters.agent.in_place import EndpointWait, InPlaceEffects, Look, attempt_name
from tpelastic.adapters.agent.membership import Joined, Membership
from tpelastic.adapters.agent.observers import Observers
from tpelastic.adapters.agent.pumps import Inbox, JoinEnded, JoinPump, WorkerPumps
from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.rendezvous import errors as rz
from tpelastic.adapters.workers.api import ProcessFailure
from tpelastic.core import agent as core
from tpelastic.core import in_process as ip
from tpelastic.core import membership as members
from tpelastic.core import node as composed
from tpelastic.core.agent.events import RendezvousFailureKind
from tpelastic.core.group_values import WorkerGroup, make_group
from tpelastic.core.values import Emit, Rejected

if TYPE_CHECKING:
    from tpelastic.adapters.agent.control import Control
    from tpelastic.adapters.agent.round_watch import RoundWatching

log = logging.getLogger("tpelastic.agent")  # report.log's logger, without importing report

EffectTable = Mapping[type, Callable[[Any], None]]
"""Effect type -> the handler that carries it out."""

EFFECT_TYPES: tuple[type, ...] = (*core.AGENT_EFFECTS, *ip.EFFECTS, Emit, Rejected)
"""Every effect type the node's core can return: the table must have a handler for each."""


@define
class RunRecord:
    """What the effects of one run leave for the loop and for each other."""

    group: WorkerGroup | None = None
    failures: dict[int, ProcessFailure] = Factory(dict)
    return_values: dict[int, Any] = Factory(dict)
    join_reason: str | None = None
    """Why this node opened the next round (told to the join); None when a peer opened it."""


def node_state(outcome: str) -> str:
    """The NodeState name an ``rdzv`` event gives a closed rendezvous's ``outcome``."""
    return "SUCCEEDED" if outcome == "succeeded" else "FAILED"


class ReportEffects:
    """Events, the core's warnings and rejections, and the failure report."""

    def __init__(self, spec: WorkerSpec, record: RunRecord, clock: Clock) -> None:
        self._spec, self._record, self._clock = spec, record, clock

    def emit(self, effect: Emit) -> None:
        # "null" records nothing, so the event is not built and its sink not imported: the
        # steps before the first worker emit several of these.
        if self._spec.events != "null":
            from tpelastic.adapters.sinks.events import EventSource, event_from_emit, record

            event = event_from_emit(effect, EventSource.AGENT, self._clock.wall())
            record(event, self._spec.events)
        if effect.name == "agent.warning":
            log.warning("%s", effect.as_dict().get("reason"))

    def rejected(self, effect: Rejected) -> None:
        log.warning("agent rejected %s in %s: %s", effect.event, effect.phase, effect.reason)

    def failure(self, effect: core.ReportFailure) -> None:
        from tpelastic.adapters.agent import report

        name = self._spec.get_entrypoint_name()
        report.print_failure(name, effect.reason, effect.exit_code, self._record.failures)


class RendezvousEffects:
    """Joining a round, opening the next one, arriving at the exit barrier, closing and
    leaving.

    Args:
        phase: the agent's current phase.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        membership: Membership,
        observers: Observers,
        clock: Clock,
        inbox: Inbox,
        record: RunRecord,
        joins: JoinPump,
        *,
        phase: Callable[[], core.AgentPhase],
    ) -> None:
        self._spec, self._membership, self._obs = spec, membership, observers
        self._clock, self._inbox, self._record = clock, inbox, record
        self._joins, self._phase = joins, phase
        self._publish = publish.Publisher(spec.metrics)

    def join(self, effect: core.JoinRendezvous) -> None:
        """Start the join on its pump; its end comes back through the inbox (:meth:`ended`)."""
        reason, self._record.join_reason = self._record.join_reason, None
        membership = self._membership
        self._joins.start(
            lambda: membership.join(
                failure=effect.failure, reason=reason, charged_attempt=effect.charged_attempt
            )
        )

    def ended(self, item: JoinEnded) -> Any:
        """The core's observation of a join's end: the round completed, or why it failed."""
        clock, outcome = self._clock, item.outcome
        if isinstance(outcome, rz.RendezvousClosedError):
            return self._closed_while_joining(str(outcome))
        if isinstance(outcome, rz.RendezvousError):
            timed_out = isinstance(outcome, rz.RendezvousTimeoutError)
            kind: RendezvousFailureKind = "timeout" if timed_out else "connection"
            if isinstance(outcome, rz.RendezvousStateError):
                kind = "corrupt"
            self._obs.rendezvous("timed_out" if timed_out else "failed", "FAILED", str(outcome))
            return core.RendezvousFailed(now=clock.now(), reason=str(outcome), kind=kind)
        if isinstance(outcome, BaseException):
            raise outcome  # not a rendezvous failure: a bug, which must not pass as one
        facts = outcome.facts
        spec = self._spec
        took = clock.now() - item.started
        self._publish.round_joined(facts, took, spec.max_restarts, spec.local_world_size)
        self._obs.rendezvous(
            "round_joined",
            "RUNNING",
            f"round {facts.round}: rank {facts.group_rank} of {facts.group_world_size}, "
            f"restart count {facts.restart_count}",
            round_no=facts.round,
            rank=facts.group_rank,
        )
        return core.RoundCompleted(
            now=clock.now(),
            round=facts.round,
            group_rank=facts.group_rank,
            group_world_size=facts.group_world_size,
            restart_count=facts.restart_count,
            attempt=facts.attempt,
        )

    def _closed_while_joining(self, why: str) -> Any:
        """The join's close with one more look at it, for the node step to read."""
        now = self._clock.now()
        try:
            closed = self._membership.look().closed
        except Exception:  # the store may be gone with the job: the core reads None
            closed = None
            # No round yet to look from: the close's own reason still says why it closed
            # (another node may have found corrupt state).
            reason = self._membership.closed_reason()
            why = f"{why} ({reason})" if reason else why
        return members.JoinClosed(now=now, why=why, closed=closed)

    def open_next_round(self, effect: core.OpenNextRound) -> None:
        try:
            self._membership.open_next_round(effect.reason)
        except rz.RendezvousError as error:
            log.warning("could not open the next round: %s", error)
        self._record.join_reason = effect.reason

    def exit_barrier(self, effect: core.EnterExitBarrier) -> None:
        """Arrive; the loop reads the barrier from then on (``ExitBarrierRead``)."""
        from tpelastic.adapters.agent.barrier import arrive

        try:
            arrive(self._membership, effect.round)
        except rz.RendezvousError as error:  # the store went away: our workers did succeed
            now = self._clock.now()
            self._inbox.put(core.RendezvousFailed(now=now, reason=str(error), kind="connection"))

    def close(self, effect: core.CloseRendezvous) -> None:
        try:
            self._membership.close(effect.outcome, effect.reason)
        except Exception as error:  # closing is best effort: a peer may have closed already
            log.warning("could not close the rendezvous: %s", error)
        self._obs.rendezvous("closed", node_state(effect.outcome), f"closed here: {effect.reason}")

    def leave(self, effect: core.LeaveRendezvous) -> None:
        self._membership.leave()
        ok = self._phase() is core.AgentPhase.SUCCEEDED  # left after the barrier timed out
        self._obs.rendezvous("left", "SUCCEEDED" if ok else "FAILED", effect.reason)


class WorkerEffects:
    """Starting and stopping this node's workers, and the pump and round watcher that run with
    them.

    Args:
        start, stop, pids: the agent's worker methods (start one worker per environment of an
            attempt; stop them all; local rank -> pid of the running ones).
        stop_one, respawn: stop one worker; start a new one for a local rank (in-process
            restarts keep the others).
    """

    def __init__(
        self,
        spec: WorkerSpec,
        membership: Membership,
        observers: Observers,
        clock: Clock,
        inbox: Inbox,
        record: RunRecord,
        in_place: InPlaceEffects,
        watching: RoundWatching,
        pumps: WorkerPumps,
        *,
        start: Callable[[dict[int, dict[str, str]], str], None],
        stop: Callable[[str], None],
        pids: Callable[[], dict[int, int]],
        control: Control,
        stop_one: Callable[[int], None],
        respawn: Callable[[int, dict[str, str]], None],
    ) -> None:
        self._spec, self._membership, self._obs = spec, membership, observers
        self._clock, self._inbox, self._record = clock, inbox, record
        self._in_place, self._watching, self._pumps = in_place, watching, pumps
        self._start, self._stop, self._pids = start, stop, pids
        self._control, self._stop_one, self._respawn = control, stop_one, respawn
        self._publish = publish.Publisher(spec.metrics)
        self.waiting: EndpointWait | None = None
        """The in-place attempt whose workers wait for rank 0's endpoint, if any."""
        self._resume: ip.ResumeWorkers | None = None  # how the waiting attempt starts

    def start(self, effect: core.StartWorkers, resume: ip.ResumeWorkers | None = None) -> None:
        """Start the workers; an in-place attempt whose endpoint is still to come leaves its
        wait in :attr:`waiting` for the loop to step (see :meth:`wait_pass`)."""
        self._resume = resume
        if not effect.attempt:
            joined = self._membership.joined
            assert joined is not None
            self._launch(effect, joined)
            return
        entered = self._in_place.enter(effect)
        if isinstance(entered, EndpointWait):
            self.waiting = entered
        elif entered is not None:
            self._launch(effect, entered)
        # None: what ended the attempt before it started is in the inbox (see in_place)

    def resume(self, effect: ip.ResumeWorkers) -> None:
        """Start the attempt with the kept workers told their new world in process."""
        log.info(
            "restarting in process: local rank(s) %s kept, %s respawned",
            sorted(effect.keep),
            sorted(effect.respawn) or "none",
        )
        self.start(effect.start, effect)

    def pause(self, effect: ip.PauseWorkers) -> None:
        """Stop training: the kept workers are told to stop (their processes stay), the
        others' processes are stopped."""
        log.info(
            "restarting in process (%s): stopping local rank(s) %s in process%s",
            effect.reason,
            sorted(effect.keep),
            f", the process of {sorted(effect.respawn)}" if effect.respawn else "",
        )
        self.waiting = None
        self._watching.unwatch()
        self._pumps.stop()
        self._control.pause(effect.keep)
        for lr in sorted(effect.respawn):
            self._stop_one(lr)

    def wait_pass(self, look: Look) -> Any | None:
        """One pass of the wait for the attempt's endpoint: the workers start once it is in.

        Returns:
            An observation for the node step that ended the wait (a look's news, a failed
            rendezvous), or None (the workers started, or the wait goes on).
        """
        wait = self.waiting
        assert wait is not None
        outcome = self._in_place.wait(wait, look)
        if outcome is None:
            return None
        self.waiting = None
        if isinstance(outcome, Joined):
            self._launch(wait.effect, outcome)
            return None
        return outcome

    def _launch(self, effect: core.StartWorkers, joined: Joined) -> None:
        spec = self._spec
        envs = worker_envs(
            role=spec.role,
            local_world_size=spec.local_world_size,
            facts=joined.facts,
            max_restarts=spec.max_restarts,
            run_id=spec.rdzv_handler.get_run_id(),
        )
        self._record.group = make_group(
            role=spec.role,
            local_world_size=spec.local_world_size,
            round=effect.round,
            restart_count=effect.restart_count,
            group_rank=effect.group_rank,
            group_world_size=effect.group_world_size,
        )
        self._record.failures = {}
        envs = self._obs.worker_envs(envs, effect.round, self._clock.now())
        self._publish.workers(HEALTHY=spec.local_world_size)
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
        label = attempt_name(effect.round, effect.attempt)
        resume, self._resume = self._resume, None
        if resume is None:
            self._start(self._control.new_start(envs), label)
        else:
            envs = self._control.with_channel(envs)
            for lr in sorted(resume.keep):
                self._control.resume(lr, envs[lr])
            for lr in sorted(resume.respawn):
                self._respawn(lr, envs[lr])
        pids = self._pids()
        started = tuple(pids.get(lr) for lr in range(spec.local_world_size))
        # Before the pump starts: the group is started before any exit of its is stepped.
        self._inbox.put(composed.GroupStarted(now=self._clock.now(), pids=started))
        self._pumps.start(label)
        self._watching.watch(label)

    def stop(self, effect: core.StopWorkers) -> None:
        log.info("stopping workers: %s", effect.reason)
        self.waiting = None  # an attempt not started yet is given up with the rest
        self._resume = None
        pids = set(self._pids().values())
        self._watching.unwatch()
        self._pumps.stop()
        self._stop(effect.reason)
        self._obs.workers_stopped(pids)
        failed = len(self._record.failures)  # this attempt's failed workers stay FAILED
        self._publish.workers(STOPPED=self._spec.local_world_size - failed, FAILED=failed)


def effect_table(
    report: ReportEffects,
    rendezvous: RendezvousEffects,
    workers: WorkerEffects,
    in_place: InPlaceEffects,
) -> EffectTable:
    """The handler of every effect type the core can return.

    Raises:
        TypeError: an effect type of the core has no handler here (or one here is unknown to
            the core): the agent is not built rather than failing on that effect mid-run.
    """
    table: dict[type, Callable[[Any], None]] = {
        Emit: report.emit,
        Rejected: report.rejected,
        core.ReportFailure: report.failure,
        core.JoinRendezvous: rendezvous.join,
        core.OpenNextRound: rendezvous.open_next_round,
        core.EnterExitBarrier: rendezvous.exit_barrier,
        core.CloseRendezvous: rendezvous.close,
        core.LeaveRendezvous: rendezvous.leave,
        core.StartWorkers: workers.start,
        core.StopWorkers: workers.stop,
        core.OpenAttempt: in_place.open,
        ip.PauseWorkers: workers.pause,
        ip.ResumeWorkers: workers.resume,
    }
    check_covers(table)
    return table


def check_covers(table: EffectTable, effect_types: tuple[type, ...] = EFFECT_TYPES) -> None:
    """Raise TypeError unless ``table`` handles exactly ``effect_types``."""
    missing = sorted(t.__name__ for t in effect_types if t not in table)
    unknown = sorted(t.__name__ for t in table if t not in effect_types)
    if missing or unknown:
        raise TypeError(
            "agent effect table: "
            + "; ".join(
                part
                for part in (
                    f"no handler for {', '.join(missing)}" if missing else "",
                    f"handlers for effects the core never returns: {', '.join(unknown)}"
                    if unknown
                    else "",
                )
                if part
            )
        )


__all__ = [
    "EFFECT_TYPES",
    "EffectTable",
    "RendezvousEffects",
    "ReportEffects",
    "RunRecord",
    "WorkerEffects",
    "check_covers",
    "effect_table",
    "node_state",
]
