"""The simulator steps the product's composed core for every node (tpelastic.core.sim.agents)."""

from __future__ import annotations

import pytest
from attrs import evolve

from tpelastic.core import agent as ag
from tpelastic.core import membership as mb
from tpelastic.core.node import NodeConfig, NodeState, node_step
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.sim.cluster import Cluster
from tpelastic.core.sim.nodes import Status

CONFIG = RendezvousConfig(
    min_nodes=2, max_nodes=8, heartbeat_interval=1.0, heartbeat_timeout=3.0, last_call_timeout=1.0
)
NODE = NodeConfig(
    agent=ag.AgentConfig(
        max_restarts=3, min_nodes=2, max_nodes=8, restart_in_place=True, collateral_window=5.5
    ),
    member=mb.MemberConfig(heartbeat_timeout=3.0, heartbeat_interval=1.0),
)
P = ag.AgentPhase
STATES = [
    ag.AgentState(phase=phase, round=2, group_rank=0, group_world_size=4, restart_count=count)
    for phase in (P.RUNNING, P.HOLDING, P.EXIT_BARRIER, P.RENDEZVOUS)
    for count in (1, 3)
]
LOOKS = [
    mb.LookDone(now=5.0, round=2, closed=("failed", "budget")),
    mb.LookDone(now=5.0, round=2, next_opened="membership"),
    mb.LookDone(now=5.0, round=2, next_attempt=(1, "failure")),
    mb.LookDone(now=5.0, round=2, next_attempt=(1, "failure"), running=False),
    mb.LookDone(now=5.0, round=2, waiting=2),
    mb.LookDone(now=5.0, round=2),
]


def _without_rank(effects: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(evolve(e, group_rank=0) if isinstance(e, ag.StartWorkers) else e for e in effects)


@pytest.mark.parametrize("agent", STATES, ids=lambda s: f"{s.phase.name}-{s.restart_count}")
@pytest.mark.parametrize("look", LOOKS, ids=range(len(LOOKS)))
def test_a_look_is_decided_the_same_whatever_the_nodes_rank(
    agent: ag.AgentState, look: mb.LookDone
) -> None:
    """What lets members of one world share a step (AgentDriver._step's ``alike``)."""
    steps = [
        node_step(NodeState(agent=evolve(agent, group_rank=rank)), look, NODE) for rank in (0, 3)
    ]
    states = [evolve(s.state.agent, group_rank=0) for s in steps]
    assert states[0] == states[1]
    assert steps[0].state.member == steps[1].state.member
    assert _without_rank(steps[0].effects) == _without_rank(steps[1].effects)
    assert steps[1].state.agent.group_rank == 3


def _churn(step_alike: bool) -> Cluster:
    cluster = Cluster(
        config=CONFIG, latency=0.01, retry_after=1.0, max_restarts=6, step_alike=step_alike
    )
    for i in range(8):
        cluster.start(f"n{i}")
    cluster.advance(3.0)
    for k in range(5):
        cluster.fail_workers(f"n{k}")
        cluster.advance(0.5)
    cluster.crash("n7")
    cluster.advance(8.0)
    cluster.fail_workers("n1")
    cluster.advance(2.0)
    return cluster


def test_members_sharing_alike_steps_end_exactly_as_members_stepping_alone() -> None:
    shared, alone = _churn(step_alike=True), _churn(step_alike=False)
    assert shared.records == alone.records
    assert {n: x.core for n, x in shared.nodes.items()} == {
        n: x.core for n, x in alone.nodes.items()
    }
    assert shared.restarts == alone.restarts > 30  # the attempts reached every member


def test_every_node_runs_the_agent_and_the_budget_ends_the_job() -> None:
    cluster = Cluster(config=CONFIG, latency=0.01, max_restarts=1)
    for name in "abc":
        cluster.start(name)
    cluster.advance(3.0)
    assert {x.agent.phase for x in cluster.nodes.values()} == {P.RUNNING}
    cluster.fail_workers("a")  # the one restart
    cluster.advance(1.0)
    assert {x.agent.restart_count for x in cluster.nodes.values()} == {1}
    cluster.fail_workers("b")  # budget spent: held for the collateral window, then the job fails
    cluster.advance(0.1)
    assert cluster.nodes["b"].status is Status.HOLDING
    cluster.advance(10.0)
    assert {x.agent.phase for x in cluster.nodes.values()} == {P.FAILED}
    assert cluster.nodes["b"].agent.exit_code == ag.EXIT_WORKERS_FAILED
    assert {x.failure for n, x in cluster.nodes.items() if n != "b"} == {"closed: failed"}
