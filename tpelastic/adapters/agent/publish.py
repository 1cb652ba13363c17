"""The metrics the agent publishes (group ``tpelastic``), in one place; see docs/observability.md.

Each call goes through ``put_metric``, so where the values end up (nowhere, the console, a log,
Prometheus) is the process's metrics routing, not the agent's business.
"""

from __future__ import annotations

from tpelastic.adapters.agent.env import RoundFacts
from tpelastic.adapters.sinks.metrics import AgentMetric, put_metric
from tpelastic.core.worker import WorkerState
from tpelastic.core.worker_group import WorkerFailure

# Failure reasons (``failures.<reason>``): how a worker ended badly.
EXIT, SIGNAL, TIMER, HANG = "exit", "signal", "timer", "hang"


def round_joined(facts: RoundFacts, duration_s: float, max_restarts: int) -> None:
    """A round completed for this node after ``duration_s`` seconds of rendezvous."""
    put_metric(AgentMetric.RDZV_DURATION_S, duration_s)
    put_metric(AgentMetric.RDZV_ROUND, facts.round)
    put_metric(AgentMetric.RESTARTS_USED, facts.restart_count)
    put_metric(AgentMetric.RESTARTS_LEFT, max(0, max_restarts - facts.restart_count))


def restarted_in_place(facts: RoundFacts, max_restarts: int) -> None:
    """The round's workers restarted in place as attempt ``facts.attempt`` (a unit spent)."""
    put_metric(AgentMetric.RESTARTS_USED, facts.restart_count)
    put_metric(AgentMetric.RESTARTS_LEFT, max(0, max_restarts - facts.restart_count))


def workers(**counts: int) -> None:
    """Local workers by state: every state is published, those not named as 0.

    Example: ``workers(HEALTHY=3, FAILED=1)``.

    Raises:
        KeyError: naming a state that ``WorkerState`` does not have.
    """
    for name in counts:
        WorkerState[name]  # fails loudly on a misspelt state
    for state in WorkerState:
        put_metric(f"{AgentMetric.WORKERS_PREFIX}{state.name}", counts.get(state.name, 0))


def failure(reason: str) -> None:
    """One more worker failure for ``reason`` (``exit``, ``signal``, ``timer`` or ``hang``)."""
    put_metric(f"{AgentMetric.FAILURES_PREFIX}{reason}", 1)


def failed(
    failures: tuple[WorkerFailure, ...], *, timed_out: set[int], local_world_size: int
) -> None:
    """Workers failed: one ``failures.<reason>`` each, and the workers by state.

    A local rank in ``timed_out`` was killed by its timer; otherwise a signal or an exit code
    ended it.
    """
    for f in failures:
        failure(TIMER if f.local_rank in timed_out else SIGNAL if f.signal else EXIT)
    workers(FAILED=len(failures), HEALTHY=local_world_size - len(failures))


__all__ = [
    "EXIT",
    "HANG",
    "SIGNAL",
    "TIMER",
    "failed",
    "failure",
    "restarted_in_place",
    "round_joined",
    "workers",
]
