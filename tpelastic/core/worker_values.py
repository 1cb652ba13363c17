"""The worker machine's values: a slot (:class:`Worker`) and its phase (`WorkerState`).

Split from :mod:`tpelastic.core.worker` (which re-exports both and holds the machine: its events,
rows and table) because the agent needs the values before its first worker starts and the
machine never: importing the machine is about 1.3 ms of every launch (issue 5,
docs/benchmarks-launcher.md).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from attrs import field, frozen

from tpelastic.core.values import Instant, value_eq, value_hash, value_repr


class WorkerState(enum.Enum):
    """Phase of one worker slot (and, folded, of a worker group)."""

    INIT = "INIT"  # created, process not (yet confirmed) started
    HEALTHY = "HEALTHY"  # running and making progress
    UNHEALTHY = "UNHEALTHY"  # running but a hang was detected
    SUCCEEDED = "SUCCEEDED"  # exited with code 0
    FAILED = "FAILED"  # exited with an error code or a signal
    STOPPED = "STOPPED"  # stopped on the agent's order
    UNKNOWN = "UNKNOWN"  # the process vanished without an exit status

    @staticmethod
    def is_running(state: WorkerState) -> bool:
        """Whether workers in ``state`` are still running (``HEALTHY`` or ``UNHEALTHY``)."""
        return state in (WorkerState.HEALTHY, WorkerState.UNHEALTHY)


def _non_negative(_instance: object, attribute: object, value: int) -> None:
    if value < 0:
        raise ValueError(f"{getattr(attribute, 'name', 'value')} must be >= 0, got {value!r}")


def _size(_instance: object, attribute: object, value: int) -> None:
    # -1 is torch's "not assigned yet"; any other size has at least one member.
    if value != -1 and value < 1:
        raise ValueError(f"{getattr(attribute, 'name', 'value')} must be >= 1, got {value!r}")


def _below(limit_field: str) -> Callable[[object, object, int], None]:
    def check(instance: object, attribute: object, value: int) -> None:
        limit = getattr(instance, limit_field)
        name = getattr(attribute, "name", "value")
        if limit == -1 and value == -1:  # neither assigned yet
            return
        if not 0 <= value < limit:
            raise ValueError(f"{name} must be in [0, {limit_field}={limit}), got {value!r}")

    return check


@frozen
class Worker:
    """One worker slot: its ranks (fixed for the slot's life) and what is known of its process."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    local_rank: int = field(validator=_non_negative)
    global_rank: int = field(default=-1, validator=_below("world_size"))
    role_rank: int = field(default=-1, validator=_below("role_world_size"))
    world_size: int = field(default=-1, validator=_size)
    role_world_size: int = field(default=-1, validator=_size)
    phase: WorkerState = field(default=WorkerState.INIT, kw_only=True)
    # set once, on start: one slot is one process
    pid: int | None = field(default=None, kw_only=True)
    # set on exit; None while running, stopped or lost
    exitcode: int | None = field(default=None, kw_only=True)
    # name of the signal that ended the process, if any
    signal: str | None = field(default=None, kw_only=True)
    # when the current hang was first seen
    stalled_since: Instant | None = field(default=None, kw_only=True)
    # when the exit or stop was observed
    ended_at: Instant | None = field(default=None, kw_only=True)
    # why the process ended badly, as its observer put it (None: only the exit status is known)
    reason: str | None = field(default=None, kw_only=True)

    @property
    def id(self) -> int | None:
        """torch's worker id: here the process id once started (None before)."""
        return self.pid


__all__ = ["Worker", "WorkerState"]
