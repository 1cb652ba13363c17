"""Liveness by lease in the pure core: with ``leased_liveness`` a heartbeat key that is absent
means dead at once and a present one means alive, however long ago it was written; without it,
observers time the counter on their own clocks (unchanged)."""

from __future__ import annotations

from attrs import evolve

from tpelastic.core.rendezvous import join, reading
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import LivenessTracker, judge
from tpelastic.core.rendezvous.membership import heartbeat_ops
from tpelastic.core.rendezvous.ops import Add, OpsDone, SetLeased
from tpelastic.core.rendezvous.records import NodeInfo, RoundResult
from tpelastic.core.rendezvous.state import JoinPhase, JoinState

COUNTED = RendezvousConfig(
    min_nodes=1, max_nodes=1, join_timeout=10_000, heartbeat_interval=1, heartbeat_timeout=3
)
LEASED = evolve(COUNTED, leased_liveness=True)
KEYS = RunKeys("run")
# Node a closes round 1; b, rank 1 of round 0, has neither arrived nor left.
CLOSER = JoinState(
    phase=JoinPhase.GATHERING,
    keys=KEYS,
    node=NodeInfo(node="a"),
    round_no=1,
    slot=0,
    previous=RoundResult(round_no=0, participants=(NodeInfo(node="a"), NodeInfo(node="b"))),
    deadline=10_000.0,
)


def _status(config: RendezvousConfig, beat: bytes | None, now: float) -> JoinState:
    # Replies to status_ops: closed, result, arrivals, b's member, gone and heartbeat keys, and
    # the round's proposal.
    replies = (None, None, b"1", None, None, beat, None)
    assert len(reading.status_ops(CLOSER)) == len(replies)
    return join.step(CLOSER, OpsDone(replies=replies, now=now), config).state


def test_R13_with_leases_an_absent_heartbeat_key_is_dead_at_once() -> None:
    closing = _status(LEASED, None, now=1.0)
    assert closing.phase is JoinPhase.COLLECTING
    assert closing.declared_dead == ("b",)
    # A present key is alive, however long this closer has been looking.
    assert _status(LEASED, b"alive", now=9_000.0).phase is JoinPhase.WAITING
    # Counted liveness is unchanged: a first sighting of "no counter" starts b's clock.
    assert _status(COUNTED, None, now=1.0).phase is JoinPhase.WAITING


def test_heartbeat_ops_renew_a_lease_or_bump_a_counter() -> None:
    key = KEYS.heartbeat("a")
    assert heartbeat_ops(KEYS, "a", COUNTED) == (Add(key, 1),)
    assert heartbeat_ops(KEYS, "a", LEASED) == (SetLeased(key, b"alive", 3.0),)


def test_judge_reads_presence_with_leases_and_times_counters_without() -> None:
    tracker = LivenessTracker()
    assert judge(tracker, "b", None, 0.0, 3.0, leased=True) == (tracker, True)
    assert judge(tracker, "b", b"alive", 99.0, 3.0, leased=True) == (tracker, False)
    seen, dead = judge(tracker, "b", b"4", 0.0, 3.0, leased=False)
    assert not dead and judge(seen, "b", b"4", 3.0, 3.0, leased=False)[1]
