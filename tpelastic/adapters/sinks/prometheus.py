"""A metric handler for Prometheus (optional extra ``tpelastic[prometheus]``).

The agent's well-known metrics (:class:`~tpelastic.adapters.sinks.metrics.AgentMetric`) become
the named series listed in docs/observability.md (``_total`` counters, a ``_seconds``
histogram, gauges), every one labelled with the job's ``run_id``, ``node`` and ``role``.
``tpelastic_info`` carries the version beside those labels, and prometheus_client's process
and platform collectors add the usual ``process_*`` and ``python_info`` series. Any other
metric (``put_metric`` from training code, ``prof``) becomes a gauge of its own, named
``<group>_<name>`` with every character Prometheus does not allow made ``_``.

Each handler owns its own registry, so two handlers in one process (or a test next to an
agent) never collide. It serves ``/metrics`` itself when asked to (``serve=True``); otherwise
:meth:`exposition` gives the text for an endpoint that serves it beside ``/health``
(:mod:`tpelastic.adapters.health`).
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from typing import Any

from tpelastic.adapters.sinks.metrics import DEFAULT_GROUP, AgentMetric, MetricData

_prom: Any
try:
    import prometheus_client as _prom
except ImportError:  # the optional extra is not installed; say so when someone asks for it
    _prom = None

_log = logging.getLogger(__name__)
BASE_LABELS = ("run_id", "node", "role")
# Rendezvous rounds take from milliseconds (a warm store) to the join timeout (minutes).
RDZV_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_:]")


def _require_client() -> Any:
    if _prom is None:
        raise ImportError(
            "the Prometheus handler needs prometheus_client: pip install 'tpelastic[prometheus]'"
        )
    return _prom


def series_name(group: str, name: str) -> str:
    """The Prometheus name of any other metric: ``<group>_<name>``, made legal."""
    found = _NOT_ALLOWED.sub("_", f"{group}_{name}")
    return found if not found[0].isdigit() else f"_{found}"


class PrometheusMetricHandler:
    """Keeps the agent's metrics as Prometheus series; serves them until :meth:`close`.

    Args:
        port: TCP port to serve ``/metrics`` on; 0 picks a free one (read it from :attr:`port`).
        host: address to bind; loopback unless you mean to expose it (``0.0.0.0``: every one).
        serve: start its own HTTP server; False when another endpoint serves
            :meth:`exposition` (the agent's ``/health`` endpoint does).
        run_id, node, role: the labels every ``tpelastic_*`` series carries; ``node`` defaults
            to the host name.

    Raises:
        ImportError: with the install command when prometheus_client is missing.
        OSError: when the port cannot be bound.
    """

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        serve: bool = True,
        run_id: str = "",
        node: str | None = None,
        role: str = "default",
    ) -> None:
        prom = _require_client()
        from tpelastic import __version__

        self._lock = threading.Lock()
        self.registry = prom.CollectorRegistry(auto_describe=True)
        prom.ProcessCollector(registry=self.registry)
        prom.PlatformCollector(registry=self.registry)
        self._base = {
            "run_id": run_id,
            "node": node if node is not None else socket.gethostname(),
            "role": role,
        }

        def make(kind: Any, name: str, doc: str, *labels: str, **kw: Any) -> Any:
            return kind(name, doc, [*BASE_LABELS, *labels], registry=self.registry, **kw)

        info = make(prom.Gauge, "tpelastic_info", "Always 1: the agent's version.", "version")
        info.labels(**self._base, version=__version__).set(1)
        self._rdzv_duration = make(
            prom.Histogram,
            "tpelastic_rendezvous_duration_seconds",
            "How long each completed rendezvous round took this node.",
            buckets=RDZV_BUCKETS,
        )
        self._gauges = {
            AgentMetric.RDZV_ROUND: make(
                prom.Gauge, "tpelastic_rendezvous_round", "The current rendezvous round."
            ),
            AgentMetric.RESTARTS_LEFT: make(
                prom.Gauge, "tpelastic_restarts_left", "Restarts left in the job's budget."
            ),
            AgentMetric.WORLD_SIZE: make(
                prom.Gauge, "tpelastic_world_size", "Workers in the current round (WORLD_SIZE)."
            ),
            AgentMetric.NODES: make(
                prom.Gauge, "tpelastic_nodes", "Nodes in the current round (GROUP_WORLD_SIZE)."
            ),
            AgentMetric.STRAGGLERS: make(
                prom.Gauge,
                "tpelastic_stragglers",
                "Local ranks whose last step is slower than the straggler threshold.",
            ),
        }
        self._restarts = make(
            prom.Counter,
            "tpelastic_restarts",
            "Restarts of the job's workers so far (in-place attempts included).",
        )
        self._restarts_seen = 0.0
        self._workers = make(prom.Gauge, "tpelastic_workers", "Local workers by state.", "state")
        self._failures = make(
            prom.Counter, "tpelastic_worker_failures", "Worker failures by reason.", "reason"
        )
        self._rank_step = make(
            prom.Gauge, "tpelastic_rank_step", "Each local worker's last step number.", "rank"
        )
        self._rank_step_time = make(
            prom.Gauge,
            "tpelastic_rank_step_seconds",
            "How long each local worker's last step took.",
            "rank",
        )
        self._by_rank = {
            AgentMetric.RANK_STEP_PREFIX: self._rank_step,
            AgentMetric.RANK_STEP_TIME_PREFIX: self._rank_step_time,
        }
        self._other: dict[str, Any] = {}
        self._refused: set[str] = set()
        self.host = host
        self._server: Any = None
        self.port: int = port
        if serve:
            self._server, self._thread = prom.start_http_server(
                port, addr=host, registry=self.registry
            )
            self.port = self._server.server_port

    @property
    def url(self) -> str:
        """Where to scrape."""
        return f"http://{self.host}:{self.port}/metrics"

    def exposition(self) -> tuple[str, bytes]:
        """The content type and body of a scrape of this handler's registry."""
        prom = _require_client()
        return prom.CONTENT_TYPE_LATEST, prom.generate_latest(self.registry)

    def emit(self, data: MetricData) -> None:
        with self._lock:
            if data.group == DEFAULT_GROUP and self._emit_known(data):
                return
            self._emit_other(data)

    def _emit_known(self, data: MetricData) -> bool:
        base = self._base
        name = data.name
        if name in self._gauges:
            self._gauges[name].labels(**base).set(data.value)
        elif name == AgentMetric.RDZV_DURATION_S:
            self._rdzv_duration.labels(**base).observe(data.value)
        elif name == AgentMetric.RESTARTS_USED:
            # The agent publishes the job's count; a counter only moves up by the difference.
            if data.value > self._restarts_seen:
                self._restarts.labels(**base).inc(data.value - self._restarts_seen)
                self._restarts_seen = data.value
            else:
                self._restarts.labels(**base)  # the series exists from the first round
        elif name.startswith(AgentMetric.WORKERS_PREFIX):
            state = name[len(AgentMetric.WORKERS_PREFIX) :]
            self._workers.labels(**base, state=state).set(data.value)
        elif name.startswith(AgentMetric.FAILURES_PREFIX) and data.value >= 0:
            # A failure metric's value is how many new failures it reports (usually 1).
            reason = name[len(AgentMetric.FAILURES_PREFIX) :]
            self._failures.labels(**base, reason=reason).inc(data.value)
        else:
            for prefix, gauge in self._by_rank.items():
                if name.startswith(prefix):
                    gauge.labels(**base, rank=name[len(prefix) :]).set(data.value)
                    return True
            return False
        return True

    def _emit_other(self, data: MetricData) -> None:
        name = series_name(data.group, data.name)
        gauge = self._other.get(name)
        if gauge is None:
            if name in self._refused:
                return
            try:
                gauge = _prom.Gauge(
                    name,
                    f"Last value of metric {data.name!r} (group {data.group!r}).",
                    BASE_LABELS,
                    registry=self.registry,
                )
            except ValueError:  # the name is taken by another series: say so once, drop it
                self._refused.add(name)
                _log.warning("metric %s (%s): name taken, not exported", data.name, name)
                return
            self._other[name] = gauge
        gauge.labels(**self._base).set(data.value)

    def close(self) -> None:
        """Stop serving and free the port; idempotent."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5.0)
            self._server = None
