"""The factory of the dynamic backends ``tcp`` (aliases ``c10d``, ``p10d``) and ``file``: open
(and maybe host) the store, wrap it as the named backend, build the handler."""

from __future__ import annotations

from tpelastic.adapters.rendezvous.backends import P10dRendezvousBackend, TpRendezvousBackend
from tpelastic.adapters.rendezvous.bootstrap import bootstrap_host
from tpelastic.adapters.rendezvous.dynamic import DynamicRendezvousHandler
from tpelastic.adapters.rendezvous.hosting import open_rendezvous_store
from tpelastic.adapters.rendezvous.parameters import RendezvousParameters
from tpelastic.adapters.rendezvous.settings import RendezvousSettings


def _with_file_store(params: RendezvousParameters) -> RendezvousParameters:
    """The ``file`` backend's parameters: its endpoint is a path, so store_type is ``file``."""
    given = params.get("store_type")
    if given is not None and str(given).strip().lower() != "file":
        raise ValueError(f"the file rendezvous backend cannot use store_type={given!r}")
    config = {**params.config, "store_type": "file"}
    return RendezvousParameters(
        params.backend,
        params.endpoint,
        params.run_id,
        params.min_nodes,
        params.max_nodes,
        params.local_addr,
        **config,
    )


def create_dynamic_handler(params: RendezvousParameters) -> DynamicRendezvousHandler:
    """The factory of the ``tcp`` (``c10d``, ``p10d``) and ``file`` backends.

    Opens (and, when this agent should, hosts) the store with
    :func:`~tpelastic.adapters.rendezvous.hosting.open_rendezvous_store`, wraps it as a
    :class:`P10dRendezvousBackend` (TCPStore, ours or tensorplay's by ``store_type``) or
    :class:`TpRendezvousBackend` (FileStore), and
    returns the handler. Nothing is written to the store until the first join.

    Raises:
        ValueError: parameters the dynamic backend cannot use.
        RendezvousConnectionError: the store cannot be opened or hosted.
    """
    if params.backend == "file":
        params = _with_file_store(params)
    RendezvousSettings.from_parameters(params)  # bad config fails before a port is bound
    opened = open_rendezvous_store(params)
    tcp = params.store_type in ("tcp", "tensorplay")
    backend_type = P10dRendezvousBackend if tcp else TpRendezvousBackend
    backend = backend_type(opened.store)
    try:
        return DynamicRendezvousHandler.from_parameters(
            params,
            backend,
            store_host=opened if opened.is_host else None,
            bootstrap_host=bootstrap_host(params.store_type),
        )
    except BaseException:
        backend.close()
        raise


__all__ = ["create_dynamic_handler"]
