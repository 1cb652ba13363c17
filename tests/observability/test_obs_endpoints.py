"""The Prometheus metrics and the health endpoint of a real agent, scraped over 127.0.0.1 while
its job runs (after a crash and a restart), and gone once the job is over."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest
from obs_helpers import WORKER, finish, free_port, http_get, tpstart, wait_for
from prometheus_client.parser import text_string_to_metric_families


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_and_health_during_and_after_a_run(tmp_path: Path) -> None:
    metrics_port, health_port = free_port(), free_port()
    release = tmp_path / "release"
    proc = tpstart(
        "--nproc-per-node", "2", "--max-restarts", "2",
        "--metrics-port", str(metrics_port), "--health-port", str(health_port),
        WORKER, "--crash-rank", "1", "--hold-until", str(release),
        log=tmp_path / "run.log",
    )  # fmt: skip
    try:
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        health_url = f"http://127.0.0.1:{health_port}/health"

        def restarted() -> dict[str, object] | None:
            health = json.loads(http_get(health_url))
            ages = health["last_progress_age_s"]
            ready = health["restart_count"] == 1 and health["state"] == "RUNNING"
            # The state turns before the restart's effects are carried out (an in-place
            # restart stops, opens and starts in one step): wait for the metrics to follow.
            now = _samples(http_get(metrics_url))
            healthy = now.get(("tpelastic_workers", (("state", "HEALTHY"),)))
            ready = ready and now.get(("tpelastic_restarts_used", ())) == 1 and healthy == 2
            return health if ready and all(a is not None for a in ages.values()) else None

        health = wait_for(restarted, what="the restarted attempt on /health")
        # The crash restarted the round in place: same round, attempt 1.
        assert (health["round"], health["attempt"], health["max_restarts"]) == (0, 1, 2)
        assert health["local_world_size"] == 2 and health["group_world_size"] == 1
        ages = health["last_progress_age_s"]
        assert isinstance(ages, dict) and sorted(ages) == ["0", "1"]
        # Workers step every 50 ms; the bound is generous so that a loaded machine passes too.
        assert all(0 <= age < 60 for age in ages.values())

        seen = _samples(http_get(metrics_url))
        assert seen[("tpelastic_restarts_used", ())] == 1
        assert seen[("tpelastic_restarts_left", ())] == 1
        assert seen[("tpelastic_rendezvous_round", ())] == 0
        assert seen[("tpelastic_rendezvous_duration_seconds", ())] >= 0
        assert seen[("tpelastic_failures_total", (("reason", "exit"),))] == 1
        assert seen[("tpelastic_workers", (("state", "HEALTHY"),))] == 2
        assert seen[("tpelastic_workers", (("state", "FAILED"),))] == 0
    finally:
        release.touch()
        code = finish(proc)
    assert code == 0, (tmp_path / "run.log").read_text()
    log = (tmp_path / "run.log").read_text()
    assert f"health endpoint at http://127.0.0.1:{health_port}/health" in log
    assert f"metrics for Prometheus at http://127.0.0.1:{metrics_port}/metrics" in log
    for url in (metrics_url, health_url):  # both servers close with the agent
        with pytest.raises(urllib.error.URLError):
            http_get(url)
