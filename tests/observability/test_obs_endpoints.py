"""The Prometheus metrics and the health endpoint of a real agent, scraped while its job runs
(after a crash and a restart) and gone once the job is over: on two ports of 127.0.0.1, and as
one endpoint bound to every address, checked against the series docs/observability.md lists."""

from __future__ import annotations

import json
import re
import urllib.error
from pathlib import Path

import pytest
from obs_helpers import REPO, WORKER, finish, free_port, http_get, tpstart, wait_for
from prometheus_client.parser import text_string_to_metric_families

BASE = ("node", "role", "run_id")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(name, labels other than run_id/node/role) -> value, over the tpelastic_* series."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k not in BASE}
            found[(sample.name, tuple(sorted(labels.items())))] = sample.value
    return found


def documented_series() -> set[str]:
    """The series names in the table under docs/observability.md's "Prometheus series"."""
    text = (REPO / "docs" / "observability.md").read_text()
    section = text.split("### Prometheus series", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `(tpelastic_\w+)`", section, flags=re.M))


def scraped_series(text: str) -> dict[str, str]:
    """Series name as documented (counters with ``_total``) -> type, with each's labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        if family.name.endswith("_created"):
            continue  # the client's creation time of each counter and histogram
        name = family.name + "_total" if family.type == "counter" else family.name
        found[name] = family.type
        for sample in family.samples:
            if name.startswith("tpelastic_"):
                assert set(BASE) <= set(sample.labels), sample
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
            ready = ready and now.get(("tpelastic_restarts_total", ())) == 1 and healthy == 2
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
        assert seen[("tpelastic_restarts_total", ())] == 1
        assert seen[("tpelastic_restarts_left", ())] == 1
        assert seen[("tpelastic_rendezvous_round", ())] == 0
        assert seen[("tpelastic_rendezvous_duration_seconds_count", ())] == 1
        assert seen[("tpelastic_worker_failures_total", (("reason", "exit"),))] == 1
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


def test_one_endpoint_on_every_address_serves_metrics_and_health(tmp_path: Path) -> None:
    port = free_port()
    release = tmp_path / "release"
    proc = tpstart(
        "--nproc-per-node", "2", "--max-restarts", "1", "--role", "trainer",
        "--metrics-addr", f"0.0.0.0:{port}",
        WORKER, "--crash-rank", "1", "--hold-until", str(release),
        log=tmp_path / "run.log",
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"  # bound to 0.0.0.0, reached over loopback
    try:

        def every_series() -> str | None:
            text = http_get(f"{base}/metrics")
            seen = _samples(text)
            ready = seen.get(("tpelastic_restarts_total", ())) == 1
            steps = [seen.get(("tpelastic_rank_step_seconds", (("rank", r),))) for r in "01"]
            # Rank 0 reports steps as it goes: under load its third may come after the series.
            stepped = seen.get(("tpelastic_rank_step", (("rank", "0"),)), 0) >= 3
            return text if ready and stepped and None not in steps else None

        text = wait_for(every_series, what="the restarted attempt's series on /metrics")
        health = json.loads(http_get(f"{base}/health"))
        assert health["state"] == "RUNNING" and health["restart_count"] == 1
        assert json.loads(http_get(f"{base}/healthz"))["run_id"] == health["run_id"]
    finally:
        release.touch()
        code = finish(proc)
    assert code == 0, (tmp_path / "run.log").read_text()
    found = scraped_series(text)
    ours = {name for name in found if name.startswith("tpelastic_")}
    assert ours == documented_series(), "docs/observability.md lists other series than served"
    assert found["tpelastic_rendezvous_duration_seconds"] == "histogram"
    assert found["tpelastic_restarts_total"] == "counter"
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= set(found)
    seen = _samples(text)
    assert seen[("tpelastic_world_size", ())] == 2 and seen[("tpelastic_nodes", ())] == 1
    assert seen[("tpelastic_rank_step", (("rank", "0"),))] >= 3
    assert 0 < seen[("tpelastic_rank_step_seconds", (("rank", "1"),))] < 30
    families = {f.name: f for f in text_string_to_metric_families(text)}
    labels = families["tpelastic_info"].samples[0].labels
    assert (labels["role"], labels["run_id"]) == ("trainer", health["run_id"])
    assert "metrics for Prometheus at" not in (tmp_path / "run.log").read_text()
    assert f"health endpoint at http://0.0.0.0:{port}/health" in (tmp_path / "run.log").read_text()
