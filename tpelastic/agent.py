"""The agent: WorkerSpec, Worker, WorkerGroup, WorkerState, RunResult, ElasticAgent,
SimpleElasticAgent, LocalElasticAgent.

This module is the public import path for these names; they are defined under
``tpelastic.core`` and ``tpelastic.adapters`` and re-exported here. ``Worker``, ``WorkerGroup``
and ``WorkerState`` are the core's values; the agent classes, ``WorkerSpec`` and ``RunResult``
arrive with the agent and launcher issue.
"""

from tpelastic.core.worker import Worker, WorkerState
from tpelastic.core.worker_group import WorkerGroup

__all__ = ["Worker", "WorkerGroup", "WorkerState"]
