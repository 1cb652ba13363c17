"""In-place attempts of a round are spent job-wide: the next round's closer carries the highest
attempt its members report into the new round's restart count (pure core, R16)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core.rendezvous import join, reading
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import OpsDone, StoreOps, StoreWait, run_ops
from tpelastic.core.rendezvous.records import (
    NodeInfo,
    RoundResult,
    StateCorrupt,
    decode_node,
    decode_result,
    encode_node,
    encode_reason,
    encode_result,
)
from tpelastic.core.rendezvous.replies import SlotsRead
from tpelastic.core.rendezvous.state import JoinRequested, JoinState, retry_request
from tpelastic.core.restart_budget import round_restart_count

CONFIG = RendezvousConfig(
    min_nodes=1,
    max_nodes=4,
    join_timeout=100,
    last_call_timeout=2,
    heartbeat_interval=1,
    heartbeat_timeout=3,
)
KEYS = RunKeys("run")
NODES = ("a", "b", "c", "d")


def _collect(previous: RoundResult | None, slots: list[NodeInfo], failures: int) -> RoundResult:
    """What the closer of round ``previous.round_no + 1`` offers for these registered slots."""
    state = JoinState(
        keys=KEYS,
        node=slots[0],
        round_no=previous.round_no + 1 if previous else 0,
        previous=previous,
        arrivals=len(slots),
        deadline=100.0,
        slot=0,
    )
    replies = [encode_node(info) for info in slots] + [str(failures).encode()]
    slots = reading.read_collection(state, OpsDone(replies=tuple(replies), now=1.0), CONFIG)
    assert isinstance(slots, SlotsRead) and not slots.missing
    return reading.draft_of(state, slots)


@given(
    count=st.integers(0, 20),
    attempts=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    strangers=st.lists(st.integers(0, 5), max_size=2),
    failures=st.integers(0, 3),
)
def test_R16_attempts_of_a_round_carry_into_the_next_rounds_count(
    count: int, attempts: list[int], strangers: list[int], failures: int
) -> None:
    members = tuple(NodeInfo(node=n) for n in NODES[: len(attempts)])
    previous = RoundResult(round_no=4, participants=members, restart_count=count)
    slots = [
        NodeInfo(node=m.node, prev_round=4, prev_rank=rank, prev_attempt=a)
        for rank, (m, a) in enumerate(zip(members, attempts, strict=True))
    ]
    # Nodes from an older round say what they ran there: that round's attempts were carried
    # into round 4's count already, so they must not count again.
    slots += [
        NodeInfo(node=f"x{i}", prev_round=2, prev_rank=0, prev_attempt=a)
        for i, a in enumerate(strangers)
    ]
    result = _collect(previous, slots, failures)
    # Attempts are job-wide: members that all ran attempt n spent n units together.
    assert result.restart_count == count + max(attempts) + (1 if failures else 0)
    assert result.restart_count == round_restart_count(count, max(attempts), failures > 0)


def test_a_first_round_has_no_attempts_to_carry() -> None:
    result = _collect(None, [NodeInfo(node="a", prev_attempt=0)], failures=1)
    assert result.restart_count == 1


def _play(store: dict[str, bytes], event: object) -> JoinState:
    """Step one node's join against ``store`` until it blocks on a wait."""
    state = JoinState()
    for _ in range(50):
        step = join.step(state, event, CONFIG)
        state = step.state
        request = [e for e in step.effects if isinstance(e, (StoreOps, StoreWait))]
        if state.phase in join.TERMINAL or isinstance(request[0], StoreWait):
            return state
        event = OpsDone(replies=run_ops(request[0].ops, store), now=1.0)
    raise AssertionError("the join machine did not block")


def _previous_round() -> dict[str, bytes]:
    members = (NodeInfo(node="a"), NodeInfo(node="b"))
    return {KEYS.result(0): encode_result(RoundResult(round_no=0, participants=members))}


@pytest.mark.parametrize(
    ("from_round", "node", "registered"),
    [
        (0, "b", 3),  # a member coming from the round it ran attempt 3 of
        (None, "b", 0),  # a member, but its attempt is of no round it names
        (0, "z", 0),  # not a member of round 0: nothing of round 0 to carry
    ],
)
def test_a_join_registers_its_attempt_only_as_a_member_of_the_round_it_comes_from(
    from_round: int | None, node: str, registered: int
) -> None:
    store = {**_previous_round(), KEYS.opened(1): encode_reason("membership")}
    event = JoinRequested(run_id="run", node=node, now=0.0, from_round=from_round, attempt=3)
    state = _play(store, event)
    assert state.round_no == 1
    slot = decode_node(store[KEYS.slot(1, state.slot or 0)])
    assert slot.prev_attempt == registered and state.node.prev_attempt == registered


def test_a_retried_join_keeps_its_attempt() -> None:
    event = JoinRequested(run_id="run", node="b", now=0.0, from_round=0, attempt=2)
    store = _previous_round()
    state = join.step(JoinState(), event, CONFIG).state  # LOCATING: no slot yet
    assert retry_request(state, now=1.0).attempt == 2
    registered = _play(store, event)
    assert retry_request(registered, now=1.0).attempt == 2


def test_node_records_without_an_attempt_stay_v1_records() -> None:
    plain = NodeInfo(node="a", addr="h:1", prev_round=3, prev_rank=0)
    assert b"prev_attempt" not in encode_node(plain)
    assert decode_node(encode_node(plain)) == plain
    ran = NodeInfo(node="b", prev_round=3, prev_rank=1, prev_attempt=4)
    assert decode_node(encode_node(ran)) == ran
    result = RoundResult(round_no=4, participants=(ran, plain), restart_count=7)
    assert decode_result(encode_result(result)) == result


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"v": 1, "kind": "node", "node": "a", "addr": "", "prev_attempt": -1}', ">= 0"),
        (b'{"v": 1, "kind": "node", "node": "a", "addr": "", "prev_attempt": "2"}', "int"),
        (b'{"v": 1, "kind": "node", "node": "a", "addr": "", "prev_attempt": true}', "int"),
    ],
)
def test_a_bad_attempt_in_a_node_record_is_refused(raw: bytes, message: str) -> None:
    with pytest.raises(StateCorrupt, match=message):
        decode_node(raw)


@pytest.mark.parametrize(
    "call",
    [
        lambda: NodeInfo(node="a", prev_attempt=-1),
        lambda: JoinRequested(run_id="r", node="a", now=0.0, attempt=-1),
        lambda: round_restart_count(0, -1, False),
        lambda: round_restart_count(-1, 0, False),
    ],
)
def test_a_negative_attempt_or_count_is_one_clear_error(call: object) -> None:
    with pytest.raises(ValueError, match=">= 0"):
        call()  # type: ignore[operator]
