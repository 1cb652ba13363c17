"""The Prometheus handler serves the agent's metrics on 127.0.0.1, scraped over real HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

pytest.importorskip("prometheus_client")  # the optional extra; the test extra installs it

from tpelastic.metrics import AgentMetric, MetricData, PrometheusMetricHandler


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def put(handler, name, value, group="tpelastic"):
    handler.emit(MetricData(timestamp=0.0, group=group, name=name, value=value))


def test_endpoint_shows_the_agent_metrics():
    handler = PrometheusMetricHandler(port=0)
    try:
        put(handler, AgentMetric.RDZV_DURATION_S, 2.5)
        put(handler, AgentMetric.RDZV_ROUND, 3)
        put(handler, AgentMetric.RESTARTS_USED, 1)
        put(handler, AgentMetric.RESTARTS_LEFT, 2)
        put(handler, "workers.HEALTHY", 4)
        put(handler, "workers.FAILED", 1)
        put(handler, "failures.timeout", 1)
        put(handler, "failures.timeout", 1)
        put(handler, "loss", 0.25, group="trainer")
        text = scrape(handler.url)
    finally:
        handler.close()
    lines = set(text.splitlines())
    assert "tpelastic_rendezvous_duration_seconds 2.5" in lines
    assert "tpelastic_rendezvous_round 3.0" in lines
    assert "tpelastic_restarts_used 1.0" in lines
    assert "tpelastic_restarts_left 2.0" in lines
    assert 'tpelastic_workers{state="HEALTHY"} 4.0' in lines
    assert 'tpelastic_workers{state="FAILED"} 1.0' in lines
    assert 'tpelastic_failures_total{reason="timeout"} 2.0' in lines
    assert 'tpelastic_metric{group="trainer",name="loss"} 0.25' in lines


def test_close_frees_the_port_and_two_handlers_coexist():
    a, b = PrometheusMetricHandler(port=0), PrometheusMetricHandler(port=0)
    put(a, AgentMetric.RDZV_ROUND, 1)
    assert "tpelastic_rendezvous_round 1.0" in scrape(a.url)
    assert "tpelastic_rendezvous_round 0.0" in scrape(b.url)  # separate registries
    url = a.url
    a.close()
    a.close()  # idempotent
    b.close()
    with pytest.raises(urllib.error.URLError):
        scrape(url)
