"""Turning worker-process results into the agent machine's observations and into summaries."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.workers.api import ChildFailedError, ProcessFailure
from tpelastic.core.values import Instant
from tpelastic.core.worker_group import WorkerFailure

log = logging.getLogger("tpelastic.agent")


def to_worker_failures(
    failures: dict[int, ProcessFailure],
    *,
    group_rank: int,
    local_world_size: int,
    now: Instant,
    reasons: Mapping[int, str] | None = None,
    wall_now: float | None = None,
) -> tuple[WorkerFailure, ...]:
    """The core's failure values for ``failures`` (keyed by local rank), earliest first.

    Wall-clock failure times are moved onto the agent's monotonic clock (``now`` is the
    monotonic reading that goes with the wall time ``wall_now``), keeping their order.
    ``reasons`` (by local rank) replaces the process's own message, e.g. for a worker its
    timer killed.
    """
    reasons = reasons or {}
    wall_now = SYSTEM_CLOCK.wall() if wall_now is None else wall_now
    found = [
        WorkerFailure(
            local_rank=local_rank,
            global_rank=group_rank * local_world_size + local_rank,
            exitcode=failure.exitcode,
            signal=failure.signal_name(),
            at=now - max(0.0, wall_now - failure.timestamp),
            reason=reasons.get(local_rank) or failure.message,
        )
        for local_rank, failure in failures.items()
    ]
    return tuple(sorted(found, key=lambda f: (f.at, f.local_rank)))


def by_global_rank(
    failures: dict[int, ProcessFailure], *, group_rank: int, local_world_size: int
) -> dict[int, ProcessFailure]:
    """Re-key failures from local ranks to global ranks."""
    return {group_rank * local_world_size + lr: f for lr, f in failures.items()}


def print_failure(
    name: str, reason: str, exit_code: int, failures: dict[int, ProcessFailure]
) -> None:
    """Print the job's one failure summary to stderr: the root cause first, with its traceback."""
    from tpelastic.adapters.sinks.console_lines import COLLATERAL_NOTE, outcome_line

    lines = [outcome_line(reason, exit_code)]
    if failures:
        lines.append(ChildFailedError(name, failures).format_msg())
        lines.append(COLLATERAL_NOTE)
    print("\n".join(lines), file=sys.stderr, flush=True)


__all__ = ["by_global_rank", "log", "print_failure", "to_worker_failures"]
