"""RendezvousParameters: one rendezvous request (backend, endpoint, run, bounds, --rdzv-conf).

Config keys read here have torchrun's names, meanings and units (seconds):

==========================  =======  ===========================================================
key                         default  meaning
==========================  =======  ===========================================================
join_timeout                600      how long a node may wait for a round to reach min nodes
last_call_timeout           30       extra wait for more nodes once min nodes have joined
close_timeout               30       how long to wait for the rendezvous to close
keep_alive_interval         5        seconds between a node's heartbeats (alias: heartbeat)
keep_alive_max_attempt      3        missed heartbeats after which a node is considered dead
read_timeout                60       how long one store call may take before it fails
is_host                     (auto)   whether this agent hosts the TCPStore server
store_type                  tcp      ``tcp`` (TCPStore at the endpoint, our client and server),
                                     ``tensorplay`` (the same, with tensorplay's client and
                                     server) or ``file`` (a path)
secret_file                 (none)   a file holding the run secret (else the environment's
                                     ``TPELASTIC_RDZV_SECRET``): records are signed, and our
                                     store server serves only holders (docs/security.md)
==========================  =======  ===========================================================
"""

from __future__ import annotations

import ipaddress
import math
import re
from datetime import timedelta
from typing import Any

DEFAULT_PORT = 29400
# The longest wait any setting may ask for: a week (in milliseconds, still below 2**31, what
# poll and the store protocol take). Beyond it timers and selectors overflow.
MAX_SECONDS = 7 * 24 * 3600.0
STORE_TYPES = ("tcp", "file", "tensorplay")
_TRUE = ("1", "true", "t", "yes", "y")
_FALSE = ("0", "false", "f", "no", "n")


def _duration(name: str, value: timedelta | float | None, default: float) -> timedelta:
    if value is None:
        return timedelta(seconds=default)
    if isinstance(value, bool) or not isinstance(value, (timedelta, int, float)):
        raise TypeError(f"the {name} timeout must be a timedelta, got {value!r}")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"The {name} timeout ({value}) must be positive.")
    return value if isinstance(value, timedelta) else timedelta(seconds=seconds)


class RendezvousTimeout:
    """The rendezvous time budgets, as torch's: ``timedelta`` values, None for the default.

    ``join`` 600 s, ``last_call`` 30 s, ``close`` 30 s, ``heartbeat`` 5 s (the interval between
    keep-alives). A number is taken as seconds. ``keep_alive_max_attempt`` (ours) is how many
    heartbeats a node may miss: it is dead after ``keep_alive_expiry`` = heartbeat * attempts.

    Raises:
        ValueError: a timeout that is not positive, or fewer than 1 attempt.
        TypeError: a timeout that is neither a timedelta nor a number.
    """

    __slots__ = ("_join", "_last_call", "_close", "_heartbeat", "_keep_alive_max_attempt")

    def __init__(
        self,
        join: timedelta | float | None = None,
        last_call: timedelta | float | None = None,
        close: timedelta | float | None = None,
        heartbeat: timedelta | float | None = None,
        *,
        keep_alive_max_attempt: int = 3,
    ) -> None:
        self._join = _duration("join", join, 600.0)
        self._last_call = _duration("last_call", last_call, 30.0)
        self._close = _duration("close", close, 30.0)
        self._heartbeat = _duration("heartbeat", heartbeat, 5.0)
        if isinstance(keep_alive_max_attempt, bool) or keep_alive_max_attempt < 1:
            raise ValueError(f"keep_alive_max_attempt must be >= 1, got {keep_alive_max_attempt!r}")
        self._keep_alive_max_attempt = keep_alive_max_attempt

    @property
    def join(self) -> timedelta:
        """How long a node may wait for a round to complete."""
        return self._join

    @property
    def last_call(self) -> timedelta:
        """Once min nodes have joined, how long the round stays open for more."""
        return self._last_call

    @property
    def close(self) -> timedelta:
        """How long to wait for the rendezvous to close."""
        return self._close

    @property
    def heartbeat(self) -> timedelta:
        """The interval between a node's keep-alives."""
        return self._heartbeat

    @property
    def keep_alive_max_attempt(self) -> int:
        return self._keep_alive_max_attempt

    @property
    def keep_alive_expiry(self) -> timedelta:
        """A node without a keep-alive for this long is dead."""
        return self._heartbeat * self._keep_alive_max_attempt

    def _key(self) -> tuple[timedelta, timedelta, timedelta, timedelta, int]:
        attempts = self._keep_alive_max_attempt
        return (self._join, self._last_call, self._close, self._heartbeat, attempts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RendezvousTimeout):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"RendezvousTimeout(join={self._join!r}, last_call={self._last_call!r}, "
            f"close={self._close!r}, heartbeat={self._heartbeat!r}, "
            f"keep_alive_max_attempt={self._keep_alive_max_attempt})"
        )


_HOST = re.compile(r"^[\w\.:-]+$")


def parse_rendezvous_endpoint(endpoint: str | None, default_port: int) -> tuple[str, int]:
    """Split ``"host[:port]"`` into host and port, as torch's function of the same name.

    An empty endpoint is ``("localhost", default_port)``; ``"[::1]:29400"`` is ``("::1", 29400)``.
    One difference (docs/differences.md): a bare IPv6 address (``"::1"``, more than one ``:`` and
    no brackets) is a host without a port, where torch would take its last group as the port.

    Raises:
        ValueError: a port that is not 1-5 digits below 65536, or a host that is not a
            dot-separated name or an IP address; the message quotes the endpoint.
    """
    text = endpoint.strip() if endpoint is not None else ""
    if not text:
        return "localhost", default_port
    host, port = parse_endpoint(text, default_port)
    if host == text and text.count(":") > 1:
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            raise ValueError(
                f"rendezvous endpoint {endpoint!r} is neither host:port nor an IPv6 address "
                "(write an IPv6 address with a port as [addr]:port)"
            ) from None
    if not _HOST.match(host):
        raise ValueError(
            f"rendezvous endpoint {endpoint!r}: the host must be a dot-separated list of labels, "
            "an IPv4 address or an IPv6 address"
        )
    assert port is not None
    return host, port


def parse_endpoint(
    endpoint: str, default_port: int | None = DEFAULT_PORT
) -> tuple[str, int | None]:
    """Split ``"host[:port]"`` (IPv6 as ``"[::1]:29400"`` or bare ``"::1"``) into host and port.

    Returns ``(host, port)``; ``port`` is ``default_port`` when the endpoint names none, and the
    host is ``""`` for an empty endpoint.

    Raises:
        ValueError: unbalanced brackets, an empty host before a port, or a port that is not a
            number in 0..65535. The message quotes the endpoint.
    """
    text = endpoint.strip()
    if not text:
        return "", default_port
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not host:
            raise ValueError(f"rendezvous endpoint {endpoint!r}: IPv6 host needs '[addr]' brackets")
        if rest and not rest.startswith(":"):
            raise ValueError(f"rendezvous endpoint {endpoint!r}: expected ':port' after ']'")
        return host, _port(endpoint, rest[1:]) if rest else default_port
    if text.count(":") > 1:  # a bare IPv6 address: it cannot carry a port without brackets
        return text, default_port
    host, colon, port_text = text.partition(":")
    if not host:
        raise ValueError(f"rendezvous endpoint {endpoint!r} has no host before the port")
    return host, _port(endpoint, port_text) if colon else default_port


def _port(endpoint: str, text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,5}", text):
        raise ValueError(f"rendezvous endpoint {endpoint!r}: port {text!r} is not a number")
    port = int(text)
    if port > 65535:
        raise ValueError(f"rendezvous endpoint {endpoint!r}: port {port} is not in 0..65535")
    return port


def parse_rdzv_conf(text: str) -> dict[str, str]:
    """Parse ``--rdzv-conf`` text, ``"k=v,k2=v2"``, into a dict of strings.

    Raises:
        ValueError: an item without ``=``, an empty key, or a key given twice.
    """
    config: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or not key:
            raise ValueError(f"--rdzv-conf item {item.strip()!r} is not key=value")
        if key in config:
            raise ValueError(f"--rdzv-conf key {key!r} is given twice")
        config[key] = value.strip()
    return config


class RendezvousParameters:
    """Parameters of one rendezvous request.

    Args:
        backend: the backend name (``static``, ``tcp``/``c10d``/``p10d``, ``file``, ...).
        endpoint: ``host[:port]`` of the rendezvous store (a path for the file backend).
        run_id: the job's id; every agent of a job uses the same one.
        min_nodes: the fewest nodes a round may have (>= 1).
        max_nodes: the most nodes a round may have (>= min_nodes).
        local_addr: this node's address as others should reach it (autodetected when None).
        **config: backend options (``--rdzv-conf``); see the module docstring for known keys.

    Raises:
        ValueError: any bad argument or bad value of a known config key, in one line naming it.
            Everything is checked here, so later property reads do not fail.
    """

    def __init__(
        self,
        backend: str,
        endpoint: str,
        run_id: str,
        min_nodes: int,
        max_nodes: int,
        local_addr: str | None = None,
        **config: Any,
    ) -> None:
        _require_text("rendezvous backend", backend)
        _require_text("run_id", run_id)
        if not isinstance(endpoint, str):
            raise ValueError(f"rendezvous endpoint must be a string, got {endpoint!r}")
        for name, value in (("min_nodes", min_nodes), ("max_nodes", max_nodes)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if min_nodes < 1:
            raise ValueError(f"min_nodes must be >= 1, got {min_nodes}")
        if max_nodes < min_nodes:
            raise ValueError(f"max_nodes ({max_nodes}) must be >= min_nodes ({min_nodes})")
        self.backend = backend
        self.endpoint = endpoint
        self.run_id = run_id
        self.min_nodes = min_nodes
        self.max_nodes = max_nodes
        self.local_addr = local_addr
        self.config: dict[str, Any] = dict(config)
        if self.store_type != "file":  # a file backend's endpoint is a path, not host:port
            parse_endpoint(endpoint)
        # Read every known key once now, so that bad values fail at construction.
        _ = (self.timeout, self.read_timeout, self.is_host)

    def __repr__(self) -> str:
        return (
            f"RendezvousParameters(backend={self.backend!r}, endpoint={self.endpoint!r}, "
            f"run_id={self.run_id!r}, min_nodes={self.min_nodes}, max_nodes={self.max_nodes}, "
            f"local_addr={self.local_addr!r}, config={self.config!r})"
        )

    def get(self, key: str, default: Any = None) -> Any:
        """The config value of ``key``, or ``default`` when it is absent (as torch's)."""
        return self.config.get(key, default)

    def get_as_bool(self, key: str, default: bool | None = None) -> bool | None:
        """``key`` as a bool, read as torch reads it: a bool; the ints 1/0; the strings
        1/true/t/yes/y and 0/false/f/no/n in any case.

        Raises:
            ValueError: any other value; the message names the key.
        """
        value = self.get(key, default)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            if value in (0, 1):
                return value == 1
        elif isinstance(value, str):
            if value.lower() in _TRUE:
                return True
            if value.lower() in _FALSE:
                return False
        raise ValueError(
            f"rendezvous config {key}={value!r} is not a boolean (use 1/0/true/false/yes/no)"
        )

    def get_as_int(self, key: str, default: int | None = None) -> int | None:
        """``key`` as an int, read as torch reads it (``int(value)``).

        Raises:
            ValueError: a value ``int()`` refuses; the message names the key.
        """
        value = self.get(key, default)
        if value is None:
            return value
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ValueError(f"rendezvous config {key}={value!r} is not an integer") from None

    def get_as_float(self, key: str, default: float | None = None) -> float | None:
        """``key`` as a finite float (numbers and numeric strings, e.g. ``"0.5"``).

        Raises:
            ValueError: any other value; the message names the key.
        """
        value = self.get(key)
        if value is None:
            return default
        try:
            number = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            raise ValueError(f"rendezvous config {key}={value!r} is not a number")
        return number

    def host_port(self, default_port: int | None = DEFAULT_PORT) -> tuple[str, int | None]:
        """The endpoint split into ``(host, port)``; see :func:`parse_endpoint`."""
        return parse_endpoint(self.endpoint, default_port)

    @property
    def timeout(self) -> RendezvousTimeout:
        """The time budgets from join/last_call/close_timeout and the keep-alive keys."""
        return RendezvousTimeout(
            join=self._seconds("join_timeout", 600.0),
            last_call=self._seconds("last_call_timeout", 30.0),
            close=self._seconds("close_timeout", 30.0),
            heartbeat=self._heartbeat(),
            keep_alive_max_attempt=self._at_least_one("keep_alive_max_attempt", 3),
        )

    @property
    def read_timeout(self) -> float:
        """Seconds one store call may take (connect retries included) before it fails."""
        return self._seconds("read_timeout", 60.0)

    @property
    def is_host(self) -> bool | None:
        """Config ``is_host``: True/False when given, None to decide from the endpoint."""
        return self.get_as_bool("is_host")

    @property
    def store_type(self) -> str:
        """Config ``store_type``: ``tcp`` (default), ``tensorplay`` or ``file``.

        Raises:
            ValueError: any other value.
        """
        kind = str(self.get("store_type", "tcp")).strip().lower()
        if kind not in STORE_TYPES:
            raise ValueError(
                f"rendezvous config store_type={kind!r} is not one of {', '.join(STORE_TYPES)}"
            )
        return kind

    def _seconds(self, key: str, default: float) -> float:
        value = self.get_as_float(key, default)
        assert value is not None
        if not 0 < value <= MAX_SECONDS:
            raise ValueError(
                f"rendezvous config {key}={self.get(key)!r} must be > 0 and <= {MAX_SECONDS:g} "
                "seconds"
            )
        return value

    def _at_least_one(self, key: str, default: int) -> int:
        value = self.get_as_int(key, default)
        assert value is not None
        if value < 1:
            raise ValueError(f"rendezvous config {key}={value!r} must be >= 1")
        return value

    def _heartbeat(self) -> float:
        given = {k: self.get(k) for k in ("keep_alive_interval", "heartbeat") if k in self.config}
        if len(given) == 2 and self._seconds("heartbeat", 5.0) != self._seconds(
            "keep_alive_interval", 5.0
        ):
            raise ValueError(
                "rendezvous config heartbeat and keep_alive_interval are one setting and differ"
            )
        key = "keep_alive_interval" if "keep_alive_interval" in given else "heartbeat"
        return self._seconds(key, 5.0)


def _require_text(name: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")


__all__ = [
    "DEFAULT_PORT",
    "MAX_SECONDS",
    "RendezvousParameters",
    "RendezvousTimeout",
    "parse_endpoint",
    "parse_rdzv_conf",
    "parse_rendezvous_endpoint",
]
