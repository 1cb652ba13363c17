"""A standalone TCPStore server, so the rendezvous store need not live inside an agent.

``tpelastic store --host H --port P`` (see :mod:`tpelastic.cli.store`) runs :func:`serve`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tpelastic.adapters.stores.tensorplay_store import tcp_store

# How long one stop-wait lasts before we look again. Short on purpose: a signal the kernel hands
# to one of tensorplay's server threads does not interrupt the main thread's wait, so the Python
# handler (which sets ``stop``) only runs when that wait returns.
_STOP_CHECK_SECONDS = 0.2
_CLOSE_GRACE_SECONDS = 3.0


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
        # Stopping tensorplay's server has been seen (once, in a full test run) to hang; the
        # process must still exit, so the stop gets a bounded grace and is then abandoned.
        closer = threading.Thread(target=store.close, name="tpelastic-store-close", daemon=True)
        closer.start()
        closer.join(_CLOSE_GRACE_SECONDS)


__all__ = ["serve"]
