"""A member's look that waited long for the store's answer says nothing about the successor."""

from __future__ import annotations

from tpelastic.core.rendezvous import member as mm
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import OpsDone, StoreOps, run_ops
from tpelastic.core.rendezvous.records import NodeInfo, RoundResult

KEYS = RunKeys("job")
CFG = RendezvousConfig(min_nodes=1, max_nodes=4, heartbeat_interval=1.0, heartbeat_timeout=3.0)
WORLD = RoundResult(round_no=2, participants=(NodeInfo(node="a"), NodeInfo(node="b")))


def look(
    state: mm.MemberState, asked: float, answered: float, store: dict[str, bytes]
) -> tuple[mm.MemberState, str | None]:
    """One look asked at ``asked`` whose replies come at ``answered``: the state, and why the
    next round is open (None: the world stands)."""
    event: object = mm.LookRequested(now=asked)
    for _ in range(4):
        result = mm.step(state, event, CFG)
        state = result.state
        ops = [e for e in result.effects if isinstance(e, StoreOps)]
        if not ops:
            [seen] = [e for e in result.effects if isinstance(e, mm.Looked)]
            return state, seen.watch.next_opened
        event = mm.decode(state, OpsDone(replies=run_ops(ops[0].ops, store), now=answered), CFG)
    raise AssertionError("no answer")


def test_L8_a_silent_store_restarts_the_successors_clock() -> None:
    store = {KEYS.heartbeat("b"): b"7"}  # b's counter never moves here
    state = mm.member_state(KEYS, "a", WORLD)
    state, opened = look(state, 0.0, 0.0, store)  # first sighting: b's clock starts at 0
    state, opened = look(state, 1.0, 5.0, store)  # the store answered 4 s late: no evidence
    assert opened is None
    state, opened = look(state, 5.5, 5.5, store)
    assert opened is None
    state, opened = look(state, 8.0, 8.0, store)  # still for the timeout since the answer
    assert opened == "membership"


def test_a_slow_answer_under_an_interval_judges_as_a_quick_one() -> None:
    store = {KEYS.heartbeat("b"): b"7"}
    state = mm.member_state(KEYS, "a", WORLD)
    state, _ = look(state, 0.0, 0.0, store)
    state, opened = look(state, 2.6, 3.1, store)  # 0.5 s late: b was still for 3.1 s
    assert opened == "membership"
