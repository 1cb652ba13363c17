"""adapters/sim/collector.py: the collector is paused inside the block and restored after;
``tpelastic sim`` pauses it for big runs."""

from __future__ import annotations

import gc

import pytest

from tpelastic import sim
from tpelastic.adapters.sim.collector import collector_paused
from tpelastic.cli.sim import BIG_RUN_NODES, simulate
from tpelastic.sim import Cluster, RendezvousConfig, scenario_from_dict


def test_the_collector_is_paused_in_the_block_and_restored_after_even_on_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="boom"), collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block does not turn it back on
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_simulation_without_the_collector_forms_the_same_rounds() -> None:
    def rounds(paused: bool) -> list[tuple[int, ...]]:
        config = RendezvousConfig(
            min_nodes=5,
            max_nodes=10,
            heartbeat_interval=1.0,
            heartbeat_timeout=3.0,
            last_call_timeout=2.0,
        )
        cluster = Cluster(config=config, latency=0.01, detail=False)
        if paused:
            with collector_paused():
                _drive(cluster)
        else:
            _drive(cluster)
        return [(r, res.world_size) for r, res in sorted(cluster.results().items())]

    formed = rounds(paused=True)
    assert formed == rounds(paused=False)
    # The worker failure restarts round 0 in place; the crash re-forms the world without n7.
    assert formed == [(0, 10), (1, 9)]


def _drive(cluster: Cluster) -> None:
    for i in range(10):
        cluster.start(f"n{i}")
    cluster.advance(2.0)
    cluster.fail_workers("n3")
    cluster.advance(3.0)
    cluster.crash("n7")
    cluster.advance(10.0)


def _collections_during(nodes: int) -> int:
    """How many collector passes ran while ``tpelastic sim``'s runner simulated ``nodes``."""
    scenario = scenario_from_dict(
        {"nodes": nodes, "min_nodes": nodes, "max_nodes": nodes, "duration": 2.0}
    )
    passes: list[str] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(phase)

    gc.callbacks.append(count)
    try:
        report = simulate(scenario)
    finally:
        gc.callbacks.remove(count)
    assert report.summary.rounds and report.summary.rounds[0].world_size == nodes
    return len(passes)


def test_the_sim_command_runs_big_scenarios_without_the_collector() -> None:
    assert gc.isenabled()
    # At most the one pass that turning it back on at the end of the run sets off.
    assert _collections_during(BIG_RUN_NODES) <= 1
    assert gc.isenabled()
    # Just below the threshold the collector runs all along (dozens of passes).
    assert _collections_during(BIG_RUN_NODES - 1) > 10


def test_the_public_face_exports_collector_paused() -> None:
    assert sim.collector_paused is collector_paused and "collector_paused" in sim.__all__
