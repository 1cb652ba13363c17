"""In-process restart: which of a node's workers keep their process across a restart.

Workers that run their training through ``tpelastic.worker.run`` attach to the agent over a
local control channel. When the agent restarts the round in place (its ``StopWorkers`` and
``StartWorkers`` in one step), the node's composed step (``tpelastic.core.node``) asks this
table: with attached, live workers it replaces them by :class:`PauseWorkers` (stop training,
keep the process) and :class:`ResumeWorkers` (start the attempt: the kept workers re-initialise
in process, only the others are respawned). Every kept worker must answer: ``stopped`` within
``stop_timeout`` of the pause, ``started`` (its process group formed again) within
``start_timeout`` of the workers' start. A worker that does not answer in time, or whose
re-initialisation fails, makes the node fall back to a full restart of the same attempt: the
agent's own ``StopWorkers`` (every process) and the ``StartWorkers`` it ordered. Any other stop
of the workers (a new round, the end of the job) is the agent's ``StopWorkers`` as it is, and
the attached workers go with it.

Pure: time and observations come in as arguments (specs/in_process.md).
"""

from __future__ import annotations

import enum

from attrs import evolve, field, frozen

from tpelastic.core.agent.events import StartWorkers, StopWorkers
from tpelastic.core.table import Action, Guard, Row, Step, build_table
from tpelastic.core.values import Duration, Instant, value_eq, value_hash, value_repr


class RestartPhase(enum.Enum):
    OFF = "off"
    """No worker of the current processes speaks the control channel: restarts are full."""
    READY = "ready"
    """At least one live worker is attached: a restart in place keeps it."""
    RESTARTING = "restarting"
    """Kept workers were told to stop and start again; their answers are due."""


P = RestartPhase


@frozen(kw_only=True)
class InProcessConfig:
    """How long a kept worker may take to answer (seconds)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    stop_timeout: Duration = 5.0
    start_timeout: Duration = 60.0


@frozen(kw_only=True)
class InProcessState:
    """``attached``: live workers of the current processes that speak the channel.
    While RESTARTING: ``kept`` (the workers restarted in process), those whose ``stopped`` or
    ``started`` answer is still due, the ``deadline`` of the earliest due answer and the
    ``start`` to carry out again on a fallback."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: RestartPhase = P.OFF
    local_world_size: int = 1
    attached: frozenset[int] = frozenset()
    kept: frozenset[int] = frozenset()
    unstopped: frozenset[int] = frozenset()
    unstarted: frozenset[int] = frozenset()
    stop_deadline: Instant | None = None
    start_deadline: Instant | None = None
    start: StartWorkers | None = field(default=None)

    @property
    def deadline(self) -> Instant | None:
        """When the driver must report the time (``RestartTimePassed``), if an answer is due."""
        due = [d for d in (self.stop_deadline, self.start_deadline) if d is not None]
        return min(due) if due else None


# -- events: observations of the control channel, and the node step's own -------------------


@frozen(kw_only=True)
class WorkerAttached:
    """The worker at ``local_rank`` attached over its control channel (it runs the API)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    local_rank: int


@frozen(kw_only=True)
class WorkerDetached:
    """The control channel of the worker at ``local_rank`` closed: its process ended (or it
    closed its end), so no restart can keep it."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    local_rank: int


@frozen(kw_only=True)
class WorkerPaused:
    """A kept worker answered ``stopped``: its training stopped and its process group is gone."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    local_rank: int


@frozen(kw_only=True)
class WorkerResumed:
    """A kept worker answered ``started``: it re-initialised and trains again."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    local_rank: int


@frozen(kw_only=True)
class WorkerReinitFailed:
    """A kept worker could not re-initialise (the exception's one line in ``reason``)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    local_rank: int
    reason: str


@frozen(kw_only=True)
class RestartTimePassed:
    """The driver's clock at or after the state's ``deadline``."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class RestartOrdered:
    """The agent ordered ``stop`` and a new attempt of the same world in one step: its
    ``start`` with it (a member following an attempt), or None when the start comes once the
    attempt's open landed (``StartOrdered``: the opener)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    stop: StopWorkers
    start: StartWorkers | None


@frozen(kw_only=True)
class StartOrdered:
    """The agent ordered ``start`` alone (a round's first start, or an attempt it opened)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    start: StartWorkers


@frozen(kw_only=True)
class StopOrdered:
    """The agent ordered ``stop`` alone: every process goes (a new round, the job's end)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    stop: StopWorkers


@frozen(kw_only=True)
class WorkersGone:
    """These local ranks' processes exited."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    local_ranks: frozenset[int]


@frozen(kw_only=True)
class WorkersRunning:
    """The driver started (or resumed) the current start's workers."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


CHANNEL_EVENTS: tuple[type, ...] = (
    WorkerAttached,
    WorkerDetached,
    WorkerPaused,
    WorkerResumed,
    WorkerReinitFailed,
    RestartTimePassed,
)
"""What a driver observes on the control channels (and its clock), stepped by the node."""

EVENTS: tuple[type, ...] = (
    *CHANNEL_EVENTS,
    RestartOrdered,
    StartOrdered,
    StopOrdered,
    WorkersGone,
    WorkersRunning,
)

# -- effects ---------------------------------------------------------------------------------


@frozen(kw_only=True)
class PauseWorkers:
    """Tell the ``keep`` workers to stop training and wait; stop the ``respawn`` ones' processes
    (those still running). Nothing else of the agent's stop changes (its ``reason``)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    reason: str
    keep: frozenset[int]
    respawn: frozenset[int]


@frozen(kw_only=True)
class ResumeWorkers:
    """Carry out ``start`` with the ``keep`` workers re-initialised in process (told the new
    world over their channel) and a fresh process for each ``respawn`` one only."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    start: StartWorkers
    keep: frozenset[int]
    respawn: frozenset[int]


EFFECTS: tuple[type, ...] = (PauseWorkers, ResumeWorkers)

# -- guards and actions -----------------------------------------------------------------------

Out = tuple[InProcessState, tuple[object, ...]]


def attach(state: InProcessState, event: WorkerAttached, config: InProcessConfig) -> Out:
    return evolve(state, attached=state.attached | {event.local_rank}), ()


def restart_in_process(
    state: InProcessState, event: RestartOrdered, config: InProcessConfig
) -> Out:
    keep = state.attached
    respawn = frozenset(range(state.local_world_size)) - keep
    new = evolve(
        state,
        kept=keep,
        unstopped=keep,
        unstarted=frozenset(),
        stop_deadline=event.now + config.stop_timeout,
        start_deadline=None,
        start=event.start,
    )
    pause = PauseWorkers(reason=event.stop.reason, keep=keep, respawn=respawn)
    return new, (pause,)


def _resume(state: InProcessState) -> Out:
    """Every kept worker stopped (or left): start the attempt, keeping those still attached,
    once the agent ordered it."""
    if state.unstopped or state.start is None:
        return state, ()
    keep = state.kept
    respawn = frozenset(range(state.local_world_size)) - keep
    new = evolve(state, unstarted=keep, stop_deadline=None)
    return new, (ResumeWorkers(start=state.start, keep=keep, respawn=respawn),)


def restart_fully(state: InProcessState, event: RestartOrdered, config: InProcessConfig) -> Out:
    return _off(state), (event.stop,) if event.start is None else (event.stop, event.start)


def _off(state: InProcessState) -> InProcessState:
    return InProcessState(local_world_size=state.local_world_size)


def stop_all(state: InProcessState, event: StopOrdered, config: InProcessConfig) -> Out:
    return _off(state), (event.stop,)


def _fall_back(state: InProcessState, why: str) -> Out:
    """Every process stopped, and the attempt started as without the API (at once when the
    agent ordered it; else its start goes out as it is when it comes, the node being OFF)."""
    stop = StopWorkers(reason=f"in-process restart failed: {why}; full restart")
    return _off(state), (stop,) if state.start is None else (stop, state.start)


def start_held(state: InProcessState, event: StartOrdered, config: InProcessConfig) -> Out:
    return _resume(evolve(state, start=event.start))


def start_as_ordered(state: InProcessState, event: StartOrdered, config: InProcessConfig) -> Out:
    return state, (event.start,)


def awaiting_start(state: InProcessState, event: StartOrdered, c: InProcessConfig) -> bool:
    return state.start is None


def start_given(state: InProcessState, event: StartOrdered, c: InProcessConfig) -> bool:
    return state.start is not None


def second_start(state: InProcessState, event: StartOrdered, config: InProcessConfig) -> Out:
    return _off(state), (
        StopWorkers(reason="a second start while restarting in process"),
        event.start,
    )


def paused(state: InProcessState, event: WorkerPaused, config: InProcessConfig) -> Out:
    return _resume(evolve(state, unstopped=state.unstopped - {event.local_rank}))


def resumed(state: InProcessState, event: WorkerResumed, config: InProcessConfig) -> Out:
    unstarted = state.unstarted - {event.local_rank}
    deadline = state.start_deadline if unstarted else None
    return evolve(state, unstarted=unstarted, start_deadline=deadline), ()


def all_started(state: InProcessState, event: WorkerResumed, c: InProcessConfig) -> bool:
    return state.unstarted <= {event.local_rank} and not state.unstopped


def starts_due(state: InProcessState, event: WorkerResumed, c: InProcessConfig) -> bool:
    return not all_started(state, event, c)


def reinit_failed(state: InProcessState, event: WorkerReinitFailed, config: InProcessConfig) -> Out:
    return _fall_back(state, f"local rank {event.local_rank}: {event.reason}")


def deadline_over(state: InProcessState, event: RestartTimePassed, c: InProcessConfig) -> bool:
    due = state.deadline
    return due is not None and event.now >= due


def deadline_on(state: InProcessState, event: RestartTimePassed, c: InProcessConfig) -> bool:
    return not deadline_over(state, event, c)


def timed_out(state: InProcessState, event: RestartTimePassed, config: InProcessConfig) -> Out:
    if state.unstopped and state.stop_deadline is not None and event.now >= state.stop_deadline:
        ranks, what, bound = state.unstopped, "stopped", config.stop_timeout
    else:
        ranks, what, bound = state.unstarted, "started", config.start_timeout
    names = ", ".join(str(r) for r in sorted(ranks))
    return _fall_back(state, f"local rank {names} did not answer {what!r} within {bound:g}s")


def _ranks(event: WorkersGone | WorkerDetached) -> frozenset[int]:
    return event.local_ranks if isinstance(event, WorkersGone) else frozenset({event.local_rank})


def gone_while_restarting(
    state: InProcessState, event: WorkersGone | WorkerDetached, c: InProcessConfig
) -> bool:
    """A kept worker's process ended after its world was started again (it was told the new
    world): that start cannot be trusted."""
    return bool(_ranks(event) & state.kept) and not state.unstopped


def gone_while_stopping(
    state: InProcessState, event: WorkersGone | WorkerDetached, c: InProcessConfig
) -> bool:
    """A kept worker's process ended before the start: it is respawned with the others."""
    return bool(_ranks(event) & state.kept) and bool(state.unstopped)


def respawn_instead(
    state: InProcessState, event: WorkersGone | WorkerDetached, config: InProcessConfig
) -> Out:
    ranks = _ranks(event)
    new = evolve(
        state,
        attached=state.attached - ranks,
        kept=state.kept - ranks,
        unstopped=state.unstopped - ranks,
    )
    return _resume(new)


def died_while_kept(
    state: InProcessState, event: WorkersGone | WorkerDetached, config: InProcessConfig
) -> Out:
    names = ", ".join(str(r) for r in sorted(_ranks(event) & state.kept))
    return _fall_back(state, f"local rank {names} exited while restarting in process")


def forget(
    state: InProcessState, event: WorkersGone | WorkerDetached, config: InProcessConfig
) -> Out:
    return evolve(state, attached=state.attached - _ranks(event)), ()


def nobody_left(
    state: InProcessState, event: WorkersGone | WorkerDetached, c: InProcessConfig
) -> bool:
    return not (state.attached - _ranks(event))


def running(state: InProcessState, event: WorkersRunning, config: InProcessConfig) -> Out:
    if state.unstarted and state.start_deadline is None:
        return evolve(state, start_deadline=event.now + config.start_timeout), ()
    return state, ()


def nothing_due(state: InProcessState, event: WorkersRunning, c: InProcessConfig) -> bool:
    return not state.unstopped and not state.unstarted


GUARDS: dict[str, Guard] = {
    "awaiting_start": awaiting_start,
    "start_given": start_given,
    "nothing_due": nothing_due,
    "all_started": all_started,
    "starts_due": starts_due,
    "deadline_over": deadline_over,
    "deadline_on": deadline_on,
    "kept_worker_gone": gone_while_restarting,
    "kept_worker_gone_early": gone_while_stopping,
    "nobody_left": nobody_left,
}
ACTIONS: dict[str, Action] = {
    "start_held": start_held,
    "start_as_ordered": start_as_ordered,
    "second_start": second_start,
    "attach": attach,
    "restart_in_process": restart_in_process,
    "restart_fully": restart_fully,
    "stop_all": stop_all,
    "paused": paused,
    "resumed": resumed,
    "reinit_failed": reinit_failed,
    "timed_out": timed_out,
    "died_while_kept": died_while_kept,
    "respawn_instead": respawn_instead,
    "forget": forget,
    "running": running,
}

_NOTHING = "not a kept worker's answer now: nothing to do"
ROWS = (
    Row(src=P.OFF, on=WorkerAttached, dst=P.READY, action="attach"),
    Row(src=P.READY, on=WorkerAttached, dst=P.READY, action="attach"),
    Row(
        src=P.RESTARTING,
        on=WorkerAttached,
        dst=P.RESTARTING,
        action="attach",
        note="a respawned worker: kept at the next restart",
    ),
    Row(src=P.OFF, on=RestartOrdered, dst=P.OFF, action="restart_fully"),
    Row(
        src=P.READY,
        on=RestartOrdered,
        dst=P.RESTARTING,
        action="restart_in_process",
        note="keep the attached workers, respawn the others",
    ),
    Row(
        src=P.RESTARTING,
        on=RestartOrdered,
        dst=P.OFF,
        action="restart_fully",
        note="a restart before the kept workers answered the last: not trusted, every process",
    ),
    *(Row(src=src, on=StopOrdered, dst=P.OFF, action="stop_all") for src in P),
    *(
        Row(src=src, on=StartOrdered, dst=src, action="start_as_ordered")
        for src in (P.OFF, P.READY)
    ),
    Row(
        src=P.RESTARTING,
        on=StartOrdered,
        dst=P.RESTARTING,
        guard="awaiting_start",
        action="start_held",
        note="the attempt's open landed: held until the kept workers stopped",
    ),
    Row(
        src=P.RESTARTING,
        on=StartOrdered,
        dst=P.OFF,
        guard="start_given",
        action="second_start",
        note="cannot happen while the agent follows its table: every process",
    ),
    Row(
        src=P.RESTARTING,
        on=WorkerPaused,
        dst=P.RESTARTING,
        action="paused",
        note="the last kept worker stopped: ResumeWorkers (the agent's StartWorkers, in process)",
    ),
    Row(src=P.RESTARTING, on=WorkerResumed, dst=P.READY, guard="all_started", action="resumed"),
    Row(src=P.RESTARTING, on=WorkerResumed, dst=P.RESTARTING, guard="starts_due", action="resumed"),
    *(
        Row(src=src, on=on, dst=src, note=_NOTHING)
        for src in (P.OFF, P.READY)
        for on in (WorkerPaused, WorkerResumed, WorkerReinitFailed, RestartTimePassed)
    ),
    Row(src=P.RESTARTING, on=WorkerReinitFailed, dst=P.OFF, action="reinit_failed"),
    Row(
        src=P.RESTARTING,
        on=RestartTimePassed,
        dst=P.OFF,
        guard="deadline_over",
        action="timed_out",
        note="a kept worker did not answer in time: full restart of the same attempt",
    ),
    Row(src=P.RESTARTING, on=RestartTimePassed, dst=P.RESTARTING, guard="deadline_on"),
    *(
        row
        for on in (WorkersGone, WorkerDetached)
        for row in (
            Row(src=P.OFF, on=on, dst=P.OFF),
            Row(src=P.READY, on=on, dst=P.OFF, guard="nobody_left", action="forget"),
            Row(src=P.READY, on=on, dst=P.READY, action="forget"),
            Row(
                src=P.RESTARTING,
                on=on,
                dst=P.OFF,
                guard="kept_worker_gone",
                action="died_while_kept",
                note="a kept worker's process ended after the start: full restart of it",
            ),
            Row(
                src=P.RESTARTING,
                on=on,
                dst=P.RESTARTING,
                guard="kept_worker_gone_early",
                action="respawn_instead",
                note="a kept worker's process ended before the start: respawn it instead",
            ),
            Row(src=P.RESTARTING, on=on, dst=P.RESTARTING, action="forget"),
        )
    ),
    *(Row(src=src, on=WorkersRunning, dst=src, action="running") for src in (P.OFF, P.READY)),
    Row(
        src=P.RESTARTING,
        on=WorkersRunning,
        dst=P.READY,
        guard="nothing_due",
        note="every worker was respawned: nothing kept to answer",
    ),
    Row(src=P.RESTARTING, on=WorkersRunning, dst=P.RESTARTING, action="running"),
)

TABLE = build_table(
    name="in_process",
    phases=RestartPhase,
    initial=P.OFF,
    events=EVENTS,
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    doc=(
        "Which workers keep their process across a restart of the same world, stepped by the "
        "node's composed step. Workers that run `tpelastic.worker.run` attach over their "
        "control channel (READY). The agent's StopWorkers and StartWorkers in one step "
        "(RestartOrdered) become PauseWorkers and ResumeWorkers: the attached workers are "
        "kept and re-initialise in process, the others are respawned. A kept worker that "
        "does not answer `stopped` within `stop_timeout` or `started` within `start_timeout`, "
        "fails to re-initialise or exits meanwhile makes the node fall back to the agent's "
        "StopWorkers (every process) and the same StartWorkers: a full restart of the same "
        "attempt, no budget spent. Any stop alone (StopOrdered) stops every process."
    ),
)


def step(state: InProcessState, event: object, config: InProcessConfig) -> Step[InProcessState]:
    """Decide after one observation; a rejected one leaves ``state`` and says why."""
    return TABLE.step(state, event, config)


__all__ = [
    "CHANNEL_EVENTS",
    "EFFECTS",
    "EVENTS",
    "TABLE",
    "InProcessConfig",
    "InProcessState",
    "PauseWorkers",
    "RestartOrdered",
    "RestartPhase",
    "RestartTimePassed",
    "ResumeWorkers",
    "StartOrdered",
    "StopOrdered",
    "WorkerAttached",
    "WorkerDetached",
    "WorkerPaused",
    "WorkerReinitFailed",
    "WorkerResumed",
    "WorkersGone",
    "WorkersRunning",
    "step",
]
