"""The agent's actions: pure (state, observation, config) -> (state, effects), effects in order.

StopWorkers always comes first in a step that also joins or opens a round, opens an attempt
or starts workers again.
"""

from __future__ import annotations

from tpelastic.core.agent import events as ev
from tpelastic.core.agent.guards import FailureEvent, count_at_attempt
from tpelastic.core.agent.states import (
    EXIT_OK,
    EXIT_RENDEZVOUS_FAILED,
    EXIT_SIGNAL_BASE,
    EXIT_WORKERS_FAILED,
    AgentConfig,
    AgentPhase,
    AgentState,
)
from tpelastic.core.copying import evolve
from tpelastic.core.group_values import WorkerFailure
from tpelastic.core.restart_budget import charged_attempt, recent_starts
from tpelastic.core.values import Emit, Instant

Out = tuple[AgentState, tuple[object, ...]]


def _stop_if_running(state: AgentState, reason: str) -> tuple[object, ...]:
    running = state.phase is AgentPhase.RUNNING
    return (ev.StopWorkers(reason=reason),) if running else ()


def _finish(state: AgentState, exit_code: int, failure: str | None = None) -> AgentState:
    last = failure or state.last_failure
    return evolve(
        state, exit_code=exit_code, last_failure=last, held_until=None, barrier_until=None
    )


def join_fresh(state: AgentState, event: ev.AgentStarted, config: AgentConfig) -> Out:
    return state, (ev.JoinRendezvous(failure=False),)


def start_workers(state: AgentState, event: ev.RoundCompleted, config: AgentConfig) -> Out:
    count = max(state.restart_count, event.restart_count)  # see guards.round_fits
    new = evolve(
        state,
        round=event.round,
        group_rank=event.group_rank,
        group_world_size=event.group_world_size,
        restart_count=count,
        attempt=event.attempt,
        attempt_starts=(),
    )
    start = ev.StartWorkers(
        round=event.round,
        group_rank=event.group_rank,
        group_world_size=event.group_world_size,
        restart_count=count,
        local_world_size=state.local_world_size,
        attempt=event.attempt,
    )
    return new, (start,)


def fail_over_budget(state: AgentState, event: ev.RoundCompleted, config: AgentConfig) -> Out:
    reason = f"round {event.round} has restart_count {event.restart_count} > max_restarts"
    effects = (
        ev.LeaveRendezvous(reason=reason),
        ev.ReportFailure(reason=reason, exit_code=EXIT_WORKERS_FAILED),
    )
    return _finish(state, EXIT_WORKERS_FAILED, reason), effects


def _misfit_reason(state: AgentState, event: ev.RoundCompleted, config: AgentConfig) -> str:
    """Why the round cannot run on this agent, in one line."""
    if event.round <= state.round:
        why = f"it is not newer than round {state.round}"
    elif event.group_rank >= event.group_world_size:
        why = f"rank {event.group_rank} is outside its {event.group_world_size} node(s)"
    else:
        why = (
            f"its {event.group_world_size} node(s) are outside this agent's "
            f"--nnodes {config.min_nodes}:{config.max_nodes}"
        )
    return f"the rendezvous gave round {event.round}, which this agent cannot run: {why}"


def fail_misfit_round(state: AgentState, event: ev.RoundCompleted, config: AgentConfig) -> Out:
    reason = _misfit_reason(state, event, config)
    effects = (
        ev.LeaveRendezvous(reason=reason),
        ev.ReportFailure(reason=reason, exit_code=EXIT_RENDEZVOUS_FAILED),
    )
    return _finish(state, EXIT_RENDEZVOUS_FAILED, reason), effects


def fail_rendezvous(state: AgentState, event: ev.RendezvousFailed, config: AgentConfig) -> Out:
    reason = f"rendezvous failed ({event.kind}): {event.reason}"
    effects = (
        *_stop_if_running(state, reason),
        ev.ReportFailure(reason=reason, exit_code=EXIT_RENDEZVOUS_FAILED),
    )
    return _finish(state, EXIT_RENDEZVOUS_FAILED, reason), effects


def fail_corrupt_state(state: AgentState, event: ev.RendezvousFailed, config: AgentConfig) -> Out:
    # The peers may be waiting on keys this node found corrupt, or on keys they never read:
    # without the close, some would wait out their join timeout (or the store host's loss).
    reason = f"rendezvous failed ({event.kind}): {event.reason}"
    effects = (
        *_stop_if_running(state, reason),
        ev.CloseRendezvous(outcome="failed", reason=event.reason),
        ev.ReportFailure(reason=reason, exit_code=EXIT_RENDEZVOUS_FAILED),
    )
    return _finish(state, EXIT_RENDEZVOUS_FAILED, reason), effects


def succeed_despite_rendezvous(
    state: AgentState, event: ev.RendezvousFailed, config: AgentConfig
) -> Out:
    warning = Emit(
        name="agent.warning",
        fields=(("reason", f"exit barrier not confirmed: {event.reason}"), ("round", state.round)),
    )
    return _finish(state, EXIT_OK), (warning,)


def failure_after_world(state: AgentState, event: ev.WorkersFailed, config: AgentConfig) -> Out:
    reason = f"workers of round {state.round} failed after its world ended: no budget unit"
    return state, (Emit(name="agent.warning", fields=(("reason", reason), ("round", state.round))),)


def enter_exit_barrier(state: AgentState, event: ev.WorkersSucceeded, config: AgentConfig) -> Out:
    new = evolve(state, barrier_until=event.now + config.exit_barrier_timeout)
    return new, (ev.EnterExitBarrier(round=state.round),)


def _failures(state: AgentState, event: FailureEvent) -> tuple[WorkerFailure, ...]:
    if isinstance(event, ev.WorkersFailed):
        return event.failures
    reason = f"local rank {event.local_rank} made no progress for {event.idle_for:g}s"
    if event.cause:
        reason = f"{reason}: {event.cause}"
    global_rank = state.group_rank * state.local_world_size + event.local_rank
    hang = WorkerFailure(
        local_rank=event.local_rank,
        global_rank=global_rank,
        exitcode=None,
        signal=None,
        at=event.now,
        reason=reason,
    )
    return (hang,)


def _describe(failures: tuple[WorkerFailure, ...]) -> str:
    root = failures[0]
    more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
    return f"worker local rank {root.local_rank} failed: {root.reason or 'no reason'}{more}"


def restart_after_failure(state: AgentState, event: FailureEvent, config: AgentConfig) -> Out:
    reason = _describe(_failures(state, event))
    effects = (ev.StopWorkers(reason=reason), ev.JoinRendezvous(failure=True))
    return evolve(state, last_failure=reason), effects


def _restart_as(
    state: AgentState, attempt: int, now: Instant, config: AgentConfig
) -> tuple[AgentState, object]:
    """The state and StartWorkers of ``attempt`` of this node's round (same ranks and world),
    started at ``now``: a peer's loss within the collateral window refunds it."""
    count = count_at_attempt(state, attempt)
    window = config.collateral_window
    starts = (*recent_starts(state.attempt_starts, now, window), (attempt, now)) if window else ()
    new = evolve(state, attempt=attempt, restart_count=count, attempt_starts=starts)
    start = ev.StartWorkers(
        round=state.round,
        group_rank=state.group_rank,
        group_world_size=state.group_world_size,
        restart_count=count,
        local_world_size=state.local_world_size,
        attempt=attempt,
    )
    return new, start


def restart_in_place(state: AgentState, event: FailureEvent, config: AgentConfig) -> Out:
    reason = _describe(_failures(state, event))
    attempt = state.attempt + 1
    new, _ = _restart_as(state, attempt, event.now, config)
    # The workers start once the open landed (``start_own_attempt``): the open may wait out an
    # outage in which peers find this node dead and form the next round without it.
    effects = (
        ev.StopWorkers(reason=reason),
        ev.OpenAttempt(round=state.round, attempt=attempt, reason=reason),
    )
    return evolve(new, last_failure=reason), effects


def start_own_attempt(state: AgentState, event: ev.OwnAttemptOpened, config: AgentConfig) -> Out:
    start = ev.StartWorkers(
        round=state.round,
        group_rank=state.group_rank,
        group_world_size=state.group_world_size,
        restart_count=state.restart_count,
        local_world_size=state.local_world_size,
        attempt=state.attempt,
    )
    return state, (start,)


def follow_attempt(state: AgentState, event: ev.AttemptOpened, config: AgentConfig) -> Out:
    reason = f"round {event.round} attempt {event.attempt} opened: {event.reason}"
    new, start = _restart_as(state, event.attempt, event.now, config)
    return new, (ev.StopWorkers(reason=reason), start)


def fail_attempt_over_budget(
    state: AgentState, event: ev.AttemptOpened, config: AgentConfig
) -> Out:
    count = count_at_attempt(state, event.attempt)
    reason = f"round {event.round} attempt {event.attempt} has restart_count {count} > max_restarts"
    effects = (
        *_stop_if_running(state, reason),
        ev.LeaveRendezvous(reason=reason),
        ev.ReportFailure(reason=reason, exit_code=EXIT_WORKERS_FAILED),
    )
    return _finish(state, EXIT_WORKERS_FAILED, reason), effects


def fail_job(state: AgentState, event: FailureEvent, config: AgentConfig) -> Out:
    failures = _failures(state, event)
    reason = _describe(failures)
    closing = "workers failed, budget exhausted"
    effects = (
        ev.StopWorkers(reason=reason),
        ev.CloseRendezvous(outcome="failed", reason=closing),
        ev.ReportFailure(reason=reason, exit_code=EXIT_WORKERS_FAILED, failures=failures),
    )
    return _finish(state, EXIT_WORKERS_FAILED, reason), effects


def hold_failure(state: AgentState, event: FailureEvent, config: AgentConfig) -> Out:
    # A peer lost at the failure is usually why it failed ("Connection closed by peer"); its
    # loss is reported within the window, and then the failure is a membership change.
    reason = _describe(_failures(state, event))
    window = config.collateral_window
    note = f"{reason}; budget spent: waiting up to {window:g}s for a peer's loss to explain it"
    warning = Emit(name="agent.warning", fields=(("reason", note), ("round", state.round)))
    held = evolve(state, last_failure=reason, held_until=event.now + window)
    return held, (ev.StopWorkers(reason=reason), warning)


def fail_held(state: AgentState, event: ev.TimePassed, config: AgentConfig) -> Out:
    reason = state.last_failure or "workers failed"
    effects = (
        ev.CloseRendezvous(outcome="failed", reason="workers failed, budget exhausted"),
        ev.ReportFailure(reason=reason, exit_code=EXIT_WORKERS_FAILED),
    )
    return _finish(evolve(state, held_until=None), EXIT_WORKERS_FAILED, reason), effects


def scale_up(state: AgentState, event: ev.NodesWaiting, config: AgentConfig) -> Out:
    effects = (
        ev.StopWorkers(reason="scale_up"),
        ev.OpenNextRound(reason="scale_up", after_round=state.round),
        ev.JoinRendezvous(failure=False),
    )
    return state, effects


def rejoin(state: AgentState, event: ev.NextRoundOpened, config: AgentConfig) -> Out:
    reason = f"round {event.round} opened: {event.reason}"
    stop = _stop_if_running(state, reason)
    charged = state.attempt
    if event.reason == ev.PEER_LOST:
        charged = charged_attempt(
            state.attempt, state.attempt_starts, event.now, config.collateral_window
        )
    if charged == state.attempt:
        return evolve(state, held_until=None, barrier_until=None), (
            *stop,
            ev.JoinRendezvous(failure=False),
        )
    # The survivors' workers failed on the lost peer before its loss was reported: the
    # attempts that started since are a membership change, and the next round leaves them out.
    count = count_at_attempt(state, charged)
    refunded = state.attempt - charged
    note = (
        f"a peer's loss caused the last {refunded} restart(s) of round {state.round}: "
        f"not charged (restart count {state.restart_count} -> {count})"
    )
    warning = Emit(name="agent.warning", fields=(("reason", note), ("round", state.round)))
    new = evolve(
        state,
        held_until=None,
        barrier_until=None,
        attempt=charged,
        restart_count=count,
        attempt_starts=(),
    )
    return new, (*stop, warning, ev.JoinRendezvous(failure=False, charged_attempt=charged))


def fence(state: AgentState, event: ev.KeepAliveLapsed, config: AgentConfig) -> Out:
    # Peers may soon find this node dead and form a world without it. It re-joins only once a
    # heartbeat lands again (KeepAliveRestored): joining now, it would train while lapsed and
    # fence again at once, a new round each time.
    reason = f"keep-alive lapsed ({event.reason}): fencing this node's workers"
    warning = Emit(name="agent.warning", fields=(("reason", reason), ("round", state.round)))
    return state, (ev.StopWorkers(reason=reason), warning)


def rejoin_after_fence(state: AgentState, event: ev.KeepAliveRestored, config: AgentConfig) -> Out:
    # Opening the next round (a no-op when peers did) makes sure nobody trains on with this
    # node's ranks.
    effects = (
        ev.OpenNextRound(reason="membership", after_round=state.round),
        ev.JoinRendezvous(failure=False),
    )
    return state, effects


def close_succeeded(state: AgentState, event: ev.ExitBarrierRead, config: AgentConfig) -> Out:
    close = ev.CloseRendezvous(outcome="succeeded", reason="every node finished")
    return _finish(state, EXIT_OK), (close,)


def succeed_unconfirmed(state: AgentState, event: ev.ExitBarrierRead, config: AgentConfig) -> Out:
    warning = Emit(
        name="agent.warning",
        fields=(("reason", "exit barrier timed out"), ("round", state.round)),
    )
    leave = ev.LeaveRendezvous(reason="exit barrier timed out")
    return _finish(state, EXIT_OK), (warning, leave)


def follow_close(state: AgentState, event: ev.RendezvousClosed, config: AgentConfig) -> Out:
    reason = f"rendezvous closed ({event.outcome}): {event.reason}".rstrip(": ")
    stop = _stop_if_running(state, reason)
    if event.outcome == "succeeded":
        return _finish(state, EXIT_OK), stop
    report = ev.ReportFailure(reason=reason, exit_code=EXIT_WORKERS_FAILED)
    return _finish(state, EXIT_WORKERS_FAILED, reason), (*stop, report)


def interrupted(state: AgentState, event: ev.SignalReceived, config: AgentConfig) -> Out:
    reason = f"interrupted by signal {event.signum}"
    code = EXIT_SIGNAL_BASE + event.signum
    joined = state.phase is not AgentPhase.INIT
    leave = (ev.LeaveRendezvous(reason=reason),) if joined else ()
    report = ev.ReportFailure(reason=reason, exit_code=code)
    return _finish(state, code, reason), (*_stop_if_running(state, reason), *leave, report)
