"""A join retried after losing the store takes up the place its node already holds (pure core).

Each test plays the join machine against a plain dict as the store (``run_ops``), so the store
writes that the resume makes (or does not make) are checked too.
"""

from __future__ import annotations

import pytest

from tpelastic.core.rendezvous import join
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import (
    JoinSucceeded,
    OpsDone,
    StoreOps,
    StoreWait,
    run_ops,
)
from tpelastic.core.rendezvous.records import (
    ClosedRecord,
    NodeInfo,
    RoundResult,
    encode_closed,
    encode_node,
    encode_reason,
    encode_result,
)
from tpelastic.core.rendezvous.state import (
    JoinPhase,
    JoinRequested,
    JoinState,
    retry_request,
    worth_retrying,
)

CONFIG = RendezvousConfig(
    min_nodes=2,
    max_nodes=3,
    join_timeout=100,
    last_call_timeout=2,
    heartbeat_interval=1,
    heartbeat_timeout=3,
)
KEYS = RunKeys("run")


def _round(round_no: int, *nodes: str) -> bytes:
    return encode_result(
        RoundResult(round_no=round_no, participants=tuple(NodeInfo(node=n) for n in nodes))
    )


def _play(store: dict[str, bytes], event: object, until: set[JoinPhase]) -> tuple[JoinState, list]:
    """Step the machine against ``store`` until it waits or reaches a phase in ``until``."""
    state, effects = JoinState(), []
    for _ in range(50):
        step = join.step(state, event, CONFIG)
        state = step.state
        effects += list(step.effects)
        if state.phase in until or state.phase in join.TERMINAL:
            return state, effects
        request = [e for e in step.effects if isinstance(e, (StoreOps, StoreWait))][0]
        if isinstance(request, StoreWait):
            return state, effects
        event = OpsDone(replies=run_ops(request.ops, store), now=1.0)
    raise AssertionError("the join machine did not block")


def _retry(**fields: object) -> JoinRequested:
    base: dict[str, object] = {"run_id": "run", "node": "b", "now": 1.0, "arrived_round": 0}
    return JoinRequested(**{**base, **fields})  # type: ignore[arg-type]


def test_R12_a_retry_resumes_the_round_that_completed_with_it() -> None:
    store = {KEYS.result(0): _round(0, "a", "b")}
    before = dict(store)
    state, effects = _play(store, _retry(arrived_slot=1), set())
    assert state.phase is JoinPhase.COMPLETE
    done = [e for e in effects if isinstance(e, JoinSucceeded)]
    assert done and done[0].rank == 1 and done[0].result.round_no == 0
    assert store == before  # resuming writes nothing: no slot, no arrival in round 1


def test_a_retry_whose_heartbeats_lapsed_opens_the_next_round_instead() -> None:
    store = {KEYS.result(0): _round(0, "a", "b")}
    state, _ = _play(store, _retry(heartbeats_held=False), set())
    assert state.phase is JoinPhase.WAITING and state.round_no == 1  # closer of round 1
    assert store[KEYS.opened(1)] == encode_reason("membership")  # its world re-forms
    assert store[KEYS.member_arrived(1, 1)] == b"1"  # and it arrives there as rank 1 of round 0


def test_a_retry_after_the_next_round_opened_arrives_there_as_a_member() -> None:
    store = {KEYS.result(0): _round(0, "a", "b"), KEYS.opened(1): encode_reason("failure")}
    state, _ = _play(store, _retry(), {JoinPhase.FOLLOWING, JoinPhase.GATHERING})
    assert state.round_no == 1 and state.reason == "rejoin"
    assert state.node.prev_rank == 1 and KEYS.member_arrived(1, 1) in store


def test_a_retry_into_a_forming_round_reclaims_its_slot() -> None:
    store = {
        KEYS.arrivals(0): b"2",
        KEYS.slot(0, 0): encode_node(NodeInfo(node="a")),
    }
    state, _ = _play(store, _retry(arrived_slot=1), {JoinPhase.FOLLOWING})
    assert state.phase is JoinPhase.FOLLOWING and (state.round_no, state.slot) == (0, 1)
    assert store[KEYS.arrivals(0)] == b"2"  # no second slot taken
    assert store[KEYS.slot(0, 1)] == encode_node(NodeInfo(node="b"))


def test_a_retry_left_out_of_its_round_waits_in_the_next() -> None:
    store = {KEYS.result(0): _round(0, "a", "c")}
    state, _ = _play(store, _retry(), {JoinPhase.FOLLOWING, JoinPhase.GATHERING})
    assert state.round_no == 1 and store[KEYS.arrivals(1)] == b"1"
    assert KEYS.opened(1) not in store


def test_a_retry_into_a_closed_run_fails_closed() -> None:
    store = {KEYS.closed(): encode_closed(ClosedRecord(outcome="succeeded"))}
    state, _ = _play(store, _retry(arrived_slot=0), set())
    assert state.phase is JoinPhase.CLOSED


def test_a_first_join_of_a_node_the_latest_round_holds_resumes_it() -> None:
    # An adapter that only knows its node id retries as a plain "first" join.
    store = {KEYS.result(0): _round(0, "a", "b"), KEYS.published_rounds(): b"1"}
    event = JoinRequested(run_id="run", node="b", now=1.0)
    state, effects = _play(store, event, set())
    assert state.phase is JoinPhase.COMPLETE
    assert [e.rank for e in effects if isinstance(e, JoinSucceeded)] == [1]


@pytest.mark.parametrize("reason", ["failure", "scale_up", "rejoin"])
def test_a_member_joining_from_its_own_round_arrives_in_the_next(reason: str) -> None:
    store = {KEYS.result(0): _round(0, "a", "b")}
    event = JoinRequested(run_id="run", node="b", now=1.0, from_round=0, reason=reason)
    state, _ = _play(store, event, {JoinPhase.FOLLOWING, JoinPhase.GATHERING})
    assert state.round_no == 1 and store[KEYS.arrivals(1)] == b"1"


def test_retry_request_carries_what_the_lost_join_knew() -> None:
    store: dict[str, bytes] = {}
    lost, _ = _play(store, JoinRequested(run_id="run", node="b", now=0.0), set())
    assert lost.phase is JoinPhase.WAITING  # slot 0 of round 0, waiting for more nodes
    event = retry_request(lost, now=5.0, heartbeats_held=False)
    assert (event.arrived_round, event.arrived_slot) == (0, 0)
    assert event.deadline == lost.deadline and not event.heartbeats_held
    assert retry_request(join.step(JoinState(), _retry(), CONFIG).state, now=6.0).arrived_round == 0
    with pytest.raises(ValueError, match="IDLE"):
        retry_request(JoinState(), now=1.0)


@pytest.mark.parametrize(
    ("phase", "retried", "next_try", "expected"),
    [
        (JoinPhase.LOCATING, False, 1.0, False),  # unreachable from the first call: report it
        (JoinPhase.PROBING, False, 1.0, False),
        (JoinPhase.PROBING, True, 1.0, True),  # a retry of a join that held a place
        (JoinPhase.FOLLOWING, False, 1.0, True),  # arrived: its place is worth taking up
        (JoinPhase.FOLLOWING, False, 10.0, False),  # ... until its own deadline
        (JoinPhase.IDLE, True, 1.0, False),
        (JoinPhase.COMPLETE, True, 1.0, False),
    ],
)
def test_which_lost_joins_are_worth_retrying(
    phase: JoinPhase, retried: bool, next_try: float, expected: bool
) -> None:
    lost = JoinState(phase=phase, deadline=10.0)
    assert worth_retrying(lost, retried=retried, next_try=next_try) is expected


@pytest.mark.parametrize("phase", [JoinPhase.FOLLOWING, JoinPhase.WAITING, JoinPhase.PROBING])
def test_a_loss_the_store_client_waited_out_is_never_retried(phase: JoinPhase) -> None:
    # specs/store_outage.md O8: the outage's deadline has passed; the join deadline has not.
    lost = JoinState(phase=phase, deadline=600.0)
    assert worth_retrying(lost, retried=True, next_try=1.0)
    assert not worth_retrying(lost, retried=True, next_try=1.0, waited_out=True)
