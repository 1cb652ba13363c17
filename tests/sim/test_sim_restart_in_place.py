"""Restarts in place in the simulator: a worker failure opens the round's next attempt and every
member restarts as it, learning of it on its held wait (one latency after the key is set), not at
its next periodic look; membership changes still re-form the round and carry the attempts."""

from __future__ import annotations

import pytest

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.sim.cluster import Cluster, Status
from tpelastic.core.sim.run import run_scenario
from tpelastic.core.sim.scenario import ScenarioError, scenario_from_dict

CONFIG = RendezvousConfig(
    min_nodes=2,
    max_nodes=4,
    join_timeout=600.0,
    last_call_timeout=2.0,
    heartbeat_interval=1.0,
    heartbeat_timeout=3.0,
)
LATENCY = 0.01


def formed(**fields: object) -> Cluster:
    cluster = Cluster(config=CONFIG, latency=LATENCY, **fields)  # type: ignore[arg-type]
    for name in "abcd":
        cluster.start(name)
    cluster.advance(0.5)
    assert cluster.worlds() == {(0, 0): 4}
    return cluster


def restarts(cluster: Cluster) -> list[tuple[float, str, int]]:
    return [
        (round(r.t, 6), r.node, int(dict(r.fields)["attempt"]))  # type: ignore[call-overload]
        for r in cluster.records
        if r.name == "node.restarted"
    ]


def test_members_learn_of_an_attempt_one_latency_after_it_opens() -> None:
    cluster = formed()
    failed_at = cluster.now
    cluster.fail_workers("b")
    cluster.advance(0.05)  # far less than a heartbeat interval: no periodic look ran
    assert cluster.worlds() == {(0, 1): 4}
    seen = restarts(cluster)
    # The failed node restarts once its open is answered (one latency); each held wait wakes
    # one latency after the key is set.
    assert seen[0] == (round(failed_at + LATENCY, 6), "b", 1)
    assert sorted(seen[1:]) == [(round(failed_at + 2 * LATENCY, 6), n, 1) for n in "acd"]
    assert set(cluster.results()) == {0}  # no new round
    assert not cluster.overlaps


def test_a_slow_member_learns_later_and_everyone_ends_on_the_newest_attempt() -> None:
    cluster = formed()
    cluster.slow("c", 0.2)
    cluster.fail_workers("a")
    cluster.advance(0.05)
    assert cluster.worlds() == {(0, 1): 3, (0, 0): 1}  # c has not heard yet
    assert cluster.nodes["c"].attempt == 0
    cluster.advance(0.3)
    assert cluster.worlds() == {(0, 1): 4}
    cluster.fail_workers("d")
    cluster.fail_workers("a")  # before anyone heard of d's attempt 2: the same key, one unit
    cluster.advance(0.5)
    assert cluster.worlds() == {(0, 2): 4}
    assert not cluster.overlaps


def test_a_cut_off_member_misses_its_wake_up_and_its_look_finds_the_attempt() -> None:
    cluster = formed()
    cluster.partition("d")
    cluster.fail_workers("a")
    cluster.advance(0.05)
    assert cluster.nodes["d"].attempt == 0  # its held wait failed with the store out of reach
    cluster.heal("d")
    cluster.advance(1.5)  # its next look reads the attempt key
    assert cluster.nodes["d"].status is Status.TRAINING and cluster.nodes["d"].attempt == 1
    assert cluster.worlds() == {(0, 1): 4}


def test_a_membership_change_re_forms_the_round_and_carries_the_attempts() -> None:
    cluster = formed()
    for victim in ("a", "b", "c"):
        cluster.fail_workers(victim)
        cluster.advance(0.1)
    assert cluster.worlds() == {(0, 3): 4}
    cluster.advance(6.0)  # past the collateral window: d's loss cannot explain the failures
    cluster.crash("d")
    cluster.advance(10.0)
    result = cluster.results()[1]
    assert sorted(p.node for p in result.participants) == ["a", "b", "c"]
    assert result.restart_count == 3  # the three attempts of round 0, carried
    assert cluster.worlds() == {(1, 0): 3}
    cluster.fail_workers("a")
    cluster.advance(0.1)
    assert cluster.worlds() == {(1, 1): 3}
    assert not cluster.overlaps


def test_without_restarts_in_place_a_failure_re_forms_the_round() -> None:
    cluster = formed(restart_in_place=False)
    cluster.fail_workers("b")
    cluster.advance(3.0)
    assert cluster.worlds() == {(1, 0): 4}
    assert cluster.results()[1].restart_count == 1
    assert restarts(cluster) == []


def test_a_node_never_goes_back_to_an_older_attempt() -> None:
    cluster = formed()
    cluster.fail_workers("a")
    cluster.advance(0.1)
    world = cluster.nodes["b"].world
    assert world is not None
    cluster._restart(cluster.nodes["b"], world, 1)  # a stale wake-up, forced
    assert cluster.overlaps and "went from attempt 1 to 1" in cluster.overlaps[-1]


@pytest.mark.parametrize("in_place", [True, False])
def test_the_summary_counts_restarts_in_place(in_place: bool) -> None:
    scenario = scenario_from_dict(
        {
            "nodes": 6,
            "min_nodes": 3,
            "max_nodes": 6,
            "duration": 30.0,
            "latency": 0.005,
            "heartbeat_interval": 1.0,
            "heartbeat_timeout": 3.0,
            "last_call_timeout": 2.0,
            "restart_in_place": in_place,
            "faults": [
                {"at": 5.3, "kind": "fail_workers", "node": "node2"},
                {"at": 10.3, "kind": "fail_workers", "node": "node4"},
                # Past the collateral window (5.5 s) of the last failure: the leave explains none.
                {"at": 17.0, "kind": "leave", "node": "node5"},
            ],
        }
    )
    summary = run_scenario(scenario).summary
    assert summary.overlaps == 0
    assert summary.restarts_used == 2
    if in_place:
        assert [(a.round_no, a.attempt, a.restart_count, a.members) for a in summary.attempts] == [
            (0, 1, 1, 6),
            (0, 2, 2, 6),
        ]
        assert summary.restarts_in_place == 12
        # From the failure: the open's round trip, then the held waits' wake-up.
        assert all(a.all_at - a.first_at == pytest.approx(0.01) for a in summary.attempts)
        assert [(r.round_no, r.restart_count) for r in summary.rounds] == [(0, 0), (1, 2)]
        assert any("restarts in place: 2 attempt(s)" in line for line in summary.lines())
    else:
        assert summary.attempts == () and summary.restarts_in_place == 0
        assert [(r.round_no, r.restart_count) for r in summary.rounds] == [
            (0, 0),
            (1, 1),
            (2, 2),
            (3, 2),
        ]


def test_a_scenario_flag_must_be_a_boolean() -> None:
    with pytest.raises(ScenarioError, match="restart_in_place must be true or false"):
        scenario_from_dict(
            {"nodes": 2, "min_nodes": 1, "max_nodes": 2, "duration": 1, "restart_in_place": "yes"}
        )


def test_a_failure_whose_attempt_cannot_be_opened_holds_the_node_until_the_open_lands() -> None:
    """The agent spent the unit and asked for the attempt; its handler retries the open (the
    workers stay stopped) and, once the store answers, every member restarts as it."""
    cluster = formed(retry_after=1.0)
    cluster.partition("d")
    cluster.fail_workers("d")
    cluster.advance(0.05)
    node = cluster.nodes["d"]
    assert node.status is Status.HOLDING and node.retry_pending
    assert cluster.keys.attempt(0, 1) not in cluster.store  # nobody restarts: nothing opened
    assert cluster.worlds() == {(0, 0): 3}
    cluster.heal("d")
    cluster.advance(2.0)  # the next retry lands; the members' held waits wake
    assert cluster.worlds() == {(0, 1): 4}
    assert node.agent.restart_count == 1
    assert not cluster.overlaps
