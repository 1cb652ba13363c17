"""Rendezvous join steps as events: every step recorded, and the records replay through the core."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from obs_helpers import two_tcp_nodes_with_a_crash

from tpelastic.adapters.rendezvous import driver
from tpelastic.adapters.sinks.join_trace import (
    JoinReplayMismatch,
    decode,
    encode,
    replay_join_events,
    step_event,
)
from tpelastic.adapters.stores import MemoryStore
from tpelastic.core.agent import AgentPhase
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.ops import OpsDone, WaitEnded
from tpelastic.core.rendezvous.state import JoinRequested
from tpelastic.events import (
    Event,
    from_json_dict,
    read_json_lines,
    replay_agent_events,
    to_json_dict,
)


@pytest.fixture
def recorded() -> Iterator[list[Event]]:
    """Every join step of this test, as events that went through JSON and back."""
    yield []


def _recorder(events: list[Event]) -> Callable[..., None]:
    lock = threading.Lock()

    def record(**step: object) -> None:
        event = step_event(now_wall=0.0, **step)  # type: ignore[arg-type]
        with lock:
            events.append(from_json_dict(to_json_dict(event)))  # type: ignore[arg-type]

    return record


def _join_three(config: RendezvousConfig, events: list[Event] | None) -> None:
    store = MemoryStore()
    errors: list[BaseException] = []
    record = None if events is None else _recorder(events)

    def one(node: str) -> None:
        try:
            driver.run_join(store, config, run_id="trace", node=node, addr=node, record_step=record)
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=one, args=(f"n{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert not errors and not any(t.is_alive() for t in threads)


CONFIG = RendezvousConfig(min_nodes=3, max_nodes=3, join_timeout=15, last_call_timeout=0.2)


def test_three_joins_replay_through_the_core(recorded: list[Event]) -> None:
    _join_three(CONFIG, recorded)
    replayed = replay_join_events(recorded)
    assert sorted(r.node for r in replayed) == ["n0", "n1", "n2"]
    assert all(r.phase == "COMPLETE" for r in replayed)
    assert sum(r.steps for r in replayed) == len(recorded)
    successes = [
        effect
        for event in recorded
        for effect in event.metadata["effects"]  # type: ignore[union-attr]
        if effect["type"] == "JoinSucceeded"  # type: ignore[index]
    ]
    assert sorted(s["rank"] for s in successes) == [0, 1, 2]  # type: ignore[index]


def test_a_missing_or_contradicting_record_is_named(recorded: list[Event]) -> None:
    _join_three(CONFIG, recorded)
    mine = [e for e in recorded if e.metadata["node"] == "n0"]
    with pytest.raises(JoinReplayMismatch, match="node n0 join .* step 2: expected step 1"):
        replay_join_events([e for e in recorded if e is not mine[1]])
    forged = Event(name=mine[1].name, source=mine[1].source, metadata={**mine[1].metadata})
    forged.metadata["to"] = "TIMED_OUT"
    with pytest.raises(JoinReplayMismatch, match="step 1: recorded to 'TIMED_OUT'"):
        replay_join_events([forged if e is mine[1] else e for e in recorded])
    with pytest.raises(JoinReplayMismatch, match="first record is missing"):
        replay_join_events([e for e in recorded if e is not mine[0]])


def test_observations_survive_their_encoding() -> None:
    for observation in (
        JoinRequested(run_id="r", node="n", now=1.5, from_round=3, reason="failure"),
        OpsDone(replies=(b"\x00\xffraw", None, 7, b""), now=2.0),
        WaitEnded(present=False, now=3.25),
    ):
        assert decode(encode(observation)) == observation
    with pytest.raises(JoinReplayMismatch, match="unknown join observation type 'Bogus'"):
        decode({"type": "Bogus"})


def test_no_recorder_records_nothing(recorded: list[Event]) -> None:
    _join_three(CONFIG, None)
    assert recorded == []


def test_R14_an_agent_run_records_its_joins_and_they_replay(tmp_path: Path) -> None:
    """Two real agents on the tcp backend, a worker crash restarted in place: the joins replay
    (one per node: an in-place restart joins nothing)."""
    path = tmp_path / "events.jsonl"
    codes = two_tcp_nodes_with_a_crash(tmp_path, "obs-joins", path)
    assert codes == [0, 0], [(tmp_path / f"node{i}.log").read_text()[-2000:] for i in range(2)]
    events = read_json_lines(path)
    joins = replay_join_events(events)
    assert len(joins) == 2 and all(j.phase == "COMPLETE" for j in joins)
    assert len({j.node for j in joins}) == 2
    for run in replay_agent_events(events).values():  # the agent records still replay too
        assert run.state.phase is AgentPhase.SUCCEEDED
