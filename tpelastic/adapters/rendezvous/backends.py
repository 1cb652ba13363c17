"""The rendezvous state backends: the reference's names for "the store a run keeps its state in".

A backend is a thin, named wrapper around a :class:`~tpelastic.adapters.ports.KeyValueStore`; it
satisfies the same port, so the dynamic handler cannot tell it from a bare store (tests and
third-party stores, etcd included, plug in the same way). The shared state is many small keys
written with atomic operations (``add``, set-if-absent, compare-and-set underneath), never one
pickled blob: see ``specs/rendezvous_join.md``.

* :class:`P10dRendezvousBackend` — a tensorplay ``TCPStore`` (backend names ``tcp``, ``c10d``,
  ``p10d``).
* :class:`TpRendezvousBackend` — any tensorplay ``Store`` (``FileStore``, ``HashStore``,
  ``PrefixStore``; backend name ``file``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock, KeyValueStore, WaitAnyStore
from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.adapters.stores.prefixed import PrefixedStore

T = TypeVar("T")


@runtime_checkable
class LeasedStore(Protocol):
    """An optional capability of a KeyValueStore: keys that live only while a lease is renewed.

    A store that has it gets per-node liveness by lease (``RendezvousConfig.leased_liveness``):
    each node's heartbeat key is written under the node's own lease, and disappears when the
    node stops renewing it (dies) or revokes it (leaves).
    """

    def set_leased(self, key: str, value: bytes, ttl: float) -> None:
        """Write ``key`` under this client's lease of ``ttl`` seconds (granted on first use, and
        again if it expired), renewing the lease. Raises ``StoreUnavailable`` like ``set``."""
        ...

    def revoke_lease(self) -> None:
        """Revoke this client's lease now: its keys disappear at once. Never raises."""
        ...


def supports_leases(store: object) -> bool:
    """Whether ``store`` offers :class:`LeasedStore` (a backend answers for the store it wraps)."""
    return isinstance(store, LeasedStore)


def supports_wait_any(store: object) -> bool:
    """Whether ``store`` really offers :class:`~tpelastic.adapters.ports.WaitAnyStore`: wrappers
    (backends, prefixed views) answer for the store they wrap."""
    while isinstance(store, (StoreRendezvousBackend, PrefixedStore)):
        store = store.store if isinstance(store, StoreRendezvousBackend) else store.inner
    return isinstance(store, WaitAnyStore)


class StoreRendezvousBackend:
    """Rendezvous state behind a key/value store's atomic operations.

    Args:
        store: the store; closing the backend closes it (and stops its server if it owns one).
    """

    name = "store"

    def __init__(self, store: KeyValueStore) -> None:
        self._store = store
        self._closed = False

    @property
    def store(self) -> KeyValueStore:
        """The wrapped store."""
        return self._store

    def scoped(self, prefix: str) -> KeyValueStore:
        """A view of the store where key ``k`` lives at ``prefix/k``; closing it leaves the
        backend open. For tensorplay stores the view is a tensorplay ``PrefixStore`` too, so its
        ``raw`` can be handed to tensorplay APIs."""
        return PrefixedStore(self._store, prefix)

    def _again(self, call: Callable[[], T]) -> T:
        """Run an idempotent call; subclasses may retry it on transient failures."""
        return call()

    def get(self, key: str) -> bytes | None:
        return self._again(lambda: self._store.get(key))

    def set(self, key: str, value: bytes) -> None:
        self._again(lambda: self._store.set(key, value))

    def add(self, key: str, amount: int) -> int:
        # Never retried: a request that landed but whose reply was lost would count twice.
        return self._store.add(key, amount)

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        # Retrying is safe: the reply the rendezvous reads is the value stored afterwards.
        return self._again(lambda: self._store.set_if_absent(key, value))

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        return self._store.compare_and_set(key, expected, value)

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        return self._again(lambda: self._store.wait_for(keys, timeout))

    def multi_get(self, keys: Sequence[str]) -> list[bytes | None]:
        """Many reads in one round trip when the store offers it (``MultiGetStore``), else one
        by one."""
        inner = getattr(self._store, "multi_get", None)
        if inner is None:
            return [self.get(key) for key in keys]
        return self._again(lambda: list(inner(keys)))

    def wait_any(self, keys: Sequence[str], timeout: float) -> bool:
        """The wrapped store's ``wait_any`` (see :func:`supports_wait_any`).

        Raises:
            TypeError: the wrapped store does not offer it.
            StoreUnavailable: as the store's call.
        """
        inner = getattr(self._store, "wait_any", None)
        if inner is None:
            raise TypeError(f"{self._store!r} cannot wait for any of several keys")
        return bool(self._again(lambda: inner(keys, timeout)))

    def delete(self, key: str) -> None:
        self._again(lambda: self._store.delete(key))

    def close(self) -> None:
        self._closed = True
        self._store.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._store!r})"


class TpRendezvousBackend(StoreRendezvousBackend):
    """Rendezvous state in any tensorplay ``Store`` (wrapped as a ``TensorplayStore``)."""

    name = "tp-store"

    def scoped(self, prefix: str) -> KeyValueStore:
        # A TensorplayStore exists only once its module is loaded: asking that much leaves
        # tensorplay unimported (~0.2 s, ~80 MiB) in agents on our own stores.
        module = sys.modules.get("tpelastic.adapters.stores.tensorplay_store")
        if module is None or not isinstance(self._store, module.TensorplayStore):
            return super().scoped(prefix)
        return module.prefix_store(prefix.rstrip("/"), self._store)  # type: ignore[no-any-return]


class P10dRendezvousBackend(TpRendezvousBackend):
    """Rendezvous state in a tensorplay ``TCPStore``.

    Every TCPStore call opens a new connection, and under ephemeral-port or accept-backlog
    pressure a call can fail at once ("request failed") although the server is fine. Such a
    *fast* failure of an idempotent call is retried a few times with a short backoff; a slow
    failure (the client already retried the connection for its whole read timeout) is not, so
    an unreachable server still fails after one read timeout. ``add`` is never retried.

    Args:
        store: the TCPStore (wrapped as a ``TensorplayStore``).
        retries: extra attempts after a fast failure.
        fast: a failure that took less than this many seconds counts as transient.
        clock: times the failure and the backoff.
    """

    name = "p10d"

    def __init__(
        self,
        store: KeyValueStore,
        *,
        retries: int = 3,
        fast: float = 0.5,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(store)
        self._retries = retries
        self._fast = fast
        self._clock = clock

    def _again(self, call: Callable[[], T]) -> T:
        for attempt in range(self._retries + 1):
            started = self._clock.now()
            try:
                return call()
            except StoreUnavailable:
                transient = self._clock.now() - started < self._fast and not self._closed
                if not transient or attempt == self._retries:
                    raise
            self._clock.sleep(0.05 * 2**attempt)  # 50, 100, 200 ms: the backlog or ports drain
        raise AssertionError("unreachable")  # pragma: no cover


class C10dRendezvousBackend(P10dRendezvousBackend):
    """torch's ``C10dRendezvousBackend(store, run_id)``: rendezvous state in a tensorplay store
    (``TCPStore``, ``FileStore``; wrapped here) or any of our stores.

    The state is per-key records under the run's own keys, never one pickled blob, so there is
    no ``get_state``/``set_state``; ``run_id`` names the run the handler must be for.
    """

    name = "c10d"

    def __init__(self, store: Any, run_id: str) -> None:
        if not isinstance(store, StoreRendezvousBackend) and not hasattr(store, "compare_and_set"):
            from tpelastic.adapters.stores.tensorplay_store import TensorplayStore

            store = TensorplayStore(store)
        super().__init__(store)
        self.run_id = run_id


__all__ = [
    "C10dRendezvousBackend",
    "LeasedStore",
    "P10dRendezvousBackend",
    "StoreRendezvousBackend",
    "TpRendezvousBackend",
    "supports_leases",
    "supports_wait_any",
]
