"""The composed node step: membership first, then the agent table, in one documented order."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "properties"))
from strategies_core import agent_configs, agent_events

from tpelastic.core import agent as ag
from tpelastic.core import membership as mb
from tpelastic.core import node as nd
from tpelastic.core.group_values import WorkerFailure
from tpelastic.core.values import Rejected
from tpelastic.core.worker_values import WorkerState as WS

MEMBER = mb.MemberConfig(heartbeat_timeout=3.0, heartbeat_interval=1.0, looks_lost=2)

member_events = st.one_of(
    st.builds(
        mb.LookDone,
        now=st.floats(0, 100),
        round=st.integers(-1, 5),
        closed=st.none() | st.tuples(st.sampled_from(["succeeded", "failed"]), st.just("r")),
        next_opened=st.none() | st.sampled_from(["membership", "scale_up"]),
        next_attempt=st.none() | st.tuples(st.integers(1, 4), st.just("exit 1")),
        waiting=st.integers(0, 3),
        running=st.booleans(),
    ),
    st.builds(mb.LookFailed, now=st.floats(0, 100), reason=st.just("busy")),
    st.builds(mb.KeepAliveRead, now=st.floats(0, 100), last_beat=st.floats(0, 100)),
    st.builds(
        mb.JoinClosed,
        now=st.floats(0, 100),
        why=st.just("closed"),
        closed=st.none() | st.tuples(st.just("failed"), st.just("budget")),
    ),
)
observations = st.lists(st.one_of(agent_events, member_events), max_size=25)


def _by_hand(
    state: nd.NodeState, observation: object, config: nd.NodeConfig
) -> tuple[nd.NodeState, tuple[object, ...]]:
    """The composition spelled out: membership's events, then each through the agent table."""
    member, effects = state.member, ()
    if isinstance(observation, mb.MEMBER_EVENTS):
        read = mb.step(state.member, observation, config.member)
        member = read.state
        events = tuple(e for e in read.effects if not isinstance(e, Rejected))
        effects += tuple(e for e in read.effects if isinstance(e, Rejected))
    else:
        events = (observation,)
    agent = state.agent
    for event in events:
        result = ag.step(agent, event, config.agent)  # type: ignore[arg-type]
        agent, effects = result.state, effects + result.effects
    return nd.NodeState(agent=agent, member=member), effects


@given(config=agent_configs(), seen=observations)
def test_N1_a_node_step_is_membership_then_the_agent_in_order(
    config: ag.AgentConfig, seen: list[object]
) -> None:
    """A membership observation reaches the agent only as the membership machine's effects,
    in order; an agent observation goes to the agent table as it is; the effects are the
    membership machine's rejections, then the agent's, in order."""
    node_config = nd.NodeConfig(agent=config, member=MEMBER)
    state = nd.initial_node_state(node_config)
    for observation in seen:
        done = nd.node_step(state, observation, node_config)
        by_hand, effects = _by_hand(state, observation, node_config)
        assert (done.state.agent, done.state.member, done.effects) == (
            by_hand.agent,
            by_hand.member,
            effects,
        )
        state = done.state


@given(config=agent_configs(), seen=observations)
def test_N2_the_agent_steps_taken_replay_through_the_agent_table(
    config: ag.AgentConfig, seen: list[object]
) -> None:
    """Every agent step a node step takes is listed (state before, event, result) and chains:
    replayed through ``agent.step`` from the initial state they reach the node's agent state;
    ``has_news`` holds exactly when a step reaches the agent, and a step without news changes
    nothing but the membership reading and orders nothing but rejections."""
    node_config = nd.NodeConfig(agent=config, member=MEMBER)
    state = nd.initial_node_state(node_config)
    replayed = ag.initial_state(config)
    for observation in seen:
        news = nd.has_news(state, observation, node_config)
        done = nd.node_step(state, observation, node_config)
        assert news == bool(done.agent_steps)
        if not news:
            assert done.state.agent == state.agent
            assert all(isinstance(e, Rejected) for e in done.effects)
        for taken in done.agent_steps:
            assert taken.before == replayed
            assert ag.step(replayed, taken.event, config) == taken.result  # type: ignore[arg-type]
            replayed = taken.result.state
        assert replayed == done.state.agent
        state = done.state


def test_a_closed_look_ends_a_running_node() -> None:
    config = nd.NodeConfig(agent=ag.AgentConfig(max_restarts=1, min_nodes=1, max_nodes=2))
    state = nd.initial_node_state(config)
    state = nd.node_step(state, ag.AgentStarted(now=0.0), config).state
    completed = ag.RoundCompleted(
        now=1.0, round=0, group_rank=0, group_world_size=2, restart_count=0
    )
    state = nd.node_step(state, completed, config).state
    looked = mb.LookDone(now=2.0, round=0, closed=("failed", "budget"))
    done = nd.node_step(state, looked, config)
    assert done.state.agent.phase is ag.AgentPhase.FAILED
    assert [type(e) for e in done.effects] == [ag.StopWorkers, ag.ReportFailure]


def test_anything_else_is_a_driver_bug() -> None:
    config = nd.NodeConfig(agent=ag.AgentConfig(max_restarts=1, min_nodes=1, max_nodes=2))
    with pytest.raises(TypeError, match="neither an agent nor a member event"):
        nd.node_step(nd.initial_node_state(config), "a look", config)


def _running_node() -> tuple[nd.NodeState, nd.NodeConfig]:
    """A node of a 2-node world whose round's workers (2 local ranks) just started."""
    config = nd.NodeConfig(
        agent=ag.AgentConfig(
            max_restarts=3, min_nodes=1, max_nodes=2, local_world_size=2, restart_in_place=True
        ),
        member=MEMBER,
    )
    state = nd.initial_node_state(config)
    for observation in (
        ag.AgentStarted(now=0.0),
        ag.RoundCompleted(now=1.0, round=0, group_rank=1, group_world_size=2, restart_count=0),
    ):
        state = nd.node_step(state, observation, config).state
    assert state.group is None  # StartWorkers ordered: no group until its workers run
    state = nd.node_step(state, nd.GroupStarted(now=1.5, pids=(101, None)), config).state
    assert state.group is not None and state.group.phase is WS.HEALTHY
    assert [x.pid for x in state.group.workers] == [101, None]
    return state, config


def test_N4_a_worker_exit_reaches_the_agent_as_its_groups_verdict() -> None:
    """The workers' exits step the current start's group; its GroupFailed (every failure,
    earliest first, the observer's reason kept) is the agent's WorkersFailed."""
    state, config = _running_node()
    late = WorkerFailure(local_rank=0, global_rank=2, exitcode=1, signal=None, at=3.0)
    first = WorkerFailure(
        local_rank=1, global_rank=3, exitcode=-9, signal="SIGKILL", at=2.0, reason="timer"
    )
    done = nd.node_step(state, nd.WorkersExited(now=4.0, failures=(late, first)), config)
    (taken,) = done.agent_steps
    assert isinstance(taken.event, ag.WorkersFailed)
    assert [(f.local_rank, f.at, f.reason) for f in taken.event.failures] == [
        (1, 2.0, "timer"),
        (0, 3.0, "exitcode 1"),
    ]
    assert done.state.agent.restart_count == 1  # restarted in place: one unit spent
    # The restart's StopWorkers ended that group; once its open landed, the StartWorkers leaves
    # none until the new start's workers run, whose group has the new restart count.
    assert done.state.group is not None and done.state.group.phase is not WS.HEALTHY
    landed = mb.OpenLanded(now=4.2, round=0, attempt=1, last_beat=4.0)
    opened = nd.node_step(done.state, landed, config)
    assert [type(e) for e in opened.effects] == [ag.StartWorkers]
    assert opened.state.group is None
    pids = nd.GroupStarted(now=4.5, pids=(102, 103))
    again = nd.node_step(opened.state, pids, config).state.group
    assert again is not None and (again.phase, again.restart_count) == (WS.HEALTHY, 1)
    assert [x.global_rank for x in again.workers] == [2, 3]


def test_N5_exits_of_a_stopped_start_are_no_news_and_success_is_all_workers() -> None:
    """After StopWorkers (here: the run closed) the group is stopped and its workers' exits
    step nothing; a clean end of every worker is the agent's WorkersSucceeded."""
    state, config = _running_node()
    done = nd.node_step(state, nd.WorkersExited(now=2.0), config)
    (taken,) = done.agent_steps
    assert isinstance(taken.event, ag.WorkersSucceeded)
    assert done.state.group is not None and done.state.group.phase is WS.SUCCEEDED
    state, config = _running_node()
    looked = mb.LookDone(now=2.0, round=0, closed=("failed", "budget"))
    stopped = nd.node_step(state, looked, config).state
    assert stopped.group is not None and stopped.group.phase is WS.STOPPED
    fail = WorkerFailure(local_rank=0, global_rank=2, exitcode=1, signal=None, at=2.5)
    exited = nd.WorkersExited(now=3.0, failures=(fail,))
    assert not nd.has_news(stopped, exited, config)
    after = nd.node_step(stopped, exited, config)
    assert after.state == stopped and after.effects == () and after.agent_steps == ()
