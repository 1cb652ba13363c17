"""A listening TCP socket on a free port chosen by the kernel, for IPv4 or IPv6."""

from __future__ import annotations

import socket


def get_socket_with_port(host: str = "localhost", backlog: int = 16) -> socket.socket:
    """A TCP socket bound to an ephemeral port of ``host`` and listening.

    Every address ``host`` resolves to (IPv4 and IPv6) is tried in resolver order; the first that
    binds wins. Keep the socket open until the port is handed over, then close it, so no other
    process can take the port in between.

    Args:
        host: a name or literal address, e.g. ``"localhost"``, ``"127.0.0.1"`` or ``"::1"``.
        backlog: listen queue length.

    Returns:
        The bound, listening socket; ``sock.getsockname()[1]`` is the port.

    Raises:
        OSError: naming ``host`` and every address tried when none could be bound.
    """
    try:
        infos = socket.getaddrinfo(
            host, 0, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host!r} to bind a socket: {exc}") from None
    failures: list[str] = []
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.bind(address)
            sock.listen(backlog)
        except OSError as exc:
            sock.close()
            failures.append(f"{address[0]}: {exc.strerror or exc}")
            continue
        return sock
    raise OSError(
        f"no free port could be bound on {host!r} ({'; '.join(failures) or 'no address'})"
    )
