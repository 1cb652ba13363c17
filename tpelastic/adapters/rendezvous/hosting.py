"""Open the rendezvous store named by RendezvousParameters, hosting it when this agent should.

With the tcp backend the agent whose address matches the endpoint hosts the TCPStore server
(config ``is_host`` overrides). When several agents run on the endpoint's machine, the first to
bind hosts and the others connect as clients. With ``store_type=file`` the endpoint is a path
(:class:`~tpelastic.adapters.stores.file.LogFileStore`: ours, so no tensorplay in the agent).

``store_type=tcp`` (the default) uses our TCPStore server and client
(:mod:`~tpelastic.adapters.stores.tcp_server`, :mod:`~tpelastic.adapters.stores.tcp_client`):
persistent connections and waits held on the server, on tensorplay's wire format, so either
side also works with tensorplay's own client or server. ``store_type=tensorplay`` uses
tensorplay's client and server (a new connection per call; see docs/stores.md).

Our client waits out a lost server as :mod:`tpelastic.core.store_outage` decides: a server that
refuses connections (its process, maybe the hosting agent, died) for the keep-alive expiry, one
that does not answer (paused) for ``read_timeout``; then its calls fail with one line naming
the fix (see specs/store_outage.md).
"""

from __future__ import annotations

import functools
import ipaddress
import socket

from attrs import frozen

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.rendezvous.errors import RendezvousConnectionError
from tpelastic.adapters.rendezvous.parameters import DEFAULT_PORT, RendezvousParameters
from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.adapters.stores.signed import load_secret, signed
from tpelastic.core.store_outage import OutagePolicy
from tpelastic.core.values import value_eq, value_hash, value_repr


@frozen(kw_only=True)
class OpenedStore:
    """The rendezvous store and whether this process hosts its server.

    Attributes:
        store: the KeyValueStore (close it to stop the server when ``is_host``).
        is_host: True when this process runs the TCPStore server.
        endpoint: ``host:port`` of the server, or the file path.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    store: KeyValueStore
    is_host: bool
    endpoint: str


def local_addresses() -> set[str]:
    """This machine's interface addresses (IPv4 and IPv6) and host name. No DNS lookups."""
    import psutil  # ~2.5 MiB: only for an endpoint that is not a loopback literal

    found = {"localhost", socket.gethostname()}
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                found.add(address.address.split("%", 1)[0])
    return found


def endpoint_is_local(host: str) -> bool:
    """Whether ``host`` names this machine (loopback, an interface address, or our name).

    A name that is none of these is resolved (a DNS lookup, bounded by the resolver's timeout);
    a name that does not resolve is not local.
    """
    if not host:
        return False
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        return literal.is_loopback or str(literal) in local_addresses()
    local = local_addresses()
    if host in local:
        return True
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return any(ipaddress.ip_address(a).is_loopback or a in local for a in resolved)


def open_rendezvous_store(params: RendezvousParameters) -> OpenedStore:
    """Open (and maybe host) the store that ``params`` names.

    ``is_host`` in the config decides when given; otherwise this agent hosts when the endpoint
    is one of its addresses, and falls back to being a client if another process on the
    machine already listens there. Client calls retry for ``read_timeout`` seconds.

    Raises:
        RendezvousConnectionError: ``is_host=true`` but the endpoint cannot be bound, or the
            file store cannot be opened.
        ValueError: an endpoint without a host for the tcp store; an unreadable or short
            run secret (``secret_file`` in the config, or ``$TPELASTIC_RDZV_SECRET``).
    """
    return _open(params, load_secret(params.get("secret_file")))


def _open(params: RendezvousParameters, secret: bytes | None) -> OpenedStore:
    if params.store_type == "file":
        from tpelastic.adapters.stores.file import LogFileStore

        try:
            store = _signed(LogFileStore(params.endpoint), secret)
            return OpenedStore(store=store, is_host=False, endpoint=params.endpoint)
        except StoreUnavailable as error:
            raise RendezvousConnectionError(str(error)) from error
    host, port = params.host_port(DEFAULT_PORT)
    if not host:
        raise ValueError(f"rendezvous endpoint {params.endpoint!r} needs a host for a tcp store")
    assert port is not None
    endpoint = f"{host}:{port}"
    wants_host = params.is_host if params.is_host is not None else endpoint_is_local(host)
    if params.store_type == "tensorplay":
        opener = _tensorplay_tcp
    else:
        opener = functools.partial(_our_tcp, outage=outage_policy(params))
    if wants_host:
        try:
            store = opener(host, port, is_server=True, timeout=params.read_timeout, secret=secret)
            return OpenedStore(store=_signed(store, secret), is_host=True, endpoint=endpoint)
        except StoreUnavailable as error:
            if params.is_host:
                raise RendezvousConnectionError(
                    f"is_host=true but this agent cannot host the store: {error}"
                ) from error
            # Another agent on this machine is hosting it already: join as a client.
    store = opener(host, port, is_server=False, timeout=params.read_timeout, secret=secret)
    return OpenedStore(store=_signed(store, secret), is_host=False, endpoint=endpoint)


def outage_policy(params: RendezvousParameters) -> OutagePolicy:
    """How long the run's store client waits out a lost server (see specs/store_outage.md)."""
    return OutagePolicy(
        keep_alive_expiry=params.timeout.keep_alive_expiry.total_seconds(),
        read_timeout=params.read_timeout,
    )


def _signed(store: KeyValueStore, secret: bytes | None) -> KeyValueStore:
    """With a run secret, every record is signed and checked (docs/security.md)."""
    return store if secret is None else signed(store, secret)


def _our_tcp(
    host: str,
    port: int,
    *,
    is_server: bool,
    timeout: float,
    secret: bytes | None,
    outage: OutagePolicy,
) -> KeyValueStore:
    from tpelastic.adapters.stores import tcp_client

    if is_server:
        return tcp_client.host(host, port, timeout=timeout, outage=outage, secret=secret)
    return tcp_client.connect(host, port, timeout=timeout, outage=outage, secret=secret)


def _tensorplay_tcp(
    host: str, port: int, *, is_server: bool, timeout: float, secret: bytes | None
) -> KeyValueStore:
    """tensorplay's server has no handshake: with a secret, records are signed all the same."""
    from tpelastic.adapters.stores.tensorplay_store import tcp_store

    return tcp_store(host, port, is_server=is_server, timeout=timeout)


__all__ = [
    "OpenedStore",
    "endpoint_is_local",
    "local_addresses",
    "open_rendezvous_store",
    "outage_policy",
]
