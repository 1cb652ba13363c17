"""Any store reply in any reachable phase of the join machine gives a valid state or a clean
rejection or failure, never an exception: garbage, foreign or newer-schema bytes under our keys
included. Replies keep the driver's contract (one per op, of the op's kind); contents are free.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core.rendezvous import join
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.ops import (
    Add,
    Get,
    JoinFailed,
    JoinSucceeded,
    OpsDone,
    Set,
    StoreOps,
    StoreWait,
    WaitEnded,
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
from tpelastic.core.rendezvous.state import JoinPhase, JoinRequested, JoinState
from tpelastic.core.values import Rejected

CONFIG = RendezvousConfig(
    min_nodes=1,
    max_nodes=3,
    join_timeout=50,
    last_call_timeout=2,
    heartbeat_interval=1,
    heartbeat_timeout=3,
)
NODES = [NodeInfo(node=n) for n in ("me", "a", "b", "c")]
VALID = [
    encode_result(RoundResult(round_no=r, participants=tuple(NODES[i : i + k])))
    for r in range(3)
    for i in range(2)
    for k in (1, 2, 3)
] + [
    encode_result(RoundResult(round_no=1, closed=True)),
    encode_closed(ClosedRecord(outcome="succeeded")),
    encode_reason("membership"),
    *(encode_node(n) for n in NODES),
    b"0",
    b"1",
    b"7",
]
GARBAGE = st.one_of(
    st.binary(max_size=12),
    st.just(b'{"v": 99, "kind": "result"}'),
    st.just(b'{"v": 1, "kind": "node", "node": 5}'),
    st.just(b"\x80\x81"),
)
ANY_BYTES = st.one_of(st.sampled_from(VALID), GARBAGE)


def reply_for(op: object) -> st.SearchStrategy[object]:
    if isinstance(op, Get):
        return st.one_of(st.none(), ANY_BYTES)
    if isinstance(op, Add):
        return st.integers(0, 6)
    if isinstance(op, Set):
        return st.none()
    return st.one_of(st.just(op.value), ANY_BYTES)  # type: ignore[attr-defined]


@given(data=st.data(), stray=st.integers(0, 3))
def test_R8_any_reply_in_any_phase_is_valid_or_clean(data: st.DataObject, stray: int) -> None:
    state, now = JoinState(), 0.0
    # A fresh join, or a retry of one that lost the store (round it arrived in, slot, heartbeats).
    retry = data.draw(
        st.one_of(
            st.none(),
            st.tuples(st.integers(0, 2), st.one_of(st.none(), st.integers(0, 3)), st.booleans()),
        )
    )
    arrived_round, arrived_slot, held = retry or (None, None, True)
    event: object = JoinRequested(
        run_id="t",
        node="me",
        now=now,
        from_round=data.draw(st.sampled_from([None, 0, 1])),
        reason="first",
        arrived_round=arrived_round,
        arrived_slot=arrived_slot,
        heartbeats_held=held,
    )
    for _ in range(40):
        before = state
        result = join.step(state, event, CONFIG)
        state = result.state
        assert isinstance(state.phase, JoinPhase)
        rejected = [e for e in result.effects if isinstance(e, Rejected)]
        if rejected:
            assert state == before and len(result.effects) == 1
            return
        if state.phase in join.TERMINAL:
            outcome = [e for e in result.effects if isinstance(e, (JoinSucceeded, JoinFailed))]
            assert len(outcome) == 1, "a terminal phase announces exactly one outcome"
            return
        now += data.draw(st.sampled_from([0.0, 0.5, 2.0, 10.0]))
        pending = [e for e in result.effects if isinstance(e, (StoreOps, StoreWait))]
        assert len(pending) == 1, f"{state.phase}: exactly one store request per step"
        request = pending[0]
        if stray and data.draw(st.integers(0, 9)) == 0:
            # An event of a kind the phase does not expect must be rejected, not crash.
            wrong_kind: object = (
                OpsDone(replies=(), now=now)
                if isinstance(request, StoreWait)
                else WaitEnded(present=True, now=now)
            )
            event = data.draw(
                st.sampled_from([wrong_kind, JoinRequested(run_id="t", node="me", now=now)])
            )
            continue
        if isinstance(request, StoreWait):
            event = WaitEnded(present=data.draw(st.booleans()), now=max(now, request.deadline))
        else:
            replies = tuple(data.draw(reply_for(op)) for op in request.ops)
            event = OpsDone(replies=replies, now=now)  # type: ignore[arg-type]
