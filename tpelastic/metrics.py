"""Metrics: MetricsConfig, configure, prof, put_metric and the metric handlers.

This module is the public import path for these names; they are defined under
``tpelastic.adapters.sinks`` and re-exported here. ``PrometheusMetricHandler`` is loaded on first
use and needs the optional extra ``tpelastic[prometheus]`` only when it is constructed.
"""

from typing import TYPE_CHECKING, Any

from tpelastic.adapters.sinks.metrics import (
    DEFAULT_GROUP,
    AgentMetric,
    ConsoleMetricHandler,
    LoggingMetricHandler,
    MetricData,
    MetricHandler,
    MetricsConfig,
    MetricsRouter,
    MetricStream,
    NullMetricHandler,
    configure,
    get_elapsed_time_ms,
    getStream,
    initialize_metrics,
    prof,
    profile,
    publish_metric,
    put_metric,
)

if TYPE_CHECKING:
    from tpelastic.adapters.sinks.prometheus import PrometheusMetricHandler


def __getattr__(name: str) -> Any:
    # Loaded on first use: it tries to import prometheus_client, which training code that only
    # calls put_metric should not pay for.
    if name == "PrometheusMetricHandler":
        from tpelastic.adapters.sinks.prometheus import PrometheusMetricHandler

        return PrometheusMetricHandler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_GROUP",
    "AgentMetric",
    "ConsoleMetricHandler",
    "LoggingMetricHandler",
    "MetricData",
    "MetricHandler",
    "MetricsConfig",
    "MetricStream",
    "MetricsRouter",
    "NullMetricHandler",
    "PrometheusMetricHandler",
    "configure",
    "getStream",
    "get_elapsed_time_ms",
    "initialize_metrics",
    "prof",
    "profile",
    "publish_metric",
    "put_metric",
]
