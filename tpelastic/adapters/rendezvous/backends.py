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

from collections.abc import Sequence

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.stores.prefixed import PrefixedStore


class StoreRendezvousBackend:
    """Rendezvous state behind a key/value store's atomic operations.

    Args:
        store: the store; closing the backend closes it (and stops its server if it owns one).
    """

    name = "store"

    def __init__(self, store: KeyValueStore) -> None:
        self._store = store

    @property
    def store(self) -> KeyValueStore:
        """The wrapped store."""
        return self._store

    def scoped(self, prefix: str) -> KeyValueStore:
        """A view of the store where key ``k`` lives at ``prefix/k``; closing it leaves the
        backend open. For tensorplay stores the view is a tensorplay ``PrefixStore`` too, so its
        ``raw`` can be handed to tensorplay APIs."""
        return PrefixedStore(self._store, prefix)

    def get(self, key: str) -> bytes | None:
        return self._store.get(key)

    def set(self, key: str, value: bytes) -> None:
        self._store.set(key, value)

    def add(self, key: str, amount: int) -> int:
        return self._store.add(key, amount)

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        return self._store.set_if_absent(key, value)

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        return self._store.compare_and_set(key, expected, value)

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        return self._store.wait_for(keys, timeout)

    def delete(self, key: str) -> None:
        self._store.delete(key)

    def close(self) -> None:
        self._store.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._store!r})"


class TpRendezvousBackend(StoreRendezvousBackend):
    """Rendezvous state in any tensorplay ``Store`` (wrapped as a ``TensorplayStore``)."""

    name = "tp-store"

    def scoped(self, prefix: str) -> KeyValueStore:
        from tpelastic.adapters.stores.tensorplay_store import TensorplayStore, prefix_store

        if not isinstance(self._store, TensorplayStore):
            return super().scoped(prefix)
        return prefix_store(prefix.rstrip("/"), self._store)


class P10dRendezvousBackend(TpRendezvousBackend):
    """Rendezvous state in a tensorplay ``TCPStore``."""

    name = "p10d"


__all__ = ["P10dRendezvousBackend", "StoreRendezvousBackend", "TpRendezvousBackend"]
