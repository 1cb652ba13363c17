"""The agent step records and the replay checker, with the core driven in memory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# The core's strategies live beside the property tests; reuse them rather than copy them.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "properties"))
from strategies_core import agent_configs, agent_events

from tpelastic.adapters.sinks.agent_trace import (
    ReplayMismatch,
    decode_observation,
    step_event,
    to_json_obj,
)
from tpelastic.core import agent as ag
from tpelastic.events import Event, from_json_dict, replay_agent_events, to_json_dict


def _run(
    agent: str, config: ag.AgentConfig, observations: list[object]
) -> tuple[list[Event], ag.AgentState]:
    """Drive one agent through the core as the run loop does, recording each step."""
    state, records = ag.initial_state(config), []
    for seq, observation in enumerate(observations):
        result = ag.step(state, observation, config)  # type: ignore[arg-type]
        records.append(
            step_event(
                agent=agent, seq=seq, config=config, before=state,
                observation=observation, result=result, now_wall=1.0 + seq,
            )
        )  # fmt: skip
        state = result.state
    return records, state


def _through_json(events: list[Event]) -> list[object]:
    return [from_json_dict(to_json_dict(e)) for e in events]


@settings(max_examples=60, deadline=None)
@given(observation=agent_events)
def test_every_observation_survives_its_record(observation: ag.AgentEventT) -> None:
    encoded = to_json_obj(observation)
    assert isinstance(encoded, dict)
    assert decode_observation(encoded) == observation


@settings(max_examples=60, deadline=None)
@given(
    config=agent_configs(),
    first=st.lists(agent_events, max_size=12),
    second=st.lists(agent_events, max_size=12),
)
def test_two_interleaved_agents_replay_to_where_they_went(
    config: ag.AgentConfig, first: list[object], second: list[object]
) -> None:
    a, end_a = _run("a", config, [ag.AgentStarted(now=0.0), *first])
    b, end_b = _run("b", config, [ag.AgentStarted(now=0.0), *second])
    mixed = [e for pair in zip(a, b, strict=False) for e in pair] + a[len(b) :] + b[len(a) :]
    replayed = replay_agent_events(_through_json(mixed))  # rejected steps replay as rejected
    assert replayed["a"].state == end_a and replayed["a"].steps == len(a)
    assert replayed["b"].state == end_b and replayed["b"].steps == len(b)


CONFIG = ag.AgentConfig(max_restarts=1, min_nodes=1, max_nodes=1, local_world_size=2)
FAILED = ag.WorkersFailed(
    now=2.0,
    failures=(
        ag.events.WorkerFailure(
            local_rank=1, global_rank=1, exitcode=1, signal=None, at=1.5, reason="exit 1"
        ),
    ),
)
HAPPY = [
    ag.AgentStarted(now=0.0),
    ag.RoundCompleted(now=1.0, round=0, group_rank=0, group_world_size=1, restart_count=0),
    FAILED,
    ag.RoundCompleted(now=3.0, round=1, group_rank=0, group_world_size=1, restart_count=1),
    ag.WorkersSucceeded(now=4.0),
    ag.ExitBarrierRead(now=5.0, arrived=1),
]


def _forge(record: Event, /, **changes: object) -> Event:
    return Event(name=record.name, source=record.source, metadata={**record.metadata, **changes})


def test_a_contradicting_record_is_named() -> None:
    records, _ = _run("n1", CONFIG, HAPPY)
    records[2] = _forge(records[2], effects=[])  # the failure's StopWorkers/JoinRendezvous gone
    with pytest.raises(ReplayMismatch, match=r"agent n1 step 2: recorded effects \[\]"):
        replay_agent_events(records)


def test_a_record_from_the_wrong_phase_is_named() -> None:
    records, _ = _run("n1", CONFIG, HAPPY)
    records[4] = _forge(records[4], **{"from": "EXIT_BARRIER"})
    with pytest.raises(
        ReplayMismatch, match="step 4: recorded from EXIT_BARRIER, replay is in RUNNING"
    ):
        replay_agent_events(records)


def test_a_changed_config_or_unknown_observation_is_named() -> None:
    records, _ = _run("n1", CONFIG, HAPPY)
    other = to_json_obj(
        ag.AgentConfig(max_restarts=5, min_nodes=1, max_nodes=1, local_world_size=2)
    )
    with pytest.raises(ReplayMismatch, match="step 1: the agent's config changed mid-run"):
        replay_agent_events([records[0], _forge(records[1], config=other)])
    with pytest.raises(ReplayMismatch, match="unknown agent observation type 'Teleported'"):
        replay_agent_events([_forge(records[0], event={"type": "Teleported"})])
    with pytest.raises(ReplayMismatch, match="bad RoundCompleted observation"):
        replay_agent_events([records[0], _forge(records[1], event={"type": "RoundCompleted"})])


def test_other_events_are_skipped() -> None:
    from tpelastic.events import EventSource, NodeState, RdzvEvent

    records, end = _run("n1", CONFIG, HAPPY)
    noise = [
        Event(name="agent.warning", source=EventSource.AGENT, metadata={"reason": "x"}),
        RdzvEvent("rdzv.round_joined", "r", "", "h", 1, NodeState.RUNNING, round=0, node="n1"),
    ]
    replayed = replay_agent_events([noise[0], *records[:3], noise[1], *records[3:]])
    assert replayed["n1"].state == end and end.phase is ag.AgentPhase.SUCCEEDED
