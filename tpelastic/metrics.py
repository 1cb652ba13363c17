"""Metrics: MetricsConfig, configure, prof, put_metric and the metric handlers.

This module is the public import path for these names; they are defined under
``tpelastic.core`` and ``tpelastic.adapters`` and re-exported here. Names not yet listed in
``__all__`` arrive with the data, events, metrics and timers issue.
"""

__all__: list[str] = []
