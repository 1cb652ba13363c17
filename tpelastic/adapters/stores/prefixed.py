"""PrefixedStore: a key namespace over any KeyValueStore.

Each rendezvous round (and anything its workers write) gets its own namespace, so a later
attempt can never read an earlier attempt's keys. This works over every adapter, MemoryStore
included; for tensorplay stores it matches the layout of tensorplay's PrefixStore
(``prefix + "/" + key``), so either side can read the other's keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.stores.errors import StoreUnavailable


class PrefixedStore:
    """Every key ``k`` is stored as ``f"{prefix}/{k}"`` in ``inner``.

    ``close`` only marks this view closed; the inner store stays open because other views and
    the agent still use it.

    Raises:
        ValueError: ``prefix`` is empty.
    """

    def __init__(self, inner: KeyValueStore, prefix: str) -> None:
        if not prefix:
            raise ValueError("a store prefix must not be empty")
        self._inner = inner
        self._prefix = prefix.rstrip("/") + "/"
        self._closed = False

    @property
    def inner(self) -> KeyValueStore:
        return self._inner

    @property
    def prefix(self) -> str:
        return self._prefix

    def _key(self, key: str) -> str:
        self._check_open()
        return self._prefix + key

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable(f"store view {self._prefix!r} is closed")

    def get(self, key: str) -> bytes | None:
        return self._inner.get(self._key(key))

    def set(self, key: str, value: bytes) -> None:
        self._inner.set(self._key(key), value)

    def add(self, key: str, amount: int) -> int:
        return self._inner.add(self._key(key), amount)

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        return self._inner.set_if_absent(self._key(key), value)

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        return self._inner.compare_and_set(self._key(key), expected, value)

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        self._check_open()  # also when ``keys`` is empty
        return self._inner.wait_for([self._key(k) for k in keys], timeout)

    def wait_any(self, keys: Sequence[str], timeout: float) -> bool:
        """``wait_any`` of the inner store (the ``WaitAnyStore`` capability) on prefixed keys.

        Raises:
            TypeError: the inner store does not offer ``wait_any``.
            StoreUnavailable: as the inner store's call, or this view is closed.
        """
        self._check_open()
        inner = getattr(self._inner, "wait_any", None)
        if inner is None:
            raise TypeError(f"{self._inner!r} cannot wait for any of several keys")
        return bool(inner([self._key(k) for k in keys], timeout))

    def delete(self, key: str) -> None:
        self._inner.delete(self._key(key))

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"PrefixedStore({self._inner!r}, {self._prefix!r})"


__all__ = ["PrefixedStore"]
