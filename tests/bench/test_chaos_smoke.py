"""Smoke of the fault-injection harness: two short tpelastic episodes, real agents on 127.0.0.1.

It runs the real command (bench/chaos_bench.py) and reads the JSON it writes. The faults are
the ones tpelastic survives with every check passing; add a kind to SURVIVED once it does.
Not yet in: kill-node, stop-agent and stop-host. The job survives them, but a worker that fails
on the lost or stopped peer can restart in place before its agent sees the membership change,
and that restart is charged to the budget (check 5) in some episodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "chaos_bench.py"
SURVIVED = ("kill-worker", "new-node", "term-agent")


def _run(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *argv], capture_output=True, text=True, timeout=timeout
    )


def test_two_episodes_pass_all_five_checks(tmp_path: Path) -> None:
    # Seeds 3 and 4 draw a worker kill, a SIGTERM'd agent and a new node between them.
    done = _run(
        *("--launchers", "tpelastic", "--episodes", "2", "--first-seed", "3", "--nodes", "2"),
        *("--duration", "10", "--first", "2", "--quiet", "2", "--gap", "3,4"),
        *("--kinds", ",".join(SURVIVED), "--grace", "60", "--warm-timeout", "90"),
        *("--out", str(tmp_path)),
        timeout=420,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "results.json").read_text())
    episodes = report["episodes"]["tpelastic"]
    assert len(episodes) == 2
    for episode in episodes:
        where = f"seed {episode['seed']}: see {tmp_path}/episodes: {json.dumps(episode)[:3000]}"
        assert episode["outcome"] == "finished", where
        assert episode["checks"] == {
            "one_world": True,
            "no_orphans": True,
            "ends_well": True,
            "progress": True,
            "budget": True,
        }, where
        injected = [f for f in episode["faults"] if "t" in f]
        assert injected, where  # the schedule really ran
        assert all(r["recovery"] is not None for r in episode["recoveries"]), where
        assert episode["worlds"] > len([f for f in injected if f["fault"] == "kill-worker"])
    summary = report["summary"]["tpelastic"]
    assert summary["passed"] == 2 and summary["hung"] == 0
    assert "| all five checks pass | 2 |" in (tmp_path / "table.md").read_text()


def test_bad_arguments_are_one_clear_line(tmp_path: Path) -> None:
    done = _run("--kinds", "kill-worker,melt-cpu", "--out", str(tmp_path), timeout=60)
    assert done.returncode == 2
    assert "--kinds takes some of" in done.stderr
    assert "Traceback" not in done.stderr
