"""A standalone TCPStore server, so the rendezvous store need not live inside an agent.

``tpelastic store --host H --port P`` (see :mod:`tpelastic.cli.store`) runs :func:`serve`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tpelastic.adapters.stores.tensorplay_store import tcp_store

# How long one stop-wait lasts before we look again; the loop exists only so no wait is unbounded.
_STOP_CHECK_SECONDS = 3600.0


def serve(
    host: str,
    port: int,
    ready_callback: Callable[[str, int], None],
    stop: threading.Event | None = None,
) -> None:
    """Host a TCPStore server on ``host:port`` until ``stop`` is set.

    Args:
        host: the address to listen on (``0.0.0.0`` for every interface).
        port: the port; 0 lets the OS choose one, which ``ready_callback`` receives.
        ready_callback: called once with ``(host, port)`` when clients can connect.
        stop: set it (e.g. from a signal handler) to shut the server down; without one the
            server runs until the process is interrupted.

    Raises:
        StoreUnavailable: the address cannot be bound (port in use, host not local).
    """
    stop = stop if stop is not None else threading.Event()
    store = tcp_store(host, port, is_server=True, timeout=60.0)
    try:
        ready_callback(host, int(store.raw.port))
        while not stop.wait(_STOP_CHECK_SECONDS):
            pass
    finally:
        store.close()


__all__ = ["serve"]
