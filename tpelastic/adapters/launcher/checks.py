"""Up-front checks of the world a launch needs, so bad input fails in one line before any work."""

from __future__ import annotations

import errno
import ipaddress
import logging
import re
import socket

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.launcher.config import ConfigError
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.rendezvous.parameters import parse_endpoint

_log = logging.getLogger("tpelastic")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def require_free_port(what: str, host: str, port: int) -> None:
    """Fail when another program already listens on ``host:port`` (this machine only).

    Raises:
        ConfigError: the port is taken, naming ``what`` (e.g. ``--master-port``) and the port.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except socket.gaierror as error:
            raise ConfigError(
                f"{what}: host {host!r} is not a valid address ({error.strerror})"
            ) from None
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"{what} {port} is already in use on {host} by another program"
                ) from None
            if error.errno == errno.EADDRNOTAVAIL:
                return  # not an address of this machine: some other node binds it
            raise ConfigError(f"{what} {host}:{port} cannot be bound: {error.strerror}") from None


_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")


def check_endpoint(what: str, endpoint: str) -> tuple[str, int | None]:
    """``endpoint``'s host and port, when both are well formed (no lookup, no traffic).

    The host is an IPv4 address, an IPv6 address (``[addr]:port``, or bare without a port) or
    a host name of letters, digits, ``-`` and ``_`` in dot-separated labels.

    Raises:
        ConfigError: one line naming ``what`` and what is wrong with the endpoint.
    """
    if "://" in endpoint:
        raise ConfigError(f"{what} {endpoint!r} looks like a URL: give host:port")
    try:
        host, port = parse_endpoint(endpoint)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if not host:
        return host, port
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(
                f"{what} {endpoint!r}: {host!r} is not an IPv6 address (write [addr]:port)"
            ) from None
    elif host.replace(".", "").isdigit():
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ConfigError(f"{what} {endpoint!r}: {host!r} is not an IPv4 address") from None
    elif len(host) > 253 or not all(_LABEL.match(label) for label in host.split(".")):
        raise ConfigError(f"{what} {endpoint!r}: {host!r} is not a host name or address")
    return host, port


_HOST_PORT = re.compile(r"^[^/\\]*:[0-9]+$")
_HOST_PORT_BACKENDS = ("static", "tcp", "c10d", "p10d", "etcd", "etcd-v2")


def check_store_endpoint(
    backend: str, endpoint: str, store_type: str = "tcp"
) -> tuple[str, int | None]:
    """The rendezvous endpoint's host and port for ``backend`` (("", None) where the endpoint
    is a path, several etcd members, or a plugin's own form), when well formed.

    Raises:
        ConfigError: a malformed endpoint, or a ``host:port`` given for a file store.
    """
    if backend == "file" or store_type == "file":
        if _HOST_PORT.match(endpoint.strip()):
            raise ConfigError(
                f"store_type=file takes a file path as --rdzv-endpoint, got {endpoint!r} "
                "(host:port is for the tcp store)"
            )
        return "", None
    if backend not in _HOST_PORT_BACKENDS:
        return "", None  # a plugin reads its endpoint its own way
    if backend.startswith("etcd") and "," in endpoint:
        return "", None  # several etcd members: the etcd client tries each
    if "," in endpoint:
        candidates = check_store_candidates(endpoint)
        listed = ", ".join(_host_port(h, p) for h, p in candidates)
        raise ConfigError(
            f"rendezvous endpoint lists {len(candidates)} store hosts ({listed}): the {backend} "
            "backend takes one host:port; for a store that outlives any one host use "
            "--rdzv-backend etcd (docs/backends.md)"
        )
    return check_endpoint("rendezvous endpoint", endpoint)


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_store_candidates(endpoint: str) -> list[tuple[str, int]]:
    """The ``host:port`` candidates of a comma-separated endpoint, each well formed, with a
    port, and listed once.

    Raises:
        ConfigError: one line naming the candidate and what is wrong with it.
    """
    found: list[tuple[str, int]] = []
    for n, part in enumerate(endpoint.split(","), start=1):
        text = part.strip()
        if not text:
            raise ConfigError(f"rendezvous endpoint {endpoint!r}: store host {n} is empty")
        host, port = check_endpoint(f"rendezvous endpoint store host {n}", text)
        if not host or port is None or not text.rsplit(":", 1)[-1].isdigit():
            raise ConfigError(
                f"rendezvous endpoint {endpoint!r}: store host {n} ({text!r}) needs host:port"
            )
        if (host, port) in found:
            raise ConfigError(
                f"rendezvous endpoint {endpoint!r}: store host {host}:{port} is listed twice"
            )
        found.append((host, port))
    return found


def require_reachable(
    what: str, host: str, port: int, timeout: float, clock: Clock = SYSTEM_CLOCK
) -> None:
    """Wait until a TCP connection to ``host:port`` opens, for up to ``timeout`` seconds.

    A store that is not up yet (its node starts later) is normal: the first refusal prints
    one line saying what is tried and for how long, then it is tried again every 0.2 s.

    Raises:
        ConfigError: the host does not resolve, or no connection opened within ``timeout``.
    """
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ConfigError(f"{what} {host}:{port}: the host does not resolve ({reason})") from None
    deadline = clock.deadline(timeout)
    said = False
    while True:
        last = ""
        for family, kind, proto, _name, address in addresses:
            left = deadline - clock.now()
            try:
                with socket.socket(family, kind, proto) as probe:
                    probe.settimeout(max(0.05, min(left, 5.0)))
                    probe.connect(address)
                    return
            except OSError as error:
                last = error.strerror or type(error).__name__
        if clock.now() >= deadline:
            raise ConfigError(
                f"{what} {host}:{port} could not be reached within {timeout:g} s ({last}); "
                "is the node that hosts it running?"
            )
        if not said:
            # Through the launcher's logger: stamped like every other console line.
            _log.warning("%s %s:%s: %s; trying for up to %g s", what, host, port, last, timeout)
            said = True
        clock.sleep(min(0.2, clock.remaining(deadline)))


def require_store_answers(
    what: str,
    host: str,
    port: int,
    timeout: float,
    secret: bytes | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """Wait until ``host:port`` answers one TCPStore request (ours or tensorplay's server), for
    up to ``timeout`` seconds: a port that accepts connections but is no store (closes them,
    answers something else, or never answers) is refused now, not after the keep-alive expiry
    or the read timeout (15 s and 60 s by default) of the first join.

    Raises:
        ConfigError: no connection opened, or what answered is no TCPStore.
    """
    deadline = clock.deadline(timeout)
    require_reachable(what, host, port, timeout, clock)
    from tpelastic.adapters.stores.errors import StoreError
    from tpelastic.adapters.stores.tcp_client import TcpStoreClient

    left = max(0.1, clock.remaining(deadline))
    client = TcpStoreClient(host, port, timeout=left, secret=secret, clock=clock)
    try:
        client.get("tpelastic/v1/probe")
    except StoreError as error:
        raise ConfigError(
            f"{what} {_host_port(host, port)} accepts connections but did not answer as a "
            f"TCPStore within {timeout:g} s ({error}); is that the store's port?"
        ) from None
    finally:
        client.close()


__all__ = [
    "check_endpoint",
    "check_store_candidates",
    "check_store_endpoint",
    "free_port",
    "require_free_port",
    "require_reachable",
    "require_store_answers",
]
