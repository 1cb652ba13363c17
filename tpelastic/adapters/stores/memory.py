"""MemoryStore: a thread-safe in-process KeyValueStore.

It is the oracle of the conformance suite (``tpelastic.testing.store_contract``) and the store of
fast tests and the simulator, so it follows the port's contract literally and does nothing else.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.stores.errors import StoreCorrupt, StoreUnavailable


class MemoryStore:
    """A dict guarded by one Condition; waiters wake on every write.

    Share one instance between threads to model several clients of one server. Unlike a real
    server it never loses connections; ``close`` makes later calls raise ``StoreUnavailable`` as
    the contract asks.
    """

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._data: dict[str, bytes] = {}
        self._changed = threading.Condition()
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable("memory store is closed")

    def _write(self, key: str, value: bytes) -> None:
        # Caller holds the condition. Waiters re-check their keys on every write.
        self._data[key] = bytes(value)
        self._changed.notify_all()

    def get(self, key: str) -> bytes | None:
        with self._changed:
            self._check_open()
            return self._data.get(key)

    def set(self, key: str, value: bytes) -> None:
        with self._changed:
            self._check_open()
            self._write(key, value)

    def add(self, key: str, amount: int) -> int:
        with self._changed:
            self._check_open()
            current = self._data.get(key, b"0")
            try:
                number = int(current.decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                raise StoreCorrupt(key, "add on a key that is not a counter") from None
            number += int(amount)
            self._write(key, str(number).encode("ascii"))
            return number

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        with self._changed:
            self._check_open()
            if key in self._data:
                return False, self._data[key]
            self._write(key, value)
            return True, bytes(value)

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        with self._changed:
            self._check_open()
            current = self._data.get(key)
            if current != expected:
                return False, current
            self._write(key, value)
            return True, bytes(value)

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        wanted = list(keys)
        deadline = self._clock.now() + max(0.0, timeout)
        with self._changed:
            while True:
                self._check_open()
                if all(key in self._data for key in wanted):
                    return True
                left = deadline - self._clock.now()
                if left <= 0:
                    return False
                # Woken by any write (or close); loop re-checks keys and the deadline.
                self._changed.wait(left)

    def delete(self, key: str) -> None:
        with self._changed:
            self._check_open()
            self._data.pop(key, None)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def __repr__(self) -> str:
        return f"MemoryStore(keys={len(self._data)}, closed={self._closed})"


__all__ = ["MemoryStore"]
