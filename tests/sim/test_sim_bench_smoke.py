"""Smoke test of bench/sim_scale.py at tiny sizes, so the benchmark keeps working as the core
changes. Numbers are not timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sim_scale.py"


def _bench(tmp_path: Path, *extra: str) -> list[dict[str, object]]:
    out = tmp_path / "runs.jsonl"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--sizes", "20,40", "--failures", "0,2", "--json", str(out)]
        + list(extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "load average before" in done.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["n"], r["failures"]) for r in rows] == [(20, 0), (40, 0), (20, 2), (40, 2)]
    for row in rows:
        assert row["gc"] == ("--gc" in extra)
        assert row["peak_mb"] > 0 and row["cpu"] > 0  # type: ignore[operator]
    return rows


@pytest.mark.parametrize("extra", [[], ["--gc"]], ids=["collector-paused", "gc"])
def test_the_scale_benchmark_restarts_in_place_and_counts_exactly(
    tmp_path: Path, extra: list[str]
) -> None:
    rows = _bench(tmp_path, *extra)
    by = {(r["n"], r["failures"]): r for r in rows}
    for n in (20, 40):
        assert by[(n, 2)]["fault"] == "inplace"
        # A recovery: the failed node's open lands (one latency), every member wakes on its
        # held wait (one more); no round re-forms.
        assert by[(n, 2)]["recovery_virtual"] == pytest.approx(0.002)
        # Per failure: one open, and one held wait re-placed by each member.
        assert by[(n, 2)]["store_ops"] == by[(n, 0)]["store_ops"] + 2 * (1 + n)  # type: ignore[operator]


def test_the_scale_benchmark_measures_full_re_rendezvous_too(tmp_path: Path) -> None:
    rows = _bench(tmp_path, "--fault", "rejoin")
    for row in rows:
        if row["failures"]:
            # Members learn that the next round opened on their held waits, one latency after
            # the failed node opens it, then join: milliseconds, not their next look (1 s).
            assert 0.002 < row["recovery_virtual"] < 0.1  # type: ignore[operator]
        else:
            assert row["recovery_virtual"] == 0.0
    # Store operations grow with N (the same protocol steps for every node; the heartbeats and
    # periodic looks that fall inside a recovery move by a few with where the victim sits).
    by = {(r["n"], r["failures"]): r for r in rows}
    twice = 2 * by[(20, 2)]["store_ops"]  # type: ignore[operator]
    assert abs(by[(40, 2)]["store_ops"] - twice) <= 0.02 * twice  # type: ignore[operator]

    (tmp_path / "crash").mkdir()
    for row in _bench(tmp_path / "crash", "--fault", "crash"):
        assert row["fault"] == "crash"
        if row["failures"]:
            # Found dead after the heartbeat timeout, then a last call: seconds, not a latency.
            assert 3.0 <= row["recovery_virtual"] <= 10.0  # type: ignore[operator]
