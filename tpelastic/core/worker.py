"""The worker machine: the lifecycle of one worker slot (one local rank of one group).

Every transition of a worker slot is in :data:`TABLE`; guards and actions are the small pure
functions below and nothing else changes a :class:`Worker`. The machine does not know which node it
runs on, never reads a clock (every event carries ``now``) and performs no I/O: the driver feeds it
what the process adapter observed.

A slot lives for one attempt. ``SUCCEEDED``, ``FAILED`` and ``STOPPED`` are terminal: a restart
builds new slots from the next rendezvous round instead of reviving old ones, so a slot's ``pid``
and exit status are facts about exactly one process.
"""

from __future__ import annotations

from attrs import evolve, field, frozen, validators

from tpelastic.core.table import Row, Step, build_table
from tpelastic.core.values import Instant, value_eq, value_hash, value_repr

# The slot and its phase live in worker_values (the launch path imports them without this
# machine); they are this module's names too.
from tpelastic.core.worker_values import Worker, WorkerState

# -- events: what the process adapter observed, each at the observer's ``now`` ------------------


@frozen(kw_only=True)
class WorkerStarted:
    """The worker's process is running with this pid (None: the agent cannot tell its pid)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    pid: int | None = field(validator=validators.optional(validators.ge(1)))


@frozen(kw_only=True)
class WorkerExited:
    """The worker's process exited with ``exitcode`` (and ``signal`` if a signal ended it);
    ``reason`` is what the observer knows of why (its message, a timer that killed it)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    exitcode: int
    signal: str | None = None
    reason: str = ""


@frozen(kw_only=True)
class ProgressStalled:
    """No progress was seen from the worker for longer than the hang limit."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class ProgressResumed:
    """A stalled worker made progress again."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class WorkerStopped:
    """The worker was stopped on the agent's order (its exit status is not a verdict)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class WorkerLost:
    """The worker's process vanished and no exit status could be collected (yet)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


WorkerEventT = (
    WorkerStarted | WorkerExited | ProgressStalled | ProgressResumed | WorkerStopped | WorkerLost
)
WORKER_EVENTS: tuple[type, ...] = (
    WorkerStarted,
    WorkerExited,
    ProgressStalled,
    ProgressResumed,
    WorkerStopped,
    WorkerLost,
)

# -- guards -------------------------------------------------------------------------------------


def exited_cleanly(state: Worker, event: WorkerExited, config: object) -> bool:
    """Did the process exit with code 0 and no signal?"""
    return event.exitcode == 0 and event.signal is None


def exited_with_error(state: Worker, event: WorkerExited, config: object) -> bool:
    """Did the process exit with a non-zero code or by a signal?"""
    return not exited_cleanly(state, event, config)


# -- actions ------------------------------------------------------------------------------------

Out = tuple[Worker, tuple[object, ...]]


def record_start(state: Worker, event: WorkerStarted, config: object) -> Out:
    return evolve(state, pid=event.pid), ()


def record_exit(state: Worker, event: WorkerExited, config: object) -> Out:
    exited = evolve(state, exitcode=event.exitcode, signal=event.signal, ended_at=event.now)
    return evolve(exited, reason=event.reason or None), ()


def record_stall(state: Worker, event: ProgressStalled, config: object) -> Out:
    return evolve(state, stalled_since=event.now), ()


def record_resume(state: Worker, event: ProgressResumed, config: object) -> Out:
    return evolve(state, stalled_since=None), ()


def record_stop(state: Worker, event: WorkerStopped, config: object) -> Out:
    return evolve(state, ended_at=event.now, stalled_since=None), ()


W = WorkerState
# Rows are grouped by event, then by source phase: the order the exported table shows them in.
_EXIT_NOTE = {
    W.INIT: "died before its start was confirmed; a clean exit here is rejected",
    W.UNKNOWN: "a late exit status settles a lost worker",
}
ROWS = (
    Row(src=W.INIT, on=WorkerStarted, dst=W.HEALTHY, action="record_start"),
    Row(
        src=W.INIT,
        on=WorkerExited,
        dst=W.FAILED,
        guard="exited_with_error",
        action="record_exit",
        note=_EXIT_NOTE[W.INIT],
    ),
    *(
        Row(src=src, on=WorkerExited, dst=dst, guard=guard, action="record_exit", note=note)
        for src in (W.HEALTHY, W.UNHEALTHY, W.UNKNOWN)
        for dst, guard in ((W.SUCCEEDED, "exited_cleanly"), (W.FAILED, "exited_with_error"))
        for note in (_EXIT_NOTE.get(src, ""),)
    ),
    Row(src=W.HEALTHY, on=ProgressStalled, dst=W.UNHEALTHY, action="record_stall"),
    Row(
        src=W.UNHEALTHY,
        on=ProgressStalled,
        dst=W.UNHEALTHY,
        note="still stalled: the first stall time is kept",
    ),
    Row(src=W.UNHEALTHY, on=ProgressResumed, dst=W.HEALTHY, action="record_resume"),
    *(
        Row(src=src, on=WorkerStopped, dst=W.STOPPED, action="record_stop")
        for src in (W.INIT, W.HEALTHY, W.UNHEALTHY, W.UNKNOWN)
    ),
    *(Row(src=src, on=WorkerLost, dst=W.UNKNOWN) for src in (W.HEALTHY, W.UNHEALTHY)),
)

TERMINAL = frozenset({W.SUCCEEDED, W.FAILED, W.STOPPED})
LIVE = frozenset({W.INIT, W.HEALTHY, W.UNHEALTHY, W.UNKNOWN})

TABLE = build_table(
    name="worker",
    phases=WorkerState,
    initial=W.INIT,
    events=WORKER_EVENTS,
    rows=ROWS,
    guards={"exited_cleanly": exited_cleanly, "exited_with_error": exited_with_error},
    actions={
        "record_start": record_start,
        "record_exit": record_exit,
        "record_stall": record_stall,
        "record_resume": record_resume,
        "record_stop": record_stop,
    },
    terminal=TERMINAL,
    doc=(
        "Every transition of one worker slot is in this table; guards and actions are defined in "
        "`tpelastic/core/worker.py` and nothing else changes a `Worker`. The table does not know "
        "which node it runs on and reads no clock: each event carries `now`. A slot serves one "
        "process for one attempt, so `SUCCEEDED`, `FAILED` and `STOPPED` are terminal; a restart "
        "makes new slots. `STOPPED` is reachable only from the live phases (`INIT`, `HEALTHY`, "
        "`UNHEALTHY`, `UNKNOWN`): a finished worker keeps its verdict when its group is stopped."
    ),
)


def step(state: Worker, event: WorkerEventT, config: object = None) -> Step[Worker]:
    """Apply one observation to one worker slot.

    Args:
        state: the slot as it is.
        event: what the process adapter observed.
        config: unused; present so every machine's ``step`` has the same shape.

    Returns:
        The next slot and its effects. An event the table has no row for (or whose guards all
        fail) leaves ``state`` unchanged and returns one ``Rejected`` effect; it never raises.
    """
    return TABLE.step(state, event, config)


__all__ = [
    "LIVE",
    "TABLE",
    "TERMINAL",
    "WORKER_EVENTS",
    "ProgressResumed",
    "ProgressStalled",
    "Worker",
    "WorkerEventT",
    "WorkerExited",
    "WorkerLost",
    "WorkerStarted",
    "WorkerState",
    "WorkerStopped",
    "step",
]
