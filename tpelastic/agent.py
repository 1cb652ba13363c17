"""The agent: WorkerSpec, Worker, WorkerGroup, WorkerState, RunResult, ElasticAgent,
SimpleElasticAgent, LocalElasticAgent.

This module is the public import path for these names; they are defined under
``tpelastic.core`` and ``tpelastic.adapters`` and re-exported here. ``Worker`` and
``WorkerState`` are the core's values; ``WorkerGroup`` is torch's view of the core's group
value; the agent classes live in ``tpelastic.adapters.agent`` (see docs/launcher.md).
"""

from tpelastic.adapters.agent.local import LocalElasticAgent
from tpelastic.adapters.agent.loop import ElasticAgent, SimpleElasticAgent
from tpelastic.adapters.agent.spec import RunResult, WorkerSpec
from tpelastic.adapters.agent.worker_group import WorkerGroup
from tpelastic.core.worker import Worker, WorkerState

__all__ = [
    "ElasticAgent",
    "LocalElasticAgent",
    "RunResult",
    "SimpleElasticAgent",
    "Worker",
    "WorkerGroup",
    "WorkerSpec",
    "WorkerState",
]
