"""The ports: small Protocols through which the rest of tpelastic reaches the world.

This module holds Protocols only. An adapter (``tpelastic.adapters.stores.*``, or a third party's
etcd or test store) satisfies a port structurally; ``tpelastic.testing.store_contract`` checks
that it also keeps the contract written here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class KeyValueStore(Protocol):
    """A shared key/value store: the only way agents on different nodes talk to each other.

    Contract, for every implementation:

    * Keys are ``str`` (any Unicode, including ``/``; ``"a"`` and ``"a/b"`` are unrelated keys),
      values are ``bytes`` (any bytes, including ``b""``). An empty value is a present key:
      only ``delete`` makes a key absent.
    * Every call is bounded in time: by the store's read timeout, or by the ``timeout`` argument
      of ``wait_for``. When the server cannot be reached (refused, lost, or silent past the read
      timeout) the call raises :class:`~tpelastic.adapters.stores.errors.StoreUnavailable`; it
      never hangs and never leaks a library-specific exception.
    * Calls are safe from several threads at once on one instance (a heartbeat thread and a
      waiting thread may share a store).
    * After ``close`` every call except ``close`` raises ``StoreUnavailable``.
    * ``add`` is for counter keys: a key written by ``add`` holds its value as ASCII decimal
      (``b"3"``). Calling ``add`` on a key that holds something else is unspecified.
    """

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None when it is absent. Never waits for the key to appear."""
        ...

    def set(self, key: str, value: bytes) -> None:
        """Write ``value`` under ``key``, replacing any value there."""
        ...

    def add(self, key: str, amount: int) -> int:
        """Atomically add ``amount`` (may be negative) to a counter and return the new value.

        An absent key counts from 0.
        """
        ...

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        """Atomically create ``key`` with ``value`` unless it exists.

        Returns ``(True, value)`` when this call created it, else ``(False, value already there)``.
        """
        ...

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        """Atomically replace the value of ``key`` with ``value`` if it currently is ``expected``.

        ``expected=None`` means "the key is absent" (an empty value is not absent). Returns
        ``(swapped, current)`` where ``current`` is the value after the call (``value`` when
        swapped, else what is there now, None when absent).
        """
        ...

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        """Block until every key in ``keys`` exists (True) or ``timeout`` seconds pass (False).

        ``timeout <= 0`` only checks. Implementations block natively where the store can (no
        polling sleeps); a key set by another client wakes the waiter promptly. Raises
        ``StoreUnavailable`` if the server goes away while waiting.
        """
        ...

    def delete(self, key: str) -> None:
        """Make ``key`` absent. Deleting an absent key is not an error."""
        ...

    def close(self) -> None:
        """Release the store's resources. Idempotent; never raises, even on a dead peer."""
        ...


@runtime_checkable
class MultiGetStore(Protocol):
    """An optional capability of a KeyValueStore: read many keys in one round trip.

    The rendezvous driver uses it for runs of reads in one batch (a closer reading every
    arrival slot) when the store offers it, and reads key by key otherwise.
    """

    def multi_get(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` in order, None where absent; bounded like ``get``.

        Raises ``StoreUnavailable`` as the port's calls do. Not atomic across keys.
        """
        ...


@runtime_checkable
class WaitAnyStore(Protocol):
    """An optional capability of a KeyValueStore: a held wait for *any* of several keys.

    A running agent blocks on it for the keys that announce a change to its round (closed,
    next round opened, a node arrived) instead of looking every fraction of a second. Wrappers
    (a rendezvous backend, a prefixed view) always have the method; ask
    ``tpelastic.adapters.rendezvous.backends.supports_wait_any`` whether the store under them
    really offers it.
    """

    def wait_any(self, keys: Sequence[str], timeout: float) -> bool:
        """Block until at least one of ``keys`` exists (True) or ``timeout`` seconds pass (False).

        ``timeout <= 0`` only checks; an empty ``keys`` is False at once. Blocks natively (no
        polling sleeps) where the store can. Raises ``StoreUnavailable`` as the port's calls do,
        also when the store is closed while waiting.
        """
        ...


@runtime_checkable
class Clock(Protocol):
    """Monotonic time for the adapters: the only place they learn what time it is.

    Instants are seconds on this process's own monotonic clock, comparable only with each
    other. Tests pass a clock with a random offset, so that a stray direct read shows.
    """

    def now(self) -> float:
        """Seconds on the monotonic clock."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds`` (returns at once for ``seconds <= 0``)."""
        ...

    def deadline(self, seconds: float) -> float:
        """The instant ``seconds`` from now."""
        ...

    def remaining(self, deadline: float) -> float:
        """Seconds left until ``deadline`` (0 once it has passed)."""
        ...

    def wall(self) -> float:
        """Wall-clock seconds since the epoch, for people only (log lines, error files, event
        timestamps): never compared with a monotonic instant or another host's clock."""
        ...


__all__ = ["Clock", "KeyValueStore", "MultiGetStore", "WaitAnyStore"]
