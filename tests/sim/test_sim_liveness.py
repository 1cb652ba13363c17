"""The simulator's liveness property over random fault sequences, and the new fault kinds."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import tomllib
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tpelastic.core.rendezvous import join
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.replies import StatusRead
from tpelastic.core.rendezvous.state import JoinState
from tpelastic.core.sim import faults
from tpelastic.core.sim.cluster import Cluster
from tpelastic.core.sim.explore import Bounds
from tpelastic.core.sim.explore_liveness import explore_liveness
from tpelastic.core.sim.liveness import liveness_problems, settle_time
from tpelastic.core.sim.nodes import Status
from tpelastic.core.sim.rng import SplitMix64
from tpelastic.core.sim.run import _bind, _Injector, build_cluster
from tpelastic.core.sim.scenario import Scenario, scenario_from_dict
from tpelastic.core.table import build_table

BASE: dict[str, Any] = {
    "nodes": 3,
    "min_nodes": 2,
    "max_nodes": 3,
    "duration": 0,
    "latency": 0.01,
    "heartbeat_interval": 2,
    "heartbeat_timeout": 6,
    "last_call_timeout": 1,
    "join_timeout": 60,  # longer than every fault window: a join timeout is a give-up
    "on_store_error": "retry",
    "retry_after": 1,
}
FAULT_WINDOW = 30.0
SHORT_PAUSE = 1.5  # below the fence margin (timeout - interval = 4 s) minus one beat interval


def run_to_end(faults_: list[dict[str, Any]], **overrides: Any) -> Cluster:
    """Run 3 nodes through ``faults_`` (each starts within the fault window), then settle from
    the end of the last one; return the cluster."""
    scenario: Scenario = scenario_from_dict({**BASE, **overrides, "faults": faults_})
    # A fault that starts late in the window may last past it (an outage from 29.75 s for 12 s).
    last = max((f["at"] + f.get("duration", 0.0) for f in faults_), default=0.0)
    settle = settle_time(scenario.config, scenario.latency, scenario.retry_after)
    end = max(FAULT_WINDOW, last) + settle
    cluster = build_cluster(scenario, detail=False)
    injector = _Injector(cluster, SplitMix64(scenario.seed))
    injector.start_nodes(scenario)
    for fault in scenario.faults:
        cluster.queue.schedule(fault.at, _bind(injector.inject, fault))
    cluster.advance(end)
    return cluster


def _fault(kind: str, at: float, node: int, duration: float, extra: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"at": at, "kind": kind, "node": f"node{node}"}
    if kind in ("partition", "store_down", "store_pause", "pause", "slow", "delay"):
        entry["duration"] = duration
    if kind in ("slow", "delay"):
        entry["extra_latency"] = extra
    if kind in ("store_down", "store_pause", "delay"):
        del entry["node"]
    if kind == "pause":
        entry["duration"] = min(duration, SHORT_PAUSE)
    return entry


# Faults the job must ride out (every outage ends well within the join timeout).
RIDE_OUT = ("crash", "leave", "join", "fail_workers", "partition", "slow", "store_down")
RIDE_OUT += ("store_pause", "delay", "pause")
# The store's host dies: the store never comes back, so every survivor must end with its reason.
FAULT_KINDS = (*RIDE_OUT, "store_host_death")

fault_lists = st.lists(
    st.builds(
        _fault,
        st.sampled_from(FAULT_KINDS),
        st.floats(0, FAULT_WINDOW, allow_nan=False).map(lambda t: round(t, 2)),
        st.integers(0, 2),
        st.floats(0.1, 12, allow_nan=False).map(lambda d: round(d, 2)),
        st.floats(0, 2, allow_nan=False).map(lambda x: round(x, 2)),
    ),
    max_size=6,
)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fault_lists)
@example(  # an outage that outlasts the fault window: the run settles from its end
    [
        _fault("store_down", 29.75, 1, 12.0, 0.0),
        _fault("crash", 15.94, 0, 6.86, 2.0),
        _fault("join", 16.41, 2, 9.62, 0.89),
        _fault("store_down", 16.41, 2, 0.1, 0.88),
        _fault("store_down", 0.1, 2, 9.45, 0.0),
        _fault("leave", 2.0, 2, 0.25, 0.0),
    ]
)
def test_S1_a_run_that_can_go_on_finishes(faults_: list[dict[str, Any]]) -> None:
    """With the store back and >= min_nodes up, everyone trains in one round; else (the
    store's host died, too few nodes up) every node that is up ends with its reason."""
    cluster = run_to_end(faults_)
    assert liveness_problems(cluster) == [], (faults_, cluster.log[-20:])


# Pauses past the fence margin: the node fences on resume and re-joins (specs/agent.md, A12).
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fault_lists, st.floats(5, 15).map(lambda d: round(d, 1)), st.integers(0, 2))
@example([], 6.0, 1)
def test_a_run_with_long_pauses_finishes(
    faults_: list[dict[str, Any]], pause: float, node: int
) -> None:
    long_pause = {"at": FAULT_WINDOW / 2, "kind": "pause", "node": f"node{node}"}
    cluster = run_to_end([*faults_, {**long_pause, "duration": pause}])
    assert liveness_problems(cluster) == [], (faults_, cluster.log[-20:])


# --- the failure modes of the fault runs, as scenarios (tests/sim/regressions/) ----------------

REGRESSIONS = Path(__file__).parent / "regressions"


def _run_file(name: str) -> Cluster:
    scenario = scenario_from_dict(tomllib.loads((REGRESSIONS / name).read_text()))
    cluster = build_cluster(scenario)
    injector = _Injector(cluster, SplitMix64(scenario.seed))
    injector.start_nodes(scenario)
    for fault in scenario.faults:
        cluster.queue.schedule(fault.at, _bind(injector.inject, fault))
    cluster.advance(scenario.duration)
    return cluster


def test_a_pause_past_the_fence_margin_does_not_end_the_node() -> None:
    cluster = _run_file("pause-past-the-fence-margin.toml")
    assert liveness_problems(cluster) == []


def test_pausing_every_node_in_turn_does_not_end_the_job() -> None:
    cluster = _run_file("pause-of-every-node.toml")
    assert liveness_problems(cluster) == []


def test_S2_the_store_hosts_death_ends_every_survivor_at_the_keep_alive_expiry() -> None:
    """O6 in the simulator: the store's host dies at 10 s; each survivor's store client finds
    connections refused, waits the outage out for the keep-alive expiry (heartbeat_timeout, 3 s)
    and then fails with the line naming the fix: exit 3 by 10 s + 3 s + a retry interval."""
    cluster = _run_file("store-host-dies.toml")
    assert liveness_problems(cluster) == []
    ended = {r.node: r.t for r in cluster.records if r.name == "agent.ended"}
    for name in ("node1", "node2"):
        node = cluster.nodes[name]
        assert node.status is Status.FAILED and node.agent.exit_code == 3, node
        assert "tpelastic store" in node.failure and "keep-alive expiry" in node.failure
        assert 13.0 <= ended[name] <= 14.5, ended
    announced = [r.node for r in cluster.records if r.name == "store.outage"]
    assert sorted(announced) == ["node1", "node2"]  # the first failure, once per survivor


def test_S3_a_peers_loss_after_the_budget_is_spent_is_a_membership_change() -> None:
    """The survivors' workers fail on the lost peer with the budget spent: they hold the failure
    for the collateral window, the ring reports the peer dead, and the job goes on (A13)."""
    cluster = _run_file("peer-loss-after-the-budget-is-spent.toml")
    assert liveness_problems(cluster) == []
    held = [r.node for r in cluster.records if r.name == "agent.warning"]
    assert sorted(held) == ["node0", "node1"]  # both held their collateral failure
    assert not any(r.name == "agent.ended" for r in cluster.records)
    assert cluster.keys.closed() not in cluster.store
    assert cluster.worlds() == {(1, 0): 2} and cluster.results()[1].restart_count == 2


def test_S4_a_peers_loss_with_budget_left_spends_no_budget() -> None:
    """The survivors restarted in place on the lost peer's failure; the peer's loss, reported
    within the collateral window, refunds that attempt (specs/agent.md A14), so the job's one
    own failure later still has its restart."""
    cluster = _run_file("peer-loss-with-budget-left.toml")
    assert liveness_problems(cluster) == []
    assert not any(r.name == "agent.ended" for r in cluster.records), cluster.log[-6:]
    assert cluster.results()[1].restart_count == 0  # the collateral attempt was refunded
    assert {n.agent.restart_count for n in cluster.nodes.values() if n.name != "node2"} == {1}


def test_a_paused_store_and_slow_messages_are_ridden_out() -> None:
    cluster = _run_file("store-paused.toml")
    assert liveness_problems(cluster) == []
    fenced = [r for r in cluster.records if r.name == "node.fenced"]
    assert len(fenced) == 3  # every keep-alive was late: the store stood still for 5 s
    assert len(cluster.results()) >= 2  # and they formed a new round afterwards


# --- the fault kinds themselves -------------------------------------------------------------


def _trio() -> Cluster:
    cluster = build_cluster(scenario_from_dict({**BASE, "faults": []}))
    for name in ("node0", "node1", "node2"):
        cluster.start(name)
    cluster.advance(5)
    assert all(node.status is Status.TRAINING for node in cluster.nodes.values())
    return cluster


def test_a_short_pause_goes_unnoticed() -> None:
    cluster = _trio()
    faults.pause_node(cluster, "node1")
    cluster.advance(SHORT_PAUSE)
    faults.resume_node(cluster, "node1")
    cluster.advance(20)
    assert [n.status for n in cluster.nodes.values()] == [Status.TRAINING] * 3
    assert len(cluster.results()) == 1


def test_a_long_pause_is_found_dead_by_peers_fences_on_resume_and_rejoins() -> None:
    cluster = _trio()
    faults.pause_node(cluster, "node1")
    cluster.advance(10)  # past the heartbeat timeout: the ring finds it dead
    assert any(r.name == "node.found_dead" for r in cluster.records)
    assert cluster.nodes["node1"].status is Status.TRAINING  # a stopped process learns nothing
    faults.resume_node(cluster, "node1")
    # Its clock jumped past the margin: it fences itself and, fencing not being failing, re-joins
    # as soon as its first beat lands (one latency: the store answers).
    assert any(r.name == "node.fenced" for r in cluster.records)
    assert cluster.nodes["node1"].status is Status.FENCED
    cluster.advance(2 * BASE["latency"])
    assert cluster.nodes["node1"].status in (Status.JOINING, Status.TRAINING)
    cluster.advance(40)
    assert [n.status for n in cluster.nodes.values()] == [Status.TRAINING] * 3


def test_a_paused_store_delays_batches_and_a_delay_slows_them() -> None:
    cluster = _trio()
    node = cluster.nodes["node0"]
    base = cluster._latency(node)
    faults.pause_store(cluster, 2.0)
    assert cluster._latency(node) == pytest.approx(base + 2.0)
    cluster.advance(3)
    assert cluster._latency(node) == pytest.approx(base)
    faults.delay_messages(cluster, 0.5)
    assert cluster._latency(node) == pytest.approx(base + 0.5)
    assert cluster.sim_store.failed_batches == 0  # a paused store refuses nothing


def test_the_store_hosts_death_takes_the_store() -> None:
    cluster = _trio()
    faults.store_host_dies(cluster, "node0")
    assert cluster.nodes["node0"].status is Status.CRASHED
    assert not cluster.store_up and cluster.store_gone
    cluster.advance(5)  # fenced (keep-alive lapsed): no beat lands, the outage not yet waited out
    fenced = {r.node for r in cluster.records if r.name == "node.fenced"}
    assert fenced == {"node1", "node2"}
    assert all(cluster.nodes[n].status is Status.FENCED for n in ("node1", "node2"))


def test_only_a_training_node_can_be_paused() -> None:
    cluster = build_cluster(scenario_from_dict({**BASE, "faults": []}))
    cluster.start("node0")
    with pytest.raises(ValueError, match="only a training node"):
        faults.pause_node(cluster, "node0")


def test_new_fault_kinds_parse_and_bad_ones_are_one_line() -> None:
    scenario = scenario_from_dict(
        {**BASE, "duration": 5, "faults": [{"at": 1, "kind": "store_pause", "duration": 1}]}
    )
    assert scenario.faults[0].kind == "store_pause"
    with pytest.raises(ValueError, match="unknown fault kind 'sigstop'"):
        scenario_from_dict({**BASE, "faults": [{"at": 1, "kind": "sigstop"}]})


# --- the explorer reports a join table under which no world ever forms ------------------------


def never_closes(state: JoinState, event: StatusRead, config: RendezvousConfig) -> bool:
    """Test-only broken guard: a round never closes, so no first world ever forms."""
    return False


NEVER_CLOSES = build_table(
    name="rendezvous_join_never_closes",
    phases=join.TABLE.phases,
    initial=join.TABLE.initial,
    events=join.TABLE.events,
    rows=join.ROWS,
    guards={**join.GUARDS, "may_close": never_closes},
    actions=join.ACTIONS,
    terminal=join.TABLE.terminal,
)


def test_the_liveness_explorer_reports_a_table_that_never_forms_a_world() -> None:
    bounds = Bounds(nodes=3, ticks=0, crashes=0, failures=0)
    step = functools.partial(join.step, table=NEVER_CLOSES)
    found = explore_liveness(bounds, step=step, rotations=20)
    assert found.stall is not None
    assert found.stall.events == ()  # the initial state already cannot settle
    assert "joining" in found.stall.detail


@pytest.mark.parametrize("outage_at", [16.0, 18.0])
def test_S1_a_lone_node_whose_join_a_store_outage_cut_ends_within_the_settle_time(
    outage_at: float,
) -> None:
    """Two crashes and a leave leave one node; a 12 s store outage cuts its join of a round whose
    closer crashed after arriving. After the outage the waits chain: the retry, the takeover of
    the gone closer, the declaration of the crashed member of round 0, the admitted crashed
    closer found dead by the ring, and round 2's join timeout: it must end inside the window."""
    faults_ = [
        _fault("crash", 1.0, 1, 1.0, 0.0),
        _fault("crash", 5.0, 0, 1.0, 0.0),
        _fault("leave", 0.0, 0, 1.0, 0.0),
        _fault("partition", 1.0, 0, 3.0, 0.0),
        _fault("store_down", outage_at, 0, 12.0, 0.0),
    ]
    cluster = run_to_end(faults_)
    assert liveness_problems(cluster) == []
    assert cluster.nodes["node2"].status is Status.FAILED
    assert "timeout: round 2" in cluster.nodes["node2"].failure


def test_a_fenced_node_waits_for_its_keep_alive_instead_of_rejoining_in_a_loop() -> None:
    """With no latency, a node whose heartbeats stopped used to fence, re-join, complete its
    join and fence again in the same instant, for ever. It now stays fenced (it trains in no
    round while its keep-alive is lapsed) and the others form a round without it."""
    config = RendezvousConfig(
        min_nodes=1,
        max_nodes=5,
        join_timeout=100_000.0,
        last_call_timeout=2.0,
        heartbeat_interval=1.0,
        heartbeat_timeout=3.0,
    )
    cluster = Cluster(config=config)
    for name in ("n1", "n2", "n3", "n4"):
        cluster.start(name)
    cluster.lose_heartbeats("n1")
    cluster.advance(48)
    assert cluster.nodes["n1"].status is Status.FENCED
    assert cluster.nodes["n1"].completed_rounds == [0]
    assert cluster.worlds() == {(1, 0): 3}
