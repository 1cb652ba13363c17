"""SimpleElasticAgent: the run loop. It observes and carries out; the core's agent table decides.

Each pass takes one observation (a queued outcome of the last effect, else a look at the
workers and the rendezvous), feeds it to the node's composed step
(``tpelastic.core.node.node_step``: membership, then the agent table) and carries out the
returned effects in the order given (StopWorkers before any join: see specs/agent.md and
specs/node.md). No effect handler waits: a join runs on its pump thread and its end comes
back through the inbox as the next observation; at the exit barrier the loop reads the
barrier's counter itself (``ExitBarrierRead``) and the core decides when the wait is over.

The loop pops its observations from one inbox (:mod:`pumps`), waiting at most until its next
periodic read is due (on its clock; the periods are the core's, ``core/agent/reads.py``). Pumps
only put what they saw there: a thread held in the
workers' wait puts their end the moment it happens; where the store holds a wait for any of
several keys (our TCPStore) a watcher thread (:mod:`round_watch`) blocks in it and puts a
"round changed" when it fires, and the loop looks at once. The periodic reads, every
``monitor_interval`` while workers run, are the hang watch, the keep-alive, and a look at the
rendezvous every 0.25 s (with a watcher only to time the ring successor's heartbeat: every
heartbeat interval). A stop signal raises out of the inbox wait (or whatever the loop's own
thread is doing) and is recorded; every pass takes the record first, so a stop whose raise was
swallowed on the way still ends the run at the next pass.

The effects are carried out through one table, effect type -> handler, built when the agent is
built (:func:`~tpelastic.adapters.agent.effect_handlers.effect_table`; an effect type of the core
without a handler fails the construction). The handlers are methods of plain collaborators, each
given what it needs: reporting, the rendezvous, the workers (through the subclass's worker
methods below) and, over a rendezvous that restarts a round in place (the dynamic handler),
in-place attempts (:mod:`in_place`).
"""

from __future__ import annotations

import abc
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from attrs import evolve

from tpelastic.adapters.agent import publish, worker_group
from tpelastic.adapters.agent.control import Control
from tpelastic.adapters.agent.effect_handlers import (
    RendezvousEffects,
    ReportEffects,
    RunRecord,
    WorkerEffects,
    effect_table,
    node_state,
)
from tpelastic.adapters.agent.in_place import InPlaceEffects
from tpelastic.adapters.agent.membership import Membership
from tpelastic.adapters.agent.observers import Observers, describe_stall
from tpelastic.adapters.agent.pumps import (
    ControlMessage,
    Inbox,
    JoinEnded,
    JoinPump,
    RoundChanged,
    WorkerPumps,
    WorkersEnded,
    WorkerWaitFailed,
)
from tpelastic.adapters.agent.round_watch import RoundWatcher, RoundWatching
from tpelastic.adapters.agent.spec import RunResult, WorkerSpec
from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.rendezvous import errors as rz
from tpelastic.adapters.workers.api import RunProcsResult
from tpelastic.adapters.workers.signals import (
    SignalException,
    SignalPolicy,
    StopRequests,
    install_signal_policy,
)
from tpelastic.core import agent as core
from tpelastic.core import in_process as ip
from tpelastic.core import membership as members
from tpelastic.core import node as composed
from tpelastic.core.agent.reads import ReadConfig, read_period, running_look_period
from tpelastic.core.agent.states import TERMINAL
from tpelastic.core.worker_values import WorkerState

if TYPE_CHECKING:
    from tpelastic.adapters.sinks.events import Event

# The same logger as report.log; report itself (and barrier) is only needed once workers end,
# so both are imported where used, off the path to the first worker (issue 5).
log = logging.getLogger("tpelastic.agent")
# How long stop() waits for a round watcher's thread (it is released by the store's close or
# by the writes that end a round, so this bound is only reached when the store hangs).
_WATCHER_JOIN = 2.0
# How long one inbox wait lasts while a join runs (the join's end, or a signal, ends it sooner).
_JOIN_POLL = 1.0
# How long the end of a run waits for each pump's thread (workers stopped, store closed).
_PUMP_JOIN = 2.0
# Overrides the periodic look while a watcher runs (seconds): tests set it very high to show
# the watcher alone delivers a change. Not for production use.
_FALLBACK_ENV = "TPELASTIC_LOOK_FALLBACK"
# "0" turns the round watcher off (the loop then looks every 0.25 s, as before it existed):
# for measuring the difference, and a way out should a store misbehave under held waits.
_WATCH_ENV = "TPELASTIC_ROUND_WATCH"


# What torch's group state reads while the agent is in each phase (others: the group's own).
_GROUP_STATE = {
    core.AgentPhase.RUNNING: WorkerState.HEALTHY,
    core.AgentPhase.EXIT_BARRIER: WorkerState.SUCCEEDED,
    core.AgentPhase.SUCCEEDED: WorkerState.SUCCEEDED,
    core.AgentPhase.FAILED: WorkerState.FAILED,
    core.AgentPhase.HOLDING: WorkerState.FAILED,
}


def _env_seconds(name: str) -> float | None:
    try:
        value = float(os.environ[name])
    except (KeyError, ValueError):
        return None
    return value if value > 0 else None


def _in_process_config() -> ip.InProcessConfig:
    """The bounds of an in-process restart: ``TPELASTIC_IN_PROCESS_STOP_TIMEOUT`` and
    ``TPELASTIC_IN_PROCESS_START_TIMEOUT`` (seconds) override the defaults."""
    default = ip.InProcessConfig()
    stop = _env_seconds("TPELASTIC_IN_PROCESS_STOP_TIMEOUT") or default.stop_timeout
    start = _env_seconds("TPELASTIC_IN_PROCESS_START_TIMEOUT") or default.start_timeout
    return ip.InProcessConfig(stop_timeout=stop, start_timeout=start)


class ElasticAgent(abc.ABC):
    """One agent per node and role: forms the world, runs the workers, follows changes."""

    @abc.abstractmethod
    def run(self, role: str = "default") -> RunResult:
        """Run the job to its end on this node.

        Returns:
            How it ended; ``exit_code`` follows docs/launcher.md. Never raises for worker or
            rendezvous failures (those are results); raises ``WorkerStartError`` for an
            entrypoint that cannot be started at all.
        """

    @abc.abstractmethod
    def get_worker_group(self, role: str = "default") -> worker_group.WorkerGroup:
        """The current attempt's workers (ranks, state, round facts), as torch's."""


class SimpleElasticAgent(ElasticAgent):
    """The run loop over a rendezvous handler; subclasses start, wait for and stop workers.

    ``exit_barrier_timeout`` and ``shutdown_timeout`` (torch's arguments) override the spec's
    ``exit_barrier_timeout`` and ``close_timeout`` when given. ``clock`` is where the agent
    reads the time; it must be the one the rendezvous handler's keep-alive runs on.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        exit_barrier_timeout: float | None = None,
        shutdown_timeout: float | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        changes: dict[str, float] = {}
        if exit_barrier_timeout is not None:
            changes["exit_barrier_timeout"] = exit_barrier_timeout
        if shutdown_timeout is not None:
            changes["close_timeout"] = shutdown_timeout
        if changes:
            spec = evolve(spec, **changes)  # type: ignore[arg-type]
        self._spec = spec
        self._clock = clock
        self._publish = publish.Publisher(spec.metrics)
        self._membership = Membership(
            spec.rdzv_handler,
            master_addr=spec.master_addr,
            master_port=spec.master_port,
            local_addr=spec.local_addr,
            clock=clock,
        )
        self._config = core.AgentConfig(
            max_restarts=spec.max_restarts,
            min_nodes=spec.min_nodes,
            max_nodes=spec.max_nodes,
            local_world_size=spec.local_world_size,
            role=spec.role,
            restart_in_place=self._membership.in_place,
            collateral_window=self._membership.collateral_window(),
            exit_barrier_timeout=spec.exit_barrier_timeout,
        )
        self._node_config = composed.NodeConfig(
            agent=self._config,
            member=self._membership.member_config(),
            in_process=_in_process_config(),
        )
        self._node = composed.initial_node_state(self._node_config)
        self._reads = ReadConfig(
            monitor_interval=spec.monitor_interval,
            heartbeat_interval=self._membership.heartbeat_interval(),
            look_fallback=_env_seconds(_FALLBACK_ENV),
        )
        self._state = self._node.agent
        self._stops = StopRequests()  # the stop signals received (run() installs the handler)
        self._inbox = Inbox()  # outcomes of blocking effects, stepped before any new look
        self._record = RunRecord()
        self._next_look = 0.0
        self._next_read = 0.0  # when the loop's periodic reads are due next
        # Called with the exit code once the outcome is in and only the bounded teardown is
        # left (the launcher arms its exit guard there); None for library callers.
        self.on_outcome: Callable[[int], None] | None = None
        handler = spec.rdzv_handler
        self._obs = Observers(
            spec, self._config, lambda: handler.get_run_id(), lambda: self._state, clock
        )
        membership = self._membership
        self._watching = RoundWatching(
            can_watch=self._may_watch,
            wait=membership.wait_for_change,
            on_fire=lambda watcher: self._inbox.put(RoundChanged(watcher)),
            clock=clock,
        )
        self._pumps = WorkerPumps(self._inbox, self._workers_wait)
        self._control = Control(
            spec.local_world_size, self._inbox, clock, self._control_channels_factory()
        )
        in_place = InPlaceEffects(spec, membership, self._obs, clock, self._inbox)
        self._workers = WorkerEffects(
            spec,
            membership,
            self._obs,
            clock,
            self._inbox,
            self._record,
            in_place,
            self._watching,
            self._pumps,
            start=self._start_workers,
            stop=self._stop_workers,
            pids=self._worker_pids,
            control=self._control,
            stop_one=self._stop_worker,
            respawn=self._respawn_worker,
        )
        self._joins = JoinPump(self._inbox, now=clock.now)
        self._rendezvous = RendezvousEffects(
            spec,
            membership,
            self._obs,
            clock,
            self._inbox,
            self._record,
            self._joins,
            phase=lambda: self._state.phase,
        )
        self._effects = effect_table(
            ReportEffects(spec, self._record, clock),
            self._rendezvous,
            self._workers,
            in_place,
        )

    # -- what subclasses provide ----------------------------------------------------------------

    @abc.abstractmethod
    def _start_workers(self, envs: dict[int, dict[str, str]], attempt: str) -> None:
        """Start one worker per entry of ``envs`` (local rank -> added environment)."""

    @abc.abstractmethod
    def _stop_workers(self, reason: str) -> None:
        """Stop every running worker (idempotent; no-op when none run)."""

    def _stop_spares(self) -> None:
        """Stop what was kept for later starts (warm interpreters); the run is over. Called
        with the workers' stop, before the exit guard is armed: nothing of it may be left."""

    @abc.abstractmethod
    def _wait_workers(self, timeout: float) -> RunProcsResult | None:
        """None while all run (up to ``timeout`` s), else the attempt's result."""

    def _current_context(self) -> Any | None:
        """The running worker context, for forwarding signals (None when there is none)."""
        return None

    def _control_channels_factory(self) -> Any | None:
        """What makes the workers' control channels (``Control``'s ``make_channels``), or
        None: an agent that cannot stop and start a single worker restarts every one."""
        return None

    def _stop_worker(self, local_rank: int) -> None:
        """Stop one worker, the others running on (in-process restarts only)."""
        raise NotImplementedError

    def _respawn_worker(self, local_rank: int, env: dict[str, str]) -> None:
        """Start a new worker for ``local_rank`` with the round's ``env`` (in-process only)."""
        raise NotImplementedError

    def _worker_pids(self) -> dict[int, int]:
        """Local rank -> pid of the current attempt's workers (empty when unknown)."""
        return {}

    def _live_local_ranks(self) -> tuple[int, ...]:
        """The local ranks whose worker is still running (hang detection watches only these)."""
        return tuple(range(self._spec.local_world_size))

    # -- the loop ---------------------------------------------------------------------------------

    @property
    def state(self) -> core.AgentState:
        """The agent machine's current state."""
        return self._state

    def get_worker_group(self, role: str = "default") -> worker_group.WorkerGroup:
        if self._record.group is None:
            return worker_group.WorkerGroup(self._spec)
        joined = self._membership.joined
        view = worker_group.WorkerGroup.of(
            self._spec,
            self._record.group,
            joined.facts if joined is not None else None,
            joined.store if joined is not None else None,
        )
        view.state = _GROUP_STATE.get(self._state.phase, view.state)
        return view

    # -- torch's agent event helpers --------------------------------------------------------------

    def get_event_failed(self) -> Event:
        """torch's ``torchelastic.worker.status.FAILED`` event for this agent (with the
        exception being handled, if any, as ``raw_error``)."""
        import traceback

        return self._status_event("FAILED", raw_error=traceback.format_exc())

    def get_event_succeeded(self) -> Event:
        """torch's ``torchelastic.worker.status.SUCCEEDED`` event for this agent."""
        return self._status_event("SUCCEEDED")

    @contextlib.contextmanager
    def record_duration(self, state: str) -> Iterator[None]:
        """Record, when the block ends, a ``torchelastic.worker.status.<state>`` event with the
        block's ``duration_ms`` to the spec's ``event_log_handler`` (as torch)."""
        from tpelastic.adapters.sinks.events import record

        start = self._clock.now()
        try:
            yield
        finally:
            took = (self._clock.now() - start) * 1000.0
            record(self._status_event(state, duration_ms=took), self._spec.event_log_handler)

    def _status_event(
        self, state: str, raw_error: str | None = None, duration_ms: float | None = None
    ) -> Event:
        import json
        import socket

        from tpelastic.adapters.sinks.events import Event, EventSource

        group, spec = self.get_worker_group(), self._spec
        metadata = {
            "run_id": spec.rdzv_handler.get_run_id(),
            "global_rank": None,
            "group_rank": group.group_rank,
            "worker_id": None,
            "role": spec.role,
            "hostname": socket.gethostname(),
            "state": state,
            "total_run_time": 0,
            "rdzv_backend": spec.rdzv_handler.get_backend(),
            "raw_error": raw_error,
            "metadata": json.dumps(
                {
                    "group_world_size": group.group_world_size,
                    "entry_point": spec.get_entrypoint_name(),
                }
            ),
            "agent_restarts": self._state.restart_count,
            "duration_ms": duration_ms,
        }
        return Event(f"torchelastic.worker.status.{state}", EventSource.AGENT, 0.0, metadata)

    def run(self, role: str = "default") -> RunResult:
        restore: Callable[[], None] | None = None
        if threading.current_thread() is threading.main_thread():
            policy = SignalPolicy.handling(self._spec.signals_to_handle)
            restore = install_signal_policy(policy, self._current_context, stops=self._stops)
        try:
            try:
                self._obs.start()
            except SignalException as stop:
                self._stops.received(stop.sigval)  # the loop's first pass takes it
            self._loop()
        finally:
            # The outcome is in: the teardown below is bounded and runs to its end; a stop
            # signal now is only recorded (it ends the store host's wait for its peers).
            self._stops.stop_raising()
            try:
                self._watching.unwatch()
                self._pumps.stop()
                self._stop_workers("agent exiting")
                self._stop_spares()
                # Who waits for whom before the store goes down is the core's departure
                # table (specs/departure.md); this carries out its slices.
                code = self._state.exit_code
                if code is not None:
                    from tpelastic.adapters.agent.barrier import depart

                    depart(
                        self._membership,
                        code,
                        self._spec.exit_barrier_timeout,
                        self._clock,
                        stopped=lambda: self._stops.stopping,
                    )
            finally:
                code = self._state.exit_code
                if self.on_outcome is not None and code is not None:
                    self.on_outcome(code)
                self._membership.leave()  # closes the store: a watcher's wait ends at once
                self._watching.join(_WATCHER_JOIN)
                self._pumps.join(_PUMP_JOIN)
                self._joins.join(_PUMP_JOIN)
                self._control.close()
                self._obs.close()
                if restore is not None:
                    restore()
        return self._result()

    def _loop(self) -> None:
        self._inbox.put(core.AgentStarted(now=self._clock.now()))
        while self._state.phase not in TERMINAL:
            # A stop signal raises out of whatever the pass is doing (a wait ends at once) and
            # is recorded; the record is what is taken, every pass, even if a raise was lost.
            try:
                if not self._stops.pending:
                    event = self._observe()
                    if event is not None:
                        self._feed(event)
            except SignalException as raised:
                self._stops.received(raised.sigval)  # ours is recorded already; taken below
            stop = self._stops.take()
            if stop is not None and self._state.phase not in TERMINAL:
                self._inbox.clear()
                self._feed(core.SignalReceived(now=self._clock.now(), signum=int(stop)))

    def _feed(self, observation: Any) -> None:
        done = composed.node_step(self._node, observation, self._node_config)
        before, self._node, self._state = self._state, done.state, done.state.agent
        if self._state.phase is not before.phase:
            self._next_read = 0.0  # a phase's first reads are due at once (the barrier's)
        for taken in done.agent_steps:
            self._obs.stepped(taken.before, taken.event, taken.result)
            self._noted(observation, taken.event)
        for effect in done.effects:
            put = self._inbox.outcomes
            self._execute(effect)
            if self._inbox.outcomes != put:
                # The effect put its outcome in the inbox (a failure): that is the core's next
                # observation, and the core decides again with it; the effects after it in
                # this step are not carried out. An outcome queued before this step cancels
                # nothing of it.
                break
        if self._workers.waiting is not None:
            self._next_read = 0.0  # the attempt's endpoint wait goes on at once

    def _noted(self, observation: Any, event: Any) -> None:
        """Records and bookkeeping for what the rendezvous told the agent."""
        if isinstance(event, core.RendezvousClosed):
            closed = event.outcome
            self._obs.rendezvous("closed", node_state(closed), f"{closed}: {event.reason}")
        elif isinstance(observation, members.JoinClosed):
            self._obs.rendezvous("closed", "FAILED", observation.why)
        elif isinstance(event, core.NextRoundOpened):
            self._record.join_reason = None  # a peer opened it: this node has nothing to open

    def _result(self) -> RunResult:
        state = self._state
        ok = state.phase is core.AgentPhase.SUCCEEDED
        return RunResult(
            state=WorkerState.SUCCEEDED if ok else WorkerState.FAILED,
            exit_code=state.exit_code if state.exit_code is not None else core.EXIT_WORKERS_FAILED,
            reason="" if ok else (state.last_failure or ""),
            return_values=dict(self._record.return_values),
            failures=dict(self._record.failures),
            restart_count=state.restart_count,
            round=state.round,
        )

    # -- observing ----------------------------------------------------------------------------

    def _observe(self) -> Any | None:
        """The next observation for the core (None: nothing to step this pass)."""
        phase = self._state.phase
        period = read_period(phase, self._reads)
        if period is None:
            if self._inbox:
                return self._decode(self._inbox.pop())
            if self._joins.pending:  # a signal raises out of this wait
                item = self._inbox.pop_within(_JOIN_POLL)
                return self._decode(item) if item is not None else None
            # Every join's end is an observation the agent table has a row for (a round it
            # cannot run fails it), so nothing is left that could end this wait.
            raise RuntimeError(f"agent in {phase.name} waits with no join running: a bug")
        item = self._inbox.pop_within(self._clock.remaining(self._next_read))
        if item is not None:
            return self._decode(item)
        now = self._clock.now()
        if self._workers.waiting is not None:  # one slice of it; the next is due at once
            return self._workers.wait_pass(functools.partial(self._look, running=False))
        self._next_read = now + period
        if phase is core.AgentPhase.HOLDING:
            return self._read_holding(now)
        if phase is core.AgentPhase.EXIT_BARRIER:
            return self._read_barrier(now)
        if phase is core.AgentPhase.FENCED:
            return self._read_fenced(now)
        return self._read_running(now)

    def _decode(self, item: Any) -> Any | None:
        """What a pump put in the inbox, as the core's observation; a core observation (the
        outcome of a blocking effect) as it is. None: nothing for the core (an earlier start's
        workers, a watcher no longer current)."""
        if isinstance(item, WorkersEnded):
            if item.serial != self._pumps.serial:
                return None  # the workers of an earlier start
            now = self._clock.now()
            if item.result.is_failed():
                self._look_first(now)
                if item.serial != self._pumps.serial or self._state.phase in TERMINAL:
                    return None  # the look's news restarted the workers, or ended the run
            return self._workers_ended(item.result, now)
        if isinstance(item, WorkerWaitFailed):
            if item.serial == self._pumps.serial:
                raise item.error
            return None
        if isinstance(item, ControlMessage):
            seen = self._control.decode(item)
            if isinstance(seen, composed.WorkerRaised):
                start = self._control.start
                self._look_first(seen.now)
                if start != self._control.start or self._state.phase in TERMINAL:
                    return None  # the look's news restarted the workers, or ended the run
            return seen
        if isinstance(item, RoundChanged):
            return self._round_changed(item.watcher)
        if isinstance(item, JoinEnded):
            return self._rendezvous.ended(item) if self._joins.ended(item) else None
        return item

    def _round_changed(self, watcher: RoundWatcher) -> Any | None:
        try:
            if watcher is not self._watching.current or not watcher.take():
                return None
            now = self._clock.now()
            self._next_look = now + self._look_period()
            return self._look(now, running=self._state.phase is core.AgentPhase.RUNNING)
        finally:
            watcher.resume()

    def _read_running(self, now: float) -> Any | None:
        """The periodic reads while the workers run: the hang watch, the keep-alive, and the
        look at the rendezvous when it is due."""
        stall = self._obs.stuck(now, self._live_local_ranks)
        if stall is not None:
            global_rank = self._state.group_rank * self._spec.local_world_size + stall.rank
            cause = self._obs.culprit(stall, global_rank)
            log.warning("worker %s", describe_stall(stall, global_rank, cause))
            self._publish.failure(publish.HANG)
            self._publish.workers(UNHEALTHY=1, HEALTHY=self._spec.local_world_size - 1)
            return core.WorkerStuck(
                now=now, local_rank=stall.rank, idle_for=stall.idle_for, cause=cause
            )
        due = self._node.restart.deadline
        if due is not None and now >= due:
            return ip.RestartTimePassed(now=now)
        last_beat = self._membership.last_beat()
        if last_beat is not None:
            lapsed = self._member_step(self._keep_alive_read(now, last_beat))
            if lapsed is not None:
                return lapsed
        if now < self._next_look:
            return None
        self._next_look = now + self._look_period()
        return self._look(now, running=True)

    def _look_first(self, now: float) -> None:
        """A fresh look is stepped before a worker failure (specs/node.md): when the world
        ended meanwhile (the next round or attempt opened, the run closed; e.g. peers found
        this node dead while it was paused), the core learns that first and decides what the
        failure then means."""
        seen = self._look(now, running=False)
        if seen is not None:
            self._feed(seen)

    def _read_holding(self, now: float) -> Any:
        """A held failure: keep looking (a look also times the ring successor, whose loss is
        what the hold waits for); the core decides when the hold is over."""
        seen = self._look(now, running=False)
        return seen if seen is not None else core.TimePassed(now=now)

    def _read_fenced(self, now: float) -> Any | None:
        """Fenced: a look (the run may close, the store may be lost) and the keep-alive, until
        the core says a heartbeat landed again (it re-joins)."""
        seen = self._look(now, running=False)
        if seen is not None:
            return seen
        last_beat = self._membership.last_beat()
        if last_beat is None:  # no keep-alive to wait for: it cannot stay lapsed
            last_beat = now
        return self._member_step(self._keep_alive_read(now, last_beat))

    def _keep_alive_read(self, now: float, last_beat: float) -> members.KeepAliveRead:
        silent_until = self._membership.store_silent_until()
        return members.KeepAliveRead(now=now, last_beat=last_beat, silent_until=silent_until)

    def _read_barrier(self, now: float) -> Any | None:
        """At the exit barrier: a look (a close or a newer round ends the wait), else how many
        nodes arrived; the core decides whether that is all of them, or the wait is over."""
        from tpelastic.adapters.agent.barrier import arrived

        seen = self._look(now, running=False)
        if seen is not None:
            return seen
        try:
            count = arrived(self._membership, self._state.round)
        except rz.RendezvousError as error:  # the store went away: our workers did succeed
            return core.RendezvousFailed(now=now, reason=str(error), kind="connection")
        return core.ExitBarrierRead(now=now, arrived=count)

    def _workers_wait(self) -> Callable[[float], RunProcsResult | None]:
        """The wait of the workers that just started, for their pump: the context's own (held
        by the pump, so a stop that replaces it leaves the pump's alone), else the subclass's
        ``_wait_workers``."""
        wait = getattr(self._current_context(), "wait", None)
        if callable(wait):
            return lambda seconds: wait(timeout=seconds, period=seconds)
        return self._wait_workers

    def _look_period(self) -> float:
        watching = self._watching.current is not None
        return running_look_period(self._reads, watching=watching)

    # -- the round watcher ------------------------------------------------------------------

    def _may_watch(self) -> bool:
        """Only runs that can grow or shrink watch, over a store that holds a wait for any key
        (so the single-node path starts nothing)."""
        if self._spec.max_nodes <= 1 or os.environ.get(_WATCH_ENV) == "0":
            return False
        return self._membership.can_wait_for_change()

    def _workers_ended(self, result: RunProcsResult, now: float) -> composed.WorkersExited:
        """What the workers' wait saw: every worker exited with 0, or the failed ones (the
        node's worker group, then the agent, decide what that means)."""
        joined = self._membership.joined
        assert joined is not None
        rank, size = joined.facts.group_rank, self._spec.local_world_size
        if not result.is_failed():
            values = {rank * size + lr: v for lr, v in result.return_values.items()}
            self._record.return_values = values
            self._publish.workers(SUCCEEDED=size)
            return composed.WorkersExited(now=now)
        from tpelastic.adapters.agent import report

        self._record.failures = report.by_global_rank(
            result.failures, group_rank=rank, local_world_size=size
        )
        timed_out = {
            lr: why
            for lr, pf in result.failures.items()
            if (why := self._obs.timer_reason(pf.pid, pf.signal_name()))
        }
        failures = report.to_worker_failures(
            result.failures,
            group_rank=rank,
            local_world_size=size,
            now=now,
            reasons=timed_out,
            wall_now=self._clock.wall(),
        )
        self._publish.failed(failures, timed_out=set(timed_out), local_world_size=size)
        for failure in failures:
            log.warning("worker rank %d failed: %s", failure.global_rank, failure.reason)
        return composed.WorkersExited(now=now, failures=failures)

    def _look(self, now: float, *, running: bool) -> Any | None:
        """One look at the rendezvous: the observation when it is news for the agent (fed to
        the node step next), else None (the membership reading is stepped at once)."""
        try:
            seen = self._membership.look()
        except rz.RendezvousError as error:
            return self._member_step(members.LookFailed(now=now, reason=str(error)))
        looked = members.LookDone(
            now=now,
            round=self._state.round,
            closed=seen.closed,
            next_opened=seen.next_opened,
            next_attempt=seen.next_attempt,
            waiting=seen.waiting,
            running=running,
        )
        return self._member_step(looked)

    def _member_step(self, observed: object) -> Any | None:
        """``observed`` when it is news for the agent, to be fed to the node step next; else
        None, and the node step (which then only updates the membership reading) is taken now."""
        if composed.has_news(self._node, observed, self._node_config):
            return observed
        self._feed(observed)
        return None

    # -- carrying out effects -------------------------------------------------------------------

    def _execute(self, effect: object) -> None:
        handler = self._effects.get(type(effect))
        if handler is None:  # the table covers every effect type the core declares
            raise TypeError(f"agent: no way to carry out {effect!r}")
        handler(effect)


__all__ = ["ElasticAgent", "SimpleElasticAgent"]
