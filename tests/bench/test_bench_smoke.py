"""Smoke test of the rendezvous benchmark: ours only, tiny sizes, so the bench keeps working.

It runs the real command (real store server process, real agent processes on 127.0.0.1) and
reads the JSON it writes; the numbers themselves are only sanity-checked, not timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "rendezvous_convergence.py"


def _run(*argv: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_ours_converges_at_2_and_4_and_re_forms_after_leave_crash_and_late_join(tmp_path):
    done = _run(
        *("--sizes", "2,4", "--impl", "ours", "--timeout", "30", "--no-plot"),
        *("--scenarios", "leave,crash,late", "--scenario-sizes", "3"),
        *("--scenario-heartbeat", "0.2", "--scenario-expiry", "0.6"),
        *("--out", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "results.json").read_text())
    results = {(r["scenario"], r["size"]): r for r in report["results"]}
    assert set(results) == {("none", 2), ("none", 4), ("leave", 3), ("crash", 3), ("late", 3)}
    for result in results.values():
        assert result["status"] == "ok", result
        assert result["ranks_ok"], result
    small, large = results[("none", 2)], results[("none", 4)]
    # A follower's join costs the same number of store operations whatever N is.
    assert small["ops_follower_max"] == large["ops_follower_max"] > 0
    assert 0 < large["last_join_call_to_all_done_s"] < 10
    for scenario, world in (("leave", 2), ("crash", 2), ("late", 4)):
        result = results[(scenario, 3)]
        assert result["rerendezvous_ok"], result
        assert result["new_world_sizes"] == [world]
    # The dead node is found by its heartbeat expiring, so that takes at least the expiry.
    assert results[("crash", 3)]["event_to_all_rejoined_s"] >= 0.6
    assert "convergence" in done.stdout and "re-rendezvous" in done.stdout


def test_bad_sizes_are_one_clear_line(tmp_path):
    done = _run("--sizes", "2,x", "--impl", "ours", "--out", str(tmp_path), timeout=30)
    assert done.returncode == 2
    assert "sizes must be integers" in done.stderr
    assert "Traceback" not in done.stderr
