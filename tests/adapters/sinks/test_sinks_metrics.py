"""Metric routing, prof, and the null, console and logging handlers."""

from __future__ import annotations

import io
import logging

import pytest

from tpelastic.adapters.sinks import metrics as metrics_module
from tpelastic.metrics import (
    ConsoleMetricHandler,
    LoggingMetricHandler,
    MetricData,
    MetricsConfig,
    MetricsRouter,
    NullMetricHandler,
    configure,
    initialize_metrics,
    prof,
    put_metric,
)


class Collect:
    def __init__(self):
        self.items: list[MetricData] = []

    def emit(self, data):
        self.items.append(data)


@pytest.fixture
def fresh_router(monkeypatch):
    """Isolate the process-wide routing so tests do not leak handlers into each other."""
    router = MetricsRouter()
    monkeypatch.setattr(metrics_module, "_PROCESS", router)
    return router


def test_groups_route_to_their_handler_and_others_to_the_default(fresh_router):
    a, default = Collect(), Collect()
    configure(a, "trainer")
    configure(default)
    put_metric("loss", 0.5, "trainer")
    put_metric("restarts.used", 1)
    assert [(d.group, d.name, d.value) for d in a.items] == [("trainer", "loss", 0.5)]
    assert [(d.group, d.name, d.value) for d in default.items] == [
        ("tpelastic", "restarts.used", 1.0)
    ]


def test_prof_counts_success_and_failure_and_times(fresh_router):
    sink = Collect()
    configure(sink, "g")

    @prof(group="g")
    def work(x):
        if x < 0:
            raise ValueError("negative")
        return x * 2

    assert work(2) == 4
    with pytest.raises(ValueError, match="negative"):
        work(-1)
    names = [d.name for d in sink.items]
    key = work.__qualname__
    assert names == [f"{key}.success", f"{key}.duration.ms", f"{key}.failure", f"{key}.duration.ms"]
    assert all(d.value >= 0 for d in sink.items)


def test_prof_without_parentheses_uses_the_default_group(fresh_router):
    sink = Collect()
    configure(sink, "tpelastic")

    @prof
    def ok():
        return "fine"

    assert ok() == "fine" and ok.__name__ == "ok"
    assert {d.group for d in sink.items} == {"tpelastic"}


def test_console_handler_line_format():
    stream = io.StringIO()
    ConsoleMetricHandler(stream).emit(MetricData(1.0, "g", "n", 2.5))
    assert stream.getvalue() == "[g][1.000]: n=2.5\n"


def test_logging_handler(caplog, fresh_router):
    configure(LoggingMetricHandler(), "g")
    with caplog.at_level(logging.INFO, logger="tpelastic.metrics"):
        put_metric("rendezvous.duration_s", 1.25, "g")
    [message] = [r.getMessage() for r in caplog.records if r.name == "tpelastic.metrics"]
    assert message.startswith("[g][") and message.endswith("rendezvous.duration_s=1.25")


def test_config_by_name(fresh_router, capsys):
    initialize_metrics(MetricsConfig(groups={"loud": "console"}, default="null"))
    put_metric("x", 3, "loud")
    put_metric("y", 4, "quiet")
    out = capsys.readouterr().out
    assert "x=3" in out and "y=" not in out
    assert isinstance(fresh_router.handler_for("quiet"), NullMetricHandler)


def test_config_rejects_unknown_handler_names():
    with pytest.raises(ValueError, match="group 'g': unknown handler 'statsd'"):
        MetricsConfig(groups={"g": "statsd"})
    with pytest.raises(ValueError, match="unknown handler 'nope'"):
        MetricsConfig(default="nope")


def test_non_numbers_are_refused(fresh_router):
    with pytest.raises((TypeError, ValueError)):
        put_metric("x", "lots")  # type: ignore[arg-type]
