"""A metric handler serving Prometheus text over HTTP (optional extra ``tpelastic[prometheus]``).

The agent's well-known metrics (:class:`~tpelastic.adapters.sinks.metrics.AgentMetric`) become
named Prometheus series; every other metric becomes ``tpelastic_metric{group,name}`` holding the
last value. Each handler owns its own registry, so two handlers in one process (or a test next to
an agent) never collide.
"""

from __future__ import annotations

import threading
from typing import Any

from tpelastic.adapters.sinks.metrics import DEFAULT_GROUP, AgentMetric, MetricData

_prom: Any
try:
    import prometheus_client as _prom
except ImportError:  # the optional extra is not installed; say so when someone asks for it
    _prom = None


def _require_client() -> Any:
    if _prom is None:
        raise ImportError(
            "the Prometheus handler needs prometheus_client: pip install 'tpelastic[prometheus]'"
        )
    return _prom


class PrometheusMetricHandler:
    """Publishes metrics on ``http://host:port/metrics`` until :meth:`close`.

    Args:
        port: TCP port to serve on; 0 picks a free one (read it back from :attr:`port`).
        host: address to bind; loopback unless you mean to expose it.

    Raises:
        ImportError: with the install command when prometheus_client is missing.
        OSError: when the port cannot be bound.
    """

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        prom = _require_client()
        self._lock = threading.Lock()
        self.registry = prom.CollectorRegistry(auto_describe=True)
        self._rdzv_duration = prom.Gauge(
            "tpelastic_rendezvous_duration_seconds",
            "How long the last rendezvous round took to complete.",
            registry=self.registry,
        )
        self._rdzv_round = prom.Gauge(
            "tpelastic_rendezvous_round",
            "The current rendezvous round number.",
            registry=self.registry,
        )
        self._restarts_used = prom.Gauge(
            "tpelastic_restarts_used", "Worker group restarts used so far.", registry=self.registry
        )
        self._restarts_left = prom.Gauge(
            "tpelastic_restarts_left",
            "Worker group restarts left in the budget.",
            registry=self.registry,
        )
        self._workers = prom.Gauge(
            "tpelastic_workers", "Local workers by state.", ["state"], registry=self.registry
        )
        self._failures = prom.Counter(
            "tpelastic_failures", "Worker failures by reason.", ["reason"], registry=self.registry
        )
        self._other = prom.Gauge(
            "tpelastic_metric",
            "Last value of any other metric.",
            ["group", "name"],
            registry=self.registry,
        )
        self._server, self._thread = prom.start_http_server(port, addr=host, registry=self.registry)
        self.host = host
        self.port: int = self._server.server_port

    @property
    def url(self) -> str:
        """Where to scrape."""
        return f"http://{self.host}:{self.port}/metrics"

    def emit(self, data: MetricData) -> None:
        with self._lock:
            if data.group == DEFAULT_GROUP and self._emit_known(data):
                return
            self._other.labels(group=data.group, name=data.name).set(data.value)

    def _emit_known(self, data: MetricData) -> bool:
        gauges = {
            AgentMetric.RDZV_DURATION_S: self._rdzv_duration,
            AgentMetric.RDZV_ROUND: self._rdzv_round,
            AgentMetric.RESTARTS_USED: self._restarts_used,
            AgentMetric.RESTARTS_LEFT: self._restarts_left,
        }
        if data.name in gauges:
            gauges[data.name].set(data.value)
            return True
        if data.name.startswith(AgentMetric.WORKERS_PREFIX):
            state = data.name[len(AgentMetric.WORKERS_PREFIX) :]
            self._workers.labels(state=state).set(data.value)
            return True
        if data.name.startswith(AgentMetric.FAILURES_PREFIX) and data.value >= 0:
            # A failure metric's value is how many new failures it reports (usually 1).
            reason = data.name[len(AgentMetric.FAILURES_PREFIX) :]
            self._failures.labels(reason=reason).inc(data.value)
            return True
        return False

    def close(self) -> None:
        """Stop serving and free the port; idempotent."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5.0)
            self._server = None
