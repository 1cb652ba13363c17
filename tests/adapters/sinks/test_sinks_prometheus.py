"""The Prometheus handler: the agent's metrics as conventional series, scraped over real HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

pytest.importorskip("prometheus_client")  # the optional extra; the test extra installs it

from prometheus_client.parser import text_string_to_metric_families

from tpelastic import __version__
from tpelastic.adapters.sinks.prometheus import series_name
from tpelastic.metrics import AgentMetric, MetricData, PrometheusMetricHandler

BASE = {"run_id": "job-7", "node": "n1", "role": "trainer"}


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def put(handler, name, value, group="tpelastic"):
    handler.emit(MetricData(0.0, group, name, value))


def samples(text):
    """(sample name, labels without the base ones) -> value; checks the base labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = dict(s.labels)
            if s.name.startswith(("tpelastic_", "trainer_")):
                assert {k: labels.pop(k) for k in BASE} == BASE, s
            found[(s.name, tuple(sorted(labels.items())))] = s.value
    return found


def test_agent_metrics_become_conventional_series():
    handler = PrometheusMetricHandler(port=0, node="n1", run_id="job-7", role="trainer")
    try:
        put(handler, AgentMetric.RDZV_DURATION_S, 2.5)
        put(handler, AgentMetric.RDZV_DURATION_S, 0.02)
        put(handler, AgentMetric.RDZV_ROUND, 3)
        put(handler, AgentMetric.RESTARTS_USED, 1)
        put(handler, AgentMetric.RESTARTS_USED, 3)
        put(handler, AgentMetric.RESTARTS_USED, 3)  # the job's count: the counter follows it
        put(handler, AgentMetric.RESTARTS_LEFT, 2)
        put(handler, AgentMetric.WORLD_SIZE, 8)
        put(handler, AgentMetric.NODES, 2)
        put(handler, "workers.HEALTHY", 4)
        put(handler, "failures.timer", 1)
        put(handler, "failures.timer", 1)
        put(handler, AgentMetric.RANK_STEP_PREFIX + "5", 120)
        put(handler, AgentMetric.RANK_STEP_TIME_PREFIX + "5", 0.125)
        put(handler, "loss", 0.25, group="trainer")
        put(handler, "Trainer.step.duration.ms", 12, group="tpelastic")
        found = samples(scrape(handler.url))
    finally:
        handler.close()
    assert found[("tpelastic_info", (("version", __version__),))] == 1
    assert found[("tpelastic_rendezvous_duration_seconds_count", ())] == 2
    assert found[("tpelastic_rendezvous_duration_seconds_sum", ())] == pytest.approx(2.52)
    assert found[("tpelastic_rendezvous_duration_seconds_bucket", (("le", "0.05"),))] == 1
    assert found[("tpelastic_rendezvous_round", ())] == 3
    assert found[("tpelastic_restarts_total", ())] == 3
    assert found[("tpelastic_restarts_left", ())] == 2
    assert found[("tpelastic_world_size", ())] == 8
    assert found[("tpelastic_nodes", ())] == 2
    assert found[("tpelastic_workers", (("state", "HEALTHY"),))] == 4
    assert found[("tpelastic_worker_failures_total", (("reason", "timer"),))] == 2
    assert found[("tpelastic_rank_step", (("rank", "5"),))] == 120
    assert found[("tpelastic_rank_step_seconds", (("rank", "5"),))] == 0.125
    assert found[("trainer_loss", ())] == 0.25
    assert found[("tpelastic_Trainer_step_duration_ms", ())] == 12
    assert any(name == "process_cpu_seconds_total" for name, _ in found)
    assert not any(name == "tpelastic_metric" for name, _ in found)  # no names in labels


def test_names_made_legal_and_a_taken_name_is_dropped_not_fatal(caplog):
    assert series_name("my-group", "a.b/c") == "my_group_a_b_c"
    assert series_name("9g", "x") == "_9g_x"
    handler = PrometheusMetricHandler(serve=False)
    put(handler, "info", 5)  # would be tpelastic_info: taken by the info series
    put(handler, "info", 6)
    content_type, body = handler.exposition()
    assert content_type.startswith("text/plain")
    # The registry's process collector adds series whose values vary (open fds, CPU seconds):
    # look at the info series alone.
    families = text_string_to_metric_families(body.decode())
    info = [s.value for f in families for s in f.samples if s.name == "tpelastic_info"]
    assert info == [1]
    assert sum("name taken" in r.message for r in caplog.records) == 1


def test_close_frees_the_port_and_two_handlers_coexist():
    a, b = PrometheusMetricHandler(port=0), PrometheusMetricHandler(port=0)
    put(a, AgentMetric.RDZV_ROUND, 1)
    assert "tpelastic_rendezvous_round{" in scrape(a.url)
    assert "tpelastic_rendezvous_round{" not in scrape(b.url)  # separate registries
    url = a.url
    a.close()
    a.close()  # idempotent
    b.close()
    with pytest.raises(urllib.error.URLError):
        scrape(url)
