"""Records, ranks and liveness of the rendezvous core, and short scenarios in the simulator."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.ranks import assign_ranks, choose_participants
from tpelastic.core.rendezvous.records import (
    NodeInfo,
    RoundResult,
    SchemaTooNew,
    StateCorrupt,
    decode_node,
    decode_result,
    encode_node,
    encode_result,
)
from tpelastic.core.sim.cluster import Cluster, Status

names = st.lists(st.sampled_from("abcdefghij"), unique=True, min_size=1, max_size=8)


@given(before=names, after=names, max_nodes=st.integers(1, 8))
def test_R10_sticky_ranks(before: list[str], after: list[str], max_nodes: int) -> None:
    previous = RoundResult(round_no=0, participants=tuple(NodeInfo(node=n) for n in before))
    arrivals = [NodeInfo(node=n) for n in after]
    chosen = choose_participants(arrivals, previous, max_nodes)
    ranked = assign_ranks(chosen, previous)
    new = RoundResult(round_no=1, participants=ranked)
    assert sorted(i.node for i in ranked) == sorted(i.node for i in chosen)
    for info in ranked:
        old = previous.rank_of(info.node)
        if old is not None and old < len(ranked):
            assert new.rank_of(info.node) == old, "a survivor lost a rank it could keep"
    if before[0] in after and len(ranked) and before[0] in [i.node for i in ranked]:
        assert new.rank_of(before[0]) == 0, "rank 0 moved although its node stayed"
    survivors = [n for n in after if n in before]
    assert [i.node for i in chosen[: len(survivors)]] == survivors[: len(chosen)]


def test_R11_records_round_trip_and_refuse_foreign_bytes() -> None:
    info = NodeInfo(node="host:1:abc", addr="10.0.0.1", prev_round=3, prev_rank=1)
    result = RoundResult(round_no=4, participants=(info,), restart_count=2, closer="host:1:abc")
    assert decode_node(encode_node(info)) == info
    assert decode_result(encode_result(result)) == result
    for raw in (
        b"",
        b"\x80\x04\x95garbage-pickle",
        b"[]",
        b'{"v": 1, "kind": "node"}',
        b'{"v": 1, "kind": "node", "node": 7, "addr": ""}',
        encode_node(info),
    ):
        with pytest.raises(StateCorrupt):
            decode_result(raw)
    newer = encode_result(result).replace(b'"v": 1', b'"v": 2')
    with pytest.raises(SchemaTooNew, match="upgrade tpelastic"):
        decode_result(newer)


def test_liveness_is_judged_on_the_observers_clock() -> None:
    tracker = LivenessTracker().observe("a", 5, now=100.0)
    assert not tracker.is_dead("a", now=102.0, timeout=3.0)
    assert tracker.is_dead("a", now=103.0, timeout=3.0)
    moved = tracker.observe("a", 6, now=103.0)
    assert not moved.is_dead("a", now=105.0, timeout=3.0)
    assert not tracker.is_dead("never-seen", now=1e9, timeout=3.0)


def small(min_nodes: int, max_nodes: int, join_timeout: float = 1000.0) -> Cluster:
    config = RendezvousConfig(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        join_timeout=join_timeout,
        last_call_timeout=2.0,
        heartbeat_interval=1.0,
        heartbeat_timeout=3.0,
    )
    return Cluster(config=config)


def test_below_min_the_join_times_out_with_a_reason() -> None:
    cluster = small(3, 3, join_timeout=30.0)
    cluster.start("a")
    cluster.start("b")
    cluster.advance(31.0)
    for name in "ab":
        node = cluster.nodes[name]
        assert node.status is Status.FAILED
        assert node.failure.startswith("rendezvous failed (timeout): ")
    assert "of at least 3 nodes" in cluster.nodes["a"].failure  # the closer says why


def test_crash_and_leave_each_lead_to_a_new_round_for_the_survivors() -> None:
    cluster = small(1, 4)
    for name in "abcd":
        cluster.start(name)
    assert cluster.training_rounds() == {0}
    cluster.crash("c")
    # first sighting (a tick), heartbeat timeout, the others' next watch, then the last call
    cluster.advance(1.0 + 3.0 + 1.0 + 2.0)
    assert cluster.training_rounds() == {1}
    assert sorted(p.node for p in cluster.results()[1].participants) == ["a", "b", "d"]
    cluster.leave("d")
    cluster.advance(1.0 + 2.0)  # the others' next watch, then the last call
    assert sorted(p.node for p in cluster.results()[2].participants) == ["a", "b"]
    assert cluster.keys.closed() not in cluster.store


def test_a_closed_rendezvous_refuses_joiners() -> None:
    cluster = small(2, 2)
    cluster.start("a")
    cluster.start("b")
    cluster.close("a")
    cluster.start("c")
    # c never trains: its join reads the close, whose outcome it ends with.
    assert cluster.nodes["c"].status is Status.FAILED
    assert cluster.nodes["c"].failure == "closed: succeeded"
    assert all("c" not in [p.node for p in r.participants] for r in cluster.results().values())


def test_late_joiner_waits_and_scales_up_without_a_failure() -> None:
    cluster = small(2, 3)
    cluster.start("a")
    cluster.start("b")
    cluster.advance(3.0)
    assert cluster.results()[0].world_size == 2
    cluster.start("c")
    cluster.advance(4.0)
    last = cluster.results()[max(cluster.results())]
    assert last.world_size == 3 and last.restart_count == 0


def test_one_failure_spends_one_unit_however_many_nodes_fail() -> None:
    cluster = small(3, 3)
    cluster.restart_in_place = False  # each failure re-joins: the next round spends the unit
    for name in "abc":
        cluster.start(name)
    cluster.fail_workers("a")
    cluster.fail_workers("b")
    cluster.advance(2.0)
    assert cluster.results()[1].restart_count == 1


def test_failures_at_once_open_one_attempt_and_the_next_round_carries_it() -> None:
    cluster = small(2, 3)
    cluster.latency = 0.01  # a and b fail before either learns of the other's attempt
    for name in "abc":
        cluster.start(name)
    cluster.advance(1.0)
    cluster.fail_workers("a")
    cluster.fail_workers("b")
    cluster.advance(1.0)
    assert {node.attempt for node in cluster.nodes.values()} == {1}  # one unit spent
    cluster.fail_workers("c")
    cluster.advance(1.0)
    assert {node.attempt for node in cluster.nodes.values()} == {2}
    assert set(cluster.results()) == {0}  # no new round: the workers restarted in place
    # Past the collateral window: a round a peer's leave opens inside it refunds the attempts
    # started just before (specs/agent.md, A15).
    cluster.advance(6.0)
    cluster.leave("c")
    cluster.advance(4.0)
    # Round 0's two attempts were spent: round 1 starts from restart count 2, not 0.
    assert cluster.results()[1].restart_count == 2
    assert {cluster.nodes[n].attempt for n in "ab"} == {0}
