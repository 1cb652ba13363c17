"""Up-front checks of the world a launch needs, so bad input fails in one line before any work."""

from __future__ import annotations

import errno
import socket

from tpelastic.adapters.launcher.config import ConfigError


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


__all__ = ["free_port", "require_free_port"]
