"""The worker group's values: the group (:class:`WorkerGroup`, :func:`make_group`, its phase
:func:`fold_phase`), one failed worker (:class:`WorkerFailure`) and the group's start
(:class:`GroupStarted`, the observation a driver makes once a start's workers run).

Split from :mod:`tpelastic.core.worker_group` (which re-exports them and holds the group machine:
its events, rows and table) because the agent and its machine need these values before the
first worker starts and the group machine never: importing it (with the worker machine) is
about 1.2 ms of every launch (issue 5, docs/benchmarks-launcher.md). The rules are explained in
worker_group's docstring.
"""

from __future__ import annotations

from collections.abc import Iterable

from attrs import field, frozen, validators

from tpelastic.core.values import Instant, value_eq, value_hash, value_repr
from tpelastic.core.worker_values import Worker, WorkerState

WS = WorkerState


@frozen(kw_only=True)
class GroupStarted:
    """The whole group was started at once: ``pids[i]`` runs local rank ``i`` (None: the agent
    cannot tell that pid)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    pids: tuple[int | None, ...]


def fold_phase(workers: Iterable[Worker]) -> WorkerState:
    """The group phase its workers' phases add up to (the priority is the order of the checks)."""
    phases = [x.phase for x in workers]
    if WS.FAILED in phases:
        return WS.FAILED
    if all(p is WS.SUCCEEDED for p in phases):
        return WS.SUCCEEDED
    for phase in (WS.STOPPED, WS.UNKNOWN, WS.UNHEALTHY, WS.INIT):
        if phase in phases:
            return phase
    return WS.HEALTHY  # every worker is running or already succeeded


def _workers_valid(instance: WorkerGroup, _attribute: object, value: tuple[Worker, ...]) -> None:
    if len(value) != instance.local_world_size:
        raise ValueError(
            f"workers must have local_world_size={instance.local_world_size} entries, "
            f"got {len(value)}"
        )
    for index, slot in enumerate(value):
        if slot.local_rank != index:
            raise ValueError(f"workers[{index}] has local_rank {slot.local_rank}, expected {index}")


def _phase_is_fold(instance: WorkerGroup, _attribute: object, value: WorkerState) -> None:
    if instance.workers and value is not fold_phase(instance.workers):
        folded = fold_phase(instance.workers).name
        raise ValueError(f"phase {value.name} disagrees with its workers' phases (fold: {folded})")


@frozen(kw_only=True)
class WorkerGroup:
    """The spec-level facts of one role's workers on one node for one attempt."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    role: str = field(validator=validators.min_len(1))
    local_world_size: int = field(validator=validators.ge(1))
    round: int = field(validator=validators.ge(0))  # the rendezvous round the ranks come from
    restart_count: int = field(validator=validators.ge(0))  # job-wide, agreed in that round
    workers: tuple[Worker, ...] = field(validator=_workers_valid)
    # Invariant: always fold_phase(workers) (checked on every construction and evolve).
    phase: WorkerState = field(validator=_phase_is_fold)
    stop_reason: str | None = None


def make_group(
    *,
    role: str,
    local_world_size: int,
    round: int,
    restart_count: int,
    group_rank: int,
    group_world_size: int,
) -> WorkerGroup:
    """A fresh group (all workers INIT) with homogeneous ranks: node ``group_rank`` owns a block.

    Raises:
        ValueError: a rank or size is out of range (the message names the field).
    """
    if not 0 <= group_rank < group_world_size:
        raise ValueError(f"group_rank must be in [0, {group_world_size}), got {group_rank}")
    world = group_world_size * local_world_size
    workers = tuple(
        Worker(
            local_rank=i,
            global_rank=group_rank * local_world_size + i,
            role_rank=group_rank * local_world_size + i,
            world_size=world,
            role_world_size=world,
        )
        for i in range(local_world_size)
    )
    return WorkerGroup(
        role=role,
        local_world_size=local_world_size,
        round=round,
        restart_count=restart_count,
        workers=workers,
        phase=WS.INIT,
    )


@frozen(kw_only=True)
class WorkerFailure:
    """One failed worker: the facts a failure report needs."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    local_rank: int
    global_rank: int
    exitcode: int | None
    signal: str | None
    at: Instant  # when the failure was observed (on this node's clock)
    reason: str = ""


__all__ = ["GroupStarted", "WorkerFailure", "WorkerGroup", "fold_phase", "make_group"]
