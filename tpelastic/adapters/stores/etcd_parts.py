"""Small parts of the etcd store that need no connection: parsing endpoints and checking
arguments, the gateway's base64 values, its error messages, and interrupting a blocked read
(split from :mod:`etcd`, which holds the store's requests and their retries)."""

from __future__ import annotations

import socket
from base64 import b64decode, b64encode
from collections.abc import Sequence
from typing import Any


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """Parse ``"host1:port,host2:port"`` (an ``http(s)://`` prefix is allowed) into pairs.

    Raises:
        ValueError: an item has no host or no valid port; the message names the item.
    """
    endpoints = []
    for item in (part.strip() for part in text.split(",")):
        bare = item.split("://", 1)[-1].rstrip("/")
        host, _, port = bare.rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"etcd endpoint {item!r} is not host:port")
        endpoints.append((host, int(port)))
    return endpoints


def b64(raw: bytes) -> str:
    return b64encode(raw).decode("ascii")


def value_of(kv: dict[str, Any] | None) -> bytes | None:
    # The gateway leaves out empty fields: a present key with b"" has no "value".
    return None if kv is None else b64decode(kv.get("value", ""))


def interrupt(response: Any) -> None:
    # Closing a response does not wake a thread blocked reading it; shutting its socket down
    # does (the read sees end of stream at once).
    try:
        sock = socket.fromfd(response.raw.fileno(), socket.AF_INET, socket.SOCK_STREAM)
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
    except (OSError, ValueError, AttributeError):
        pass  # already closed
    response.close()


def short_reason(error: Exception) -> str:
    """The innermost reason of a requests error, e.g. "Connection refused", on one line."""
    text = " ".join(str(error).split())
    if "(Caused by " in text:  # urllib3 wraps the socket's reason in two layers of repr
        text = text.rsplit("(Caused by ", 1)[1].rsplit(": ", 1)[-1].strip("')\" ")
    return f"{type(error).__name__}: {text[-160:]}"


def gateway_message(response: Any) -> str:
    try:
        return str(response.json().get("message") or response.status_code)
    except ValueError:
        return f"HTTP {response.status_code}"


def check_arguments(
    endpoints: Sequence[tuple[str, int]], timeout: float, *pairs: tuple[str | None, str | None]
) -> None:
    if not endpoints:
        raise ValueError("an etcd store needs at least one endpoint")
    for host, port in endpoints:
        if not host or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"etcd endpoint {host!r}:{port!r} is not a host and a port")
    if not timeout > 0:
        raise ValueError(f"etcd store timeouts must be > 0, got {timeout!r}")
    for name, pair in zip(("cert and key", "user and password"), pairs, strict=True):
        if (pair[0] is None) != (pair[1] is None):
            raise ValueError(f"etcd store: give both {name}, or neither")


__all__ = [
    "b64",
    "check_arguments",
    "gateway_message",
    "interrupt",
    "parse_endpoints",
    "short_reason",
    "value_of",
]
