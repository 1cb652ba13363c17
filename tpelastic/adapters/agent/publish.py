"""The metrics the agent publishes (group ``tpelastic``), in one place; see docs/observability.md.

Each call goes to the run's ``MetricsRouter`` (``WorkerSpec.metrics``; the launcher builds one per
run), else through ``put_metric``, so where the values end up (nowhere, the console, a log,
Prometheus) is the routing's business, not the agent's.

The routing lives in :mod:`tpelastic.adapters.sinks.metrics`, and whatever routes a metric
anywhere (``--metrics-cfg``, ``--metrics-port``, a library user's ``configure``) imports that
module first. While nothing has, every metric would go to its default null handler, so
:func:`_put` here drops it without importing the module: the agent publishes before its
first worker starts, and the import is about 1.3 ms of every launch (issue 5).
"""

from __future__ import annotations

import sys
from typing import Any

from tpelastic.adapters.agent.env import RoundFacts
from tpelastic.core.group_values import WorkerFailure
from tpelastic.core.worker_values import WorkerState

_METRICS = "tpelastic.adapters.sinks.metrics"

# Failure reasons (``failures.<reason>``): how a worker ended badly.
EXIT, SIGNAL, TIMER, HANG = "exit", "signal", "timer", "hang"


class Publisher:
    """Publishes the agent's metrics to ``router`` (a ``MetricsRouter``, e.g. the launcher's
    for this run); None: through ``put_metric``, the process's routing, as torch's agent does.
    """

    def __init__(self, router: Any = None) -> None:
        self._router = router

    def _put(self, key: str, value: float, suffix: str = "") -> None:
        """Publish ``sinks.metrics.AgentMetric.<key>`` + ``suffix`` if anything can route it.

        Raises:
            TypeError / ValueError: ``value`` is not a number (only checked once routed).
        """
        metrics = sys.modules.get(_METRICS)
        if metrics is None:  # not imported: nothing is routed, the default handler is null
            return
        name = getattr(metrics.AgentMetric, key) + suffix
        if self._router is not None:
            self._router.put(name, value)
        else:
            metrics.put_metric(name, value)

    def round_joined(
        self, facts: RoundFacts, duration_s: float, max_restarts: int, local_world_size: int = 1
    ) -> None:
        """A round completed for this node after ``duration_s`` seconds of rendezvous."""
        self._put("RDZV_DURATION_S", duration_s)
        self._put("RDZV_ROUND", facts.round)
        self._put("NODES", facts.group_world_size)
        self._put("WORLD_SIZE", facts.group_world_size * local_world_size)
        self._put("RESTARTS_USED", facts.restart_count)
        self._put("RESTARTS_LEFT", max(0, max_restarts - facts.restart_count))

    def restarted_in_place(self, facts: RoundFacts, max_restarts: int) -> None:
        """The round's workers restarted in place as attempt ``facts.attempt`` (a unit spent)."""
        self._put("RESTARTS_USED", facts.restart_count)
        self._put("RESTARTS_LEFT", max(0, max_restarts - facts.restart_count))

    def rank_progress(self, rank: int, step: int, step_seconds: float | None) -> None:
        """Global rank ``rank``'s last step number and how long that step took (when known)."""
        self._put("RANK_STEP_PREFIX", step, str(rank))
        if step_seconds is not None:
            self._put("RANK_STEP_TIME_PREFIX", step_seconds, str(rank))

    def stragglers(self, count: int) -> None:
        """How many local ranks are slower than the straggler threshold right now."""
        self._put("STRAGGLERS", count)

    def workers(self, **counts: int) -> None:
        """Local workers by state: every state is published, those not named as 0.

        Example: ``workers(HEALTHY=3, FAILED=1)``.

        Raises:
            KeyError: naming a state that ``WorkerState`` does not have.
        """
        for name in counts:
            WorkerState[name]  # fails loudly on a misspelt state
        for state in WorkerState:
            self._put("WORKERS_PREFIX", counts.get(state.name, 0), state.name)

    def failure(self, reason: str) -> None:
        """One more worker failure for ``reason`` (``exit``, ``signal``, ``timer``, ``hang``)."""
        self._put("FAILURES_PREFIX", 1, reason)

    def failed(
        self, failures: tuple[WorkerFailure, ...], *, timed_out: set[int], local_world_size: int
    ) -> None:
        """Workers failed: one ``failures.<reason>`` each, and the workers by state.

        A local rank in ``timed_out`` was killed by its timer; otherwise a signal or an exit
        code ended it.
        """
        for f in failures:
            self.failure(TIMER if f.local_rank in timed_out else SIGNAL if f.signal else EXIT)
        self.workers(FAILED=len(failures), HEALTHY=local_world_size - len(failures))


__all__ = [
    "EXIT",
    "HANG",
    "SIGNAL",
    "TIMER",
    "Publisher",
]
