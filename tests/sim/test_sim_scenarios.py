"""Scenarios through the simulator: determinism, faults at times and rates, the example files,
and the ``tpelastic sim`` command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tpelastic.adapters.sim.scenario_file import load_scenario
from tpelastic.adapters.sinks.events import Event, read_json_lines
from tpelastic.core.sim.rng import SplitMix64
from tpelastic.core.sim.run import run_scenario
from tpelastic.core.sim.scenario import ScenarioError, scenario_from_dict

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("sim-*.toml"))

BASE = {
    "name": "t",
    "nodes": 5,
    "min_nodes": 2,
    "max_nodes": 5,
    "heartbeat_interval": 1.0,
    "heartbeat_timeout": 3.0,
    "last_call_timeout": 2.0,
    "latency": 0.01,
    "duration": 200.0,
    "on_store_error": "retry",
    "retry_after": 1.0,
    "rates": [
        {"kind": "fail_workers", "every": 20.0},
        {"kind": "crash", "every": 60.0, "limit": 2},
        {"kind": "join", "every": 50.0},
        {"kind": "partition", "every": 70.0, "duration": 5.0},
    ],
    "faults": [{"at": 120.0, "kind": "store_down", "duration": 4.0}],
}


def test_splitmix64_is_a_fixed_stream() -> None:
    # Reference values of SplitMix64 seeded with 0: the stream must never change under a seed.
    rng = SplitMix64(0)
    assert [rng.next_u64() for _ in range(3)] == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
    ]
    assert 0.0 <= SplitMix64(5).uniform() < 1.0


def test_same_seed_same_trace_and_another_seed_another() -> None:
    scenario = scenario_from_dict({**BASE, "seed": 11})
    first, again = run_scenario(scenario), run_scenario(scenario)
    assert first.records == again.records
    assert first.summary == again.summary
    other = run_scenario(scenario, seed=12)
    assert other.records != first.records
    assert other.summary.seed == 12


def test_random_faults_keep_every_world_alone_and_recover() -> None:
    for seed in range(4):
        report = run_scenario(scenario_from_dict({**BASE, "seed": seed}))
        summary = report.summary
        assert summary.overlaps == 0, f"seed {seed}: two worlds trained side by side"
        assert dict(summary.faults).get("fail_workers", 0) > 0
        assert summary.restarts_used > 0
        assert summary.attempts, f"seed {seed}: no worker failure restarted in place"
        assert len(summary.rounds) > 1
        assert summary.failed_batches > 0  # the store outage and partitions were felt
        sizes = [r.world_size for r in summary.rounds]
        assert all(2 <= s <= 5 for s in sizes)
        assert 0 < summary.time_lost < summary.virtual_seconds


def test_latency_delays_the_first_round_by_round_trips() -> None:
    fast = run_scenario(scenario_from_dict({**BASE, "latency": 0.0, "rates": [], "faults": []}))
    slow = run_scenario(scenario_from_dict({**BASE, "latency": 0.1, "rates": [], "faults": []}))
    assert fast.summary.rounds[0].all_at == 0.0
    # A join takes several round trips (locate, probe, arrive, register, result...).
    assert 0.4 <= slow.summary.rounds[0].all_at <= 2.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nodes": "four"}, "nodes must be a number"),
        ({"colour": 1}, "unknown key 'colour'"),
        ({"faults": [{"at": 1, "kind": "explode"}]}, "unknown fault kind 'explode'"),
        ({"rates": [{"kind": "close", "every": 3}]}, "cannot come at a rate"),
        ({"min_nodes": 6}, "max_nodes (5) must be >= min_nodes (6)"),
        ({"on_store_error": "panic"}, "on_store_error must be one of"),
    ],
)
def test_bad_scenarios_name_the_problem(change: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError, match=None) as caught:
        scenario_from_dict({**BASE, **change})
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_scenarios_run(path: Path) -> None:
    report = run_scenario(load_scenario(path))
    assert report.summary.rounds, f"{path.name}: no round completed"
    assert report.summary.overlaps == 0


def tpelastic(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tpelastic", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sim_command_writes_summary_trace_and_plot(tmp_path: Path) -> None:
    trace, plot = tmp_path / "t.jsonl", tmp_path / "t.png"
    done = tpelastic("sim", "examples/sim-basic.toml", "--trace", str(trace), "--plot", str(plot))
    assert done.returncode == 0, done.stderr
    assert "rounds completed: 4" in done.stdout
    assert "worlds that trained side by side: 0" in done.stdout
    assert "attempt 1: restart count 1, 4 members restarted" in done.stdout
    events = read_json_lines(trace)
    assert events and all(isinstance(e, Event) for e in events)
    joined = [e for e in events if e.name == "rendezvous.joined"]
    assert {e.metadata["round"] for e in joined} == {0, 1, 2, 3}
    # The worker failure in round 2 restarted its four members in place, as attempt 1.
    restarted = [e for e in events if e.name == "node.restarted"]
    assert [(e.metadata["round"], e.metadata["attempt"]) for e in restarted] == [(2, 1)] * 4
    assert {e.metadata["restart_count"] for e in restarted} == {1}
    assert all(e.metadata["simulated"] is True for e in events)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sim_command_bad_scenario_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**BASE, "nodes": -1}))
    done = tpelastic("sim", str(bad))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"tpelastic: error: {bad}: nodes must be >= 0, got -1"
    ]
    broken = tmp_path / "broken.toml"
    broken.write_text("nodes = [")
    done = tpelastic("sim", str(broken))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "not valid toml" in done.stderr
    done = tpelastic("sim", str(tmp_path / "missing.toml"))
    assert done.returncode == 2 and "cannot read the scenario" in done.stderr


def test_sim_command_is_deterministic_per_seed(tmp_path: Path) -> None:
    scenario = tmp_path / "rates.json"
    scenario.write_text(json.dumps({**BASE, "duration": 80.0, "seed": 5}))
    first = tpelastic("sim", str(scenario))
    again = tpelastic("sim", str(scenario))
    other = tpelastic("sim", str(scenario), "--seed", "6")
    assert first.returncode == again.returncode == other.returncode == 0, first.stderr
    assert first.stdout == again.stdout
    assert "seed 5" in first.stdout and "seed 6" in other.stdout
    assert first.stdout.replace("seed 5", "") != other.stdout.replace("seed 6", "")
