"""Metrics: MetricsConfig, configure, prof, put_metric and the metric handlers.

This module is the public import path for these names; they are defined under
``tpelastic.adapters.sinks`` and re-exported here. ``PrometheusMetricHandler`` needs the optional
extra ``tpelastic[prometheus]`` only when it is constructed.
"""

from tpelastic.adapters.sinks.metrics import (
    DEFAULT_GROUP,
    AgentMetric,
    ConsoleMetricHandler,
    LoggingMetricHandler,
    MetricData,
    MetricHandler,
    MetricsConfig,
    MetricsRouter,
    NullMetricHandler,
    configure,
    initialize_metrics,
    prof,
    put_metric,
)
from tpelastic.adapters.sinks.prometheus import PrometheusMetricHandler

__all__ = [
    "DEFAULT_GROUP",
    "AgentMetric",
    "ConsoleMetricHandler",
    "LoggingMetricHandler",
    "MetricData",
    "MetricHandler",
    "MetricsConfig",
    "MetricsRouter",
    "NullMetricHandler",
    "PrometheusMetricHandler",
    "configure",
    "initialize_metrics",
    "prof",
    "put_metric",
]
