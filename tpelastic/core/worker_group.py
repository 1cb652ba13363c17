"""The worker group machine: the workers of one role on one node, for one attempt.

Every transition of a worker group is in :data:`TABLE`. The group's phase is never assigned by
hand: it is always the fold of its workers' phases (:func:`fold_phase`), so the rows for a
``WorkerEvent`` are guarded by "the fold after this event lands in X" and there is one row per
reachable (from, to) pair. The fold's priority is the order of the checks in :func:`fold_phase`:
one failed worker fails the group (sticky: a failed attempt stays failed), the group succeeds only
when every worker did, a stop order stops it, and otherwise the worst live worker decides.

A worker event the worker machine rejects is passed on: the group stays as it is and returns one
``Rejected`` whose reason quotes the worker's (the unguarded "otherwise" row of each phase).

Effects: on every phase change an ``Emit("worker_group.phase", ...)``; on entering ``FAILED``,
and again on every later failure, a :class:`GroupFailed` listing *all* failures so far with the
earliest first (the root cause is the first failure by time, not the first one reported); on
entering ``SUCCEEDED`` a :class:`GroupSucceeded`. The latest ``GroupFailed`` is authoritative.
"""

from __future__ import annotations

from attrs import evolve, frozen

from tpelastic.core import worker as w

# The group and failure values live in group_values (the launch path imports them without this
# machine); they are this module's names too.
from tpelastic.core.group_values import (
    GroupStarted,
    WorkerFailure,
    WorkerGroup,
    fold_phase,
    make_group,
)
from tpelastic.core.table import Guard, InvalidTransition, Row, Step, build_table
from tpelastic.core.values import Emit, Instant, Rejected, value_eq, value_hash, value_repr
from tpelastic.core.worker import Worker, WorkerState

WS = WorkerState


# -- events ------------------------------------------------------------------------------------


@frozen(kw_only=True)
class WorkerEvent:
    """One worker machine event about the worker at ``local_rank``."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    local_rank: int
    event: w.WorkerEventT

    @property
    def now(self) -> Instant:
        return self.event.now


@frozen(kw_only=True)
class GroupStopped:
    """Every still-live worker of the group was stopped on the agent's order."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    reason: str


GroupEventT = WorkerEvent | GroupStarted | GroupStopped

# -- effects -----------------------------------------------------------------------------------


@frozen(kw_only=True)
class GroupFailed:
    """Effect: the group failed; ``failures`` holds every failure so far, earliest first."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    role: str
    round: int
    failures: tuple[WorkerFailure, ...]


@frozen(kw_only=True)
class GroupSucceeded:
    """Effect: every worker of the group exited with code 0."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    role: str
    round: int


def failures(group: WorkerGroup) -> tuple[WorkerFailure, ...]:
    """The group's failed workers, earliest failure first (ties: lower local rank first)."""
    found = [
        WorkerFailure(
            local_rank=x.local_rank,
            global_rank=x.global_rank,
            exitcode=x.exitcode,
            signal=x.signal,
            at=x.ended_at if x.ended_at is not None else float("-inf"),
            reason=x.reason or f"exitcode {x.exitcode}" + (f" ({x.signal})" if x.signal else ""),
        )
        for x in group.workers
        if x.phase is WS.FAILED
    ]
    return tuple(sorted(found, key=lambda f: (f.at, f.local_rank)))


# -- guards ------------------------------------------------------------------------------------


def _apply(state: WorkerGroup, event: WorkerEvent) -> tuple[Worker, ...] | Rejected:
    """The workers after ``event``, or why it cannot apply (the group stops only as a whole)."""
    if not 0 <= event.local_rank < state.local_world_size:
        return _reject(state, event, f"no worker with local rank {event.local_rank}")
    if isinstance(event.event, w.WorkerStopped):
        return _reject(state, event, "a group is stopped as a whole: send GroupStopped")
    result = w.step(state.workers[event.local_rank], event.event)
    if result.effects and isinstance(result.effects[0], Rejected):
        inner = result.effects[0]
        why = f"worker {event.local_rank} rejects {inner.event} in {inner.phase}: {inner.reason}"
        return _reject(state, event, why)
    workers = list(state.workers)
    workers[event.local_rank] = result.state
    return tuple(workers)


def _reject(state: WorkerGroup, event: WorkerEvent, reason: str) -> Rejected:
    return Rejected(
        machine="worker_group", phase=state.phase.name, event=type(event).__name__, reason=reason
    )


def _lands_in(target: WorkerState) -> Guard:
    def guard(state: WorkerGroup, event: WorkerEvent, config: object) -> bool:
        after = _apply(state, event)
        return not isinstance(after, Rejected) and fold_phase(after) is target

    guard.__doc__ = f"Does the fold of the workers after this event land in {target.name}?"
    return guard


def pids_fit(state: WorkerGroup, event: GroupStarted, config: object) -> bool:
    """Is every worker fresh, with exactly one pid (positive, or None: unknown) per local rank?"""
    fresh = all(x.phase is WS.INIT for x in state.workers)
    known = all(p is None or p > 0 for p in event.pids)
    return fresh and len(event.pids) == state.local_world_size and known


# -- actions -----------------------------------------------------------------------------------

Out = tuple[WorkerGroup, tuple[object, ...]]


def _moved(state: WorkerGroup, workers: tuple[Worker, ...], now: Instant) -> Out:
    """The group with new workers, plus the effects its phase change calls for."""
    phase = fold_phase(workers)
    new = evolve(state, workers=workers, phase=phase)
    effects: list[object] = []
    if phase is not state.phase:
        fields = (("role", state.role), ("from", state.phase.name), ("to", phase.name))
        effects.append(Emit(name="worker_group.phase", fields=(*fields, ("now", now))))
    new_failures = sum(x.phase is WS.FAILED for x in workers)
    if new_failures > sum(x.phase is WS.FAILED for x in state.workers):
        effects.append(GroupFailed(role=state.role, round=state.round, failures=failures(new)))
    elif phase is WS.SUCCEEDED and state.phase is not WS.SUCCEEDED:
        effects.append(GroupSucceeded(role=state.role, round=state.round))
    return new, tuple(effects)


def apply_worker_event(state: WorkerGroup, event: WorkerEvent, config: object) -> Out:
    after = _apply(state, event)
    if isinstance(after, Rejected):  # pragma: no cover - the guards already checked this
        raise InvalidTransition(f"worker_group: guarded row matched a rejected event: {after}")
    return _moved(state, after, event.now)


def pass_on_rejection(state: WorkerGroup, event: WorkerEvent, config: object) -> Out:
    after = _apply(state, event)
    if not isinstance(after, Rejected):
        # The worker accepted the event but no row leads to the fold's phase: a table bug.
        raise InvalidTransition(
            f"worker_group: no row from {state.phase.name} to {fold_phase(after).name}"
        )
    return state, (after,)


def start_all(state: WorkerGroup, event: GroupStarted, config: object) -> Out:
    workers = tuple(
        w.step(x, w.WorkerStarted(now=event.now, pid=pid)).state
        for x, pid in zip(state.workers, event.pids, strict=True)
    )
    return _moved(state, workers, event.now)


def stop_all(state: WorkerGroup, event: GroupStopped, config: object) -> Out:
    stop = w.WorkerStopped(now=event.now)
    workers = tuple(w.step(x, stop).state if x.phase in w.LIVE else x for x in state.workers)
    new, effects = _moved(state, workers, event.now)
    return evolve(new, stop_reason=event.reason), effects


# -- the table ---------------------------------------------------------------------------------

LIVE_GROUP = (WS.INIT, WS.HEALTHY, WS.UNHEALTHY, WS.UNKNOWN)
# Where one worker event can take a group. No worker goes back to INIT, and a group with a worker
# still in INIT cannot have all workers SUCCEEDED after one event.
REACHABLE: dict[WorkerState, tuple[WorkerState, ...]] = {
    WS.INIT: (WS.INIT, WS.HEALTHY, WS.UNHEALTHY, WS.UNKNOWN, WS.FAILED),
    WS.HEALTHY: (WS.HEALTHY, WS.UNHEALTHY, WS.UNKNOWN, WS.FAILED, WS.SUCCEEDED),
    WS.UNHEALTHY: (WS.UNHEALTHY, WS.HEALTHY, WS.UNKNOWN, WS.FAILED, WS.SUCCEEDED),
    WS.UNKNOWN: (WS.UNKNOWN, WS.HEALTHY, WS.UNHEALTHY, WS.FAILED, WS.SUCCEEDED),
    WS.FAILED: (WS.FAILED,),
}
_PASS_ON = "the worker machine rejected the event: state unchanged, its reason is passed on"

# Rows are grouped by event, then by source phase: the order the exported table shows them in.
ROWS = (
    Row(src=WS.INIT, on=GroupStarted, dst=WS.HEALTHY, guard="pids_fit", action="start_all"),
    *(
        row
        for src, dsts in REACHABLE.items()
        for row in (
            *(
                Row(
                    src=src,
                    on=WorkerEvent,
                    dst=dst,
                    guard=f"lands_in_{dst.name.lower()}",
                    action="apply_worker_event",
                )
                for dst in dsts
            ),
            Row(src=src, on=WorkerEvent, dst=src, action="pass_on_rejection", note=_PASS_ON),
        )
    ),
    *(Row(src=src, on=GroupStopped, dst=WS.STOPPED, action="stop_all") for src in LIVE_GROUP),
    Row(
        src=WS.FAILED,
        on=GroupStopped,
        dst=WS.FAILED,
        action="stop_all",
        note="the survivors are stopped; the group keeps its verdict",
    ),
)

GUARDS: dict[str, Guard] = {
    f"lands_in_{p.name.lower()}": _lands_in(p)
    for p in (WS.INIT, WS.HEALTHY, WS.UNHEALTHY, WS.UNKNOWN, WS.FAILED, WS.SUCCEEDED)
}
GUARDS["pids_fit"] = pids_fit

TABLE = build_table(
    name="worker_group",
    phases=WorkerState,
    initial=WS.INIT,
    events=(WorkerEvent, GroupStarted, GroupStopped),
    rows=ROWS,
    guards=GUARDS,
    actions={
        "apply_worker_event": apply_worker_event,
        "pass_on_rejection": pass_on_rejection,
        "start_all": start_all,
        "stop_all": stop_all,
    },
    terminal=frozenset({WS.SUCCEEDED, WS.STOPPED}),
    doc=(
        "Every transition of a worker group (one role's workers on one node, one attempt) is in "
        "this table; guards and actions live in `tpelastic/core/worker_group.py`. The group's "
        "phase is always the fold of its workers' phases: any worker `FAILED` makes the group "
        "`FAILED` (and it stays so), all `SUCCEEDED` makes it `SUCCEEDED`, then `STOPPED`, "
        "`UNKNOWN`, `UNHEALTHY`, `INIT` in that order, else `HEALTHY`. A `WorkerEvent` row is "
        "guarded by where that fold lands; the unguarded `WorkerEvent` row of each phase passes "
        "on the worker machine's rejection with the group unchanged. Failures are reported "
        "earliest first: the root cause is the first failure by time."
    ),
)


def step(state: WorkerGroup, event: GroupEventT, config: object = None) -> Step[WorkerGroup]:
    """Apply one observation to a worker group.

    Args:
        state: the group as it is.
        event: a wrapped worker event, or the whole group started or stopped.
        config: unused; present so every machine's ``step`` has the same shape.

    Returns:
        The next group and its effects. A rejected event leaves ``state`` unchanged and returns
        one ``Rejected`` effect. Raises ``InvalidTransition`` only on a bug in this table.
    """
    return TABLE.step(state, event, config)


__all__ = [
    "TABLE",
    "GroupFailed",
    "GroupStarted",
    "GroupStopped",
    "GroupSucceeded",
    "WorkerEvent",
    "WorkerFailure",
    "WorkerGroup",
    "failures",
    "fold_phase",
    "make_group",
    "step",
]
