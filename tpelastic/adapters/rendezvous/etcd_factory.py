"""The factory of the ``etcd`` backend: an etcd cluster holds the rendezvous state.

The endpoint lists the members (``host1:port,host2:port``); ``--rdzv-conf`` keys:
``etcd_prefix`` (key prefix, default ``/tpelastic``), ``cacert``, ``cert``, ``key`` (TLS),
``user``, ``password`` (etcd auth), ``read_timeout`` (seconds one store call may take,
trying every member in turn) and ``secret_file`` (the run secret: records are signed and
checked). The workers' bootstrap store is a TCPStore hosted by the round's rank-0 agent
(:mod:`~tpelastic.adapters.rendezvous.bootstrap`); etcd only carries the rendezvous.
"""

from __future__ import annotations

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.rendezvous.backends import StoreRendezvousBackend
from tpelastic.adapters.rendezvous.bootstrap import bootstrap_host
from tpelastic.adapters.rendezvous.dynamic import DynamicRendezvousHandler
from tpelastic.adapters.rendezvous.errors import RendezvousConnectionError
from tpelastic.adapters.rendezvous.parameters import RendezvousParameters
from tpelastic.adapters.rendezvous.settings import RendezvousSettings
from tpelastic.adapters.stores.signed import sign, signed


class EtcdRendezvousBackend(StoreRendezvousBackend):
    """Rendezvous state in an etcd cluster (through :class:`EtcdStore`).

    It offers the store's leases (:class:`~tpelastic.adapters.rendezvous.backends.LeasedStore`),
    so the handler judges liveness by lease: a node's heartbeat key disappears when the node
    stops renewing its lease (after ``keep_alive_interval * keep_alive_max_attempt``, rounded up
    to whole seconds) or revokes it on a graceful leave.
    """

    name = "etcd"

    def __init__(self, store: KeyValueStore, secret: bytes | None = None) -> None:
        # etcd's own TLS and auth decide who reaches it; the run secret makes every record
        # verifiable on top, as on the other stores (docs/security.md).
        super().__init__(store if secret is None else signed(store, secret))
        self._etcd = store
        self._secret = secret

    def set_leased(self, key: str, value: bytes, ttl: float) -> None:
        if self._secret is not None:
            value = sign(self._secret, key, value)
        self._etcd.set_leased(key, value, ttl)  # type: ignore[attr-defined]

    def revoke_lease(self) -> None:
        self._etcd.revoke_lease()  # type: ignore[attr-defined]


def _text(params: RendezvousParameters, key: str) -> str | None:
    value = params.get(key)
    return None if value is None or str(value) == "" else str(value)


def create_etcd_handler(params: RendezvousParameters) -> DynamicRendezvousHandler:
    """Build the dynamic handler over an :class:`EtcdStore` for ``params``.

    Raises:
        ValueError: a malformed endpoint list or option, in one line.
        EtcdExtraMissing: the ``etcd`` extra is not installed (the message says how to install it).
        RendezvousConnectionError: no member answers within ``read_timeout``.
    """
    from tpelastic.adapters.stores.errors import StoreUnavailable
    from tpelastic.adapters.stores.etcd import EtcdStore, parse_endpoints
    from tpelastic.adapters.stores.signed import load_secret

    RendezvousSettings.from_parameters(params)  # bad config fails before anything connects
    store = EtcdStore(
        parse_endpoints(params.endpoint),
        prefix=_text(params, "etcd_prefix") or "/tpelastic",
        timeout=float(params.get("read_timeout", 60.0)),
        ca_cert=_text(params, "cacert"),
        cert=_text(params, "cert"),
        key=_text(params, "key"),
        user=_text(params, "user"),
        password=_text(params, "password"),
    )
    try:
        secret = load_secret(params.get("secret_file"))
        store.get("probe")  # fail now, in one line, when no member answers
    except StoreUnavailable as error:
        store.close()
        raise RendezvousConnectionError(f"etcd at {params.endpoint}: {error}") from error
    except ValueError:
        store.close()
        raise
    return DynamicRendezvousHandler.from_parameters(
        params, EtcdRendezvousBackend(store, secret), bootstrap_host=bootstrap_host("tcp")
    )


__all__ = ["EtcdRendezvousBackend", "create_etcd_handler"]
