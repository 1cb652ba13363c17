"""A standalone TCPStore server, so the rendezvous store need not live inside an agent.

``tpelastic store --host H --port P`` (see :mod:`tpelastic.cli.store`) runs :func:`serve`. It is
our server (:mod:`tpelastic.adapters.stores.tcp_server`): tensorplay's wire format, so agents
with ``store_type=tcp`` (ours) and ``store_type=tensorplay`` (tensorplay's client) both use it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tpelastic.adapters.stores.tcp_server import StoreServer

# How long one stop-wait lasts before we look again: a signal handler (which sets ``stop``)
# only runs when the main thread's wait returns.
_STOP_CHECK_SECONDS = 0.2
_CLOSE_GRACE_SECONDS = 3.0


def serve(
    host: str,
    port: int,
    ready_callback: Callable[[str, int], None],
    stop: threading.Event | None = None,
    *,
    secret: bytes | None = None,
) -> None:
    """Host a TCPStore server on ``host:port`` until ``stop`` is set.

    Args:
        host: the address to listen on (``0.0.0.0`` for every interface).
        port: the port; 0 lets the OS choose one, which ``ready_callback`` receives.
        ready_callback: called once with ``(host, port)`` when clients can connect.
        stop: set it (e.g. from a signal handler) to shut the server down; without one the
            server runs until the process is interrupted.
        secret: serve only clients that prove this run secret (docs/security.md).

    Raises:
        StoreUnavailable: the address cannot be bound (port in use, host not local).
    """
    stop = stop if stop is not None else threading.Event()
    server = StoreServer(host, port, secret=secret).start()
    try:
        ready_callback(host, server.port)
        while not stop.wait(_STOP_CHECK_SECONDS):
            pass
    finally:
        server.stop(_CLOSE_GRACE_SECONDS)  # bounded: the server thread is a daemon


__all__ = ["serve"]
