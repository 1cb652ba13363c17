"""An agent's observability endpoint: ``GET /health`` answers JSON from a snapshot callable,
``GET /metrics`` the Prometheus text of a metrics callable, on one port.

Off by default: the agent starts one only when given a port (:func:`maybe_start`). The server
knows nothing about agents; it serves whatever ``snapshot()`` returns (e.g. state, round, last
progress age) and whatever ``metrics()`` returns, so it is tested with plain functions.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Snapshot = Callable[[], dict[str, Any]]
# Returns (content type, body), or None when nothing publishes metrics here.
Metrics = Callable[[], "tuple[str, bytes] | None"]
_log = logging.getLogger(__name__)
PATHS = ("/health", "/healthz", "/")
METRICS_PATH = "/metrics"
STATUS_PATH = "/status"


def _handler_for(
    snapshot: Snapshot, metrics: Metrics | None, status: Snapshot | None
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == METRICS_PATH:
                self._metrics()
                return
            if path == STATUS_PATH and status is not None:
                try:
                    self._send(200, status())
                except Exception as exc:  # e.g. the store is gone: say so, keep serving
                    self._send(503, {"error": f"status failed: {type(exc).__name__}: {exc}"})
                return
            if path not in PATHS:
                self._send(404, {"error": f"no such path {self.path}; try /health or /metrics"})
                return
            try:
                body = snapshot()
                self._send(200, body)
            except Exception as exc:  # the endpoint reports a broken snapshot, it does not die
                self._send(500, {"error": f"snapshot failed: {type(exc).__name__}: {exc}"})

        def _metrics(self) -> None:
            try:
                found = metrics() if metrics is not None else None
            except Exception as exc:  # a broken collector is reported, never fatal
                self._send(500, {"error": f"metrics failed: {type(exc).__name__}: {exc}"})
                return
            if found is None:
                why = "no metrics here: run with --metrics-port (needs tpelastic[prometheus])"
                self._send(404, {"error": why})
                return
            self._send_bytes(200, found[0], found[1])

        def _send(self, code: int, body: object) -> None:
            data = json.dumps(body, default=str, sort_keys=True).encode("utf-8")
            self._send_bytes(code, "application/json", data)

        def _send_bytes(self, code: int, content_type: str, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            _log.debug("health %s - " + format, self.address_string(), *args)

    return Handler


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class HealthServer:
    """Serves ``snapshot()`` as JSON on ``http://host:port/health`` (and ``/healthz``), and
    ``metrics()`` on ``/metrics``, from a daemon thread.

    Args:
        snapshot: returns a JSON-able dict; called once per request, on the server thread.
        port: 0 picks a free port (read it back from :attr:`port`).
        host: address to bind; loopback unless you mean to expose it (``0.0.0.0`` or ``::``:
            every address).
        metrics: returns the content type and body of ``/metrics`` (None: a 404 saying how to
            turn metrics on); called once per request.
        status: returns the job's status view for ``/status`` (``tpelastic status --agent``);
            None: no such path.

    Raises:
        OSError: when the port cannot be bound.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        port: int = 0,
        host: str = "127.0.0.1",
        metrics: Metrics | None = None,
        status: Snapshot | None = None,
    ) -> None:
        server = _Server6 if ":" in host else ThreadingHTTPServer
        self._server = server((host, port), _handler_for(snapshot, metrics, status))
        self._server.daemon_threads = True
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="tpelastic-health",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/health"

    def close(self) -> None:
        """Stop serving and free the port (waits at most 5 s); idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5.0)
        self._server.server_close()

    def __enter__(self) -> HealthServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def maybe_start(
    snapshot: Snapshot, port: int | None, host: str = "127.0.0.1"
) -> HealthServer | None:
    """A running :class:`HealthServer` when ``port`` is given, else None (the default: off)."""
    return None if port is None else HealthServer(snapshot, port=port, host=host)
