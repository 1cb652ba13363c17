"""An agent's health endpoint: ``GET /health`` answers JSON from a snapshot callable.

Off by default: the agent starts one only when given a port (:func:`maybe_start`). The server
knows nothing about agents; it serves whatever ``snapshot()`` returns (e.g. state, round, last
progress age), so it is tested with a plain function.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Snapshot = Callable[[], dict[str, Any]]
_log = logging.getLogger(__name__)
PATHS = ("/health", "/")


def _handler_for(snapshot: Snapshot) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in PATHS:
                self._send(404, {"error": f"no such path {self.path}; try /health"})
                return
            try:
                body = snapshot()
                self._send(200, body)
            except Exception as exc:  # the endpoint reports a broken snapshot, it does not die
                self._send(500, {"error": f"snapshot failed: {type(exc).__name__}: {exc}"})

        def _send(self, code: int, body: object) -> None:
            data = json.dumps(body, default=str, sort_keys=True).encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            _log.debug("health %s - " + format, self.address_string(), *args)

    return Handler


class HealthServer:
    """Serves ``snapshot()`` as JSON on ``http://host:port/health`` from a daemon thread.

    Args:
        snapshot: returns a JSON-able dict; called once per request, on the server thread.
        port: 0 picks a free port (read it back from :attr:`port`).
        host: address to bind; loopback unless you mean to expose it.

    Raises:
        OSError: when the port cannot be bound.
    """

    def __init__(self, snapshot: Snapshot, port: int = 0, host: str = "127.0.0.1") -> None:
        self._server = ThreadingHTTPServer((host, port), _handler_for(snapshot))
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
        return f"http://{self.host}:{self.port}/health"

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
