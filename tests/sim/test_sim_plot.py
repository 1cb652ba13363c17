"""The simulator's timeline picture: plurals, labels that never crowd, lanes aggregated above
MAX_LANES nodes, and real PNGs for a small run and a run larger than MAX_LANES."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from tpelastic.adapters.sim.plot import MAX_LANES, plot_timeline, plural, spaced, state_counts
from tpelastic.adapters.sim.scenario_file import load_scenario
from tpelastic.core.sim.run import run_scenario

REPO = Path(__file__).resolve().parents[2]


def test_plurals_and_spaced_labels() -> None:
    assert [plural(n, "round") for n in (0, 1, 2)] == ["0 rounds", "1 round", "2 rounds"]
    xs = [0.0, 0.1, 0.2, 5.0, 5.01, 9.0]
    assert spaced(xs, span=10.0, gap=0.1) == [True, False, False, True, False, True]
    many = [i * 0.01 for i in range(1000)]  # 1,000 marks on a 10 s axis: at most 1 / gap labels
    assert sum(spaced(many, span=10.0, gap=0.035)) <= 1 / 0.035 + 1


def test_state_counts_aggregate_lanes() -> None:
    lanes = {
        "a": [(0.0, 2.0, "joining", -1), (2.0, 10.0, "training", 0)],
        "b": [(0.0, 3.0, "joining", -1), (3.0, 6.0, "training", 0), (6.0, 6.0, "crashed", -1)],
    }
    times, counts = state_counts(lanes, end=10.0)
    at = {t: (counts["joining"][i], counts["training"][i], counts["ended"][i])
          for i, t in enumerate(times)}  # fmt: skip
    assert at[2.0] == (1, 1, 0) and at[3.0] == (0, 2, 0) and at[10.0] == (0, 1, 1)


@pytest.mark.parametrize("name", ["sim-basic.toml", "sim-churn.toml"])
def test_plots_render(tmp_path: Path, name: str) -> None:
    scenario = load_scenario(REPO / "examples" / name)
    report = run_scenario(scenario)
    out = tmp_path / "t.png"
    plot_timeline(report.records, report.summary, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if name == "sim-churn.toml":
        assert scenario.nodes > MAX_LANES  # the aggregated panel, not one lane per node
