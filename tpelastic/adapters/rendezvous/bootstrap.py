"""The workers' bootstrap store (``MASTER_ADDR:MASTER_PORT``), hosted by the round's rank-0 agent.

``init_process_group`` with ``env://`` needs a TCPStore at ``MASTER_ADDR:MASTER_PORT``. When the
agent hosts it, every worker connects as a client (``TORCHELASTIC_USE_AGENT_STORE=True``, which
tensorplay's ``env://`` honours when ``MASTER_ADDR``/``MASTER_PORT`` are the agent's endpoint), so
no worker has to bind a port the agent picked and then released.

The default is our own server (:class:`~tpelastic.adapters.stores.tcp_server.StoreServer`),
which tensorplay's client talks to, so the agent never imports tensorplay. ``store_type=
tensorplay`` hosts tensorplay's TCPStore server instead. ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
(torch's switch) leaves the store to rank 0's worker, as it was before agents hosted it.

Every attempt gets a fresh server on a port the OS picks: nothing an earlier attempt's workers
wrote is read again, and that attempt's workers lose their store when the next one starts.

The server serves without the run secret: tensorplay's client in the workers cannot answer our
challenge. It listens on the address it publishes as ``MASTER_ADDR`` only, as the TCPStore rank
0's worker hosts otherwise does, so it is no more open than that one (docs/security.md); our
server's bounds on what a client may send or make it hold apply all the same.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from tpelastic.adapters.stores.errors import StoreUnavailable

_log = logging.getLogger(__name__)

_STOP_GRACE_SECONDS = 2.0
DISABLE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
SERVERS = ("tcp", "tensorplay")


class BootstrapHost:
    """Hosts one bootstrap store server at a time, for this agent's attempts as rank 0.

    Args:
        server: ``tcp`` (our server) or ``tensorplay`` (tensorplay's TCPStore server).

    Raises:
        ValueError: an unknown ``server``.
    """

    def __init__(self, server: str = "tcp") -> None:
        if server not in SERVERS:
            raise ValueError(f"bootstrap store server must be one of {SERVERS}, got {server!r}")
        self.server = server
        self.address: str | None = None
        self._current: Any = None
        self._port: int | None = None

    @property
    def port(self) -> int | None:
        """The port of the server running now, or None."""
        return self._port

    def serve(self, address: str) -> int | None:
        """Stop the previous attempt's server and start a fresh one listening on ``address``
        (the ``MASTER_ADDR`` the workers get); its port, or None when no server can be started
        there (the workers then host the store themselves).
        """
        self.stop()
        try:
            if self.server == "tensorplay":
                from tpelastic.adapters.stores.tensorplay_store import tcp_store

                store = tcp_store(address, 0, is_server=True)
                self._current, self._port = store, int(store.raw.port)
            else:
                from tpelastic.adapters.stores.tcp_server import StoreServer

                server = StoreServer(address, 0).start()
                self._current, self._port = server, server.port
            self.address = address
        except StoreUnavailable as error:
            _log.warning("the workers host their bootstrap store: %s", error)
            return None
        return self._port

    def stop(self) -> None:
        """Stop the running server, if any (its clients then fail fast). Idempotent."""
        current, self._current, self._port = self._current, None, None
        self.address = None
        if current is None:
            return
        if self.server == "tensorplay":
            current.close()
        else:
            current.stop(_STOP_GRACE_SECONDS)

    def __repr__(self) -> str:
        return f"BootstrapHost({self.server}, port={self._port})"


def bootstrap_host(store_type: str) -> BootstrapHost | None:
    """The bootstrap host an agent of a run with ``store_type`` uses, or None when the workers
    host the store (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``)."""
    if os.environ.get(DISABLE_ENV, "0") == "1":
        return None
    return BootstrapHost("tensorplay" if store_type == "tensorplay" else "tcp")


__all__ = ["DISABLE_ENV", "BootstrapHost", "bootstrap_host"]
