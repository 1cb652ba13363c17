"""TensorplayStore: any tensorplay ``Store`` (TCPStore, FileStore, HashStore, PrefixStore)
behind the :class:`~tpelastic.adapters.ports.KeyValueStore` port.

What tensorplay does and how we bridge it (measured; see docs/stores.md):

* ``compare_and_swap`` cannot tell an absent key from one holding ``b""``: it swaps an absent
  key when ``expected == b""`` and reports an absent key's value as ``b""``. We therefore never
  store ``b""`` raw: values that are empty or start with the escape are stored with the escape
  in front (:mod:`escaping`, shared with our own TCPStore client). Everything else (JSON,
  decimal counters, addresses) is stored as is, so other tensorplay clients read our ordinary
  values unchanged.
* Over TCP every operation opens its own connection, and ``get`` of a present key costs two
  (a wait, then the read). A ``compare_and_swap`` with a value we never store reads any key in
  one round trip, so ``get`` uses that.
* Errors come as ``RuntimeError`` (after the client has retried the connection for the store's
  timeout); we turn them into ``StoreUnavailable`` with a one-line message.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

# tensorplay re-exports these without listing them in __all__, hence the ignore.
from tensorplay.distributed import (  # type: ignore[attr-defined]
    FileStore,
    HashStore,
    PrefixStore,
    TCPStore,
)

from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.adapters.stores.escaping import PROBE, decode_current, encode

# tensorplay takes whole milliseconds as a C integer; infinity would not convert. ~115 days.
_LONGEST_WAIT = 1e7
_NATIVE_NOISE = re.compile(r"^Expected .*? but got \w+\.\s*")

T = TypeVar("T")


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return _NATIVE_NOISE.sub("", text) or type(error).__name__


class TensorplayStore:
    """Adapt one tensorplay ``Store`` to the KeyValueStore port.

    Args:
        store: the tensorplay store (any kind; its own timeout bounds every call).
        where: a short description for error messages, e.g. ``"tcp store 10.0.0.1:29400"``.
        owns_server: when True, ``close`` also stops the TCPStore server this object hosts.
    """

    def __init__(self, store: Any, *, where: str = "tensorplay store", owns_server: bool = False):
        self._store = store
        self._where = where
        self._owns_server = owns_server
        self._closed = False
        self._close_lock = threading.Lock()

    @property
    def raw(self) -> Any:
        """The wrapped tensorplay ``Store`` (for handing to tensorplay APIs and workers)."""
        return self._store

    @property
    def where(self) -> str:
        return self._where

    def _call(self, op: str, key: object, fn: Callable[[], T]) -> T:
        if self._closed:
            raise StoreUnavailable(f"{self._where}: {op} {key!r} after close")
        try:
            return fn()
        except RuntimeError as error:  # tensorplay's only failure type (StoreTimeoutError too)
            raise StoreUnavailable(
                f"{self._where}: {op} {key!r} failed: {_one_line(error)}"
            ) from error

    def get(self, key: str) -> bytes | None:
        swapped, stored = self._call(
            "get", key, lambda: self._store.compare_and_swap(key, PROBE, PROBE)
        )
        return decode_current(PROBE if swapped else stored)

    def set(self, key: str, value: bytes) -> None:
        encoded = encode(value)
        self._call("set", key, lambda: self._store.set(key, encoded))

    def add(self, key: str, amount: int) -> int:
        return int(self._call("add", key, lambda: self._store.add(key, int(amount))))

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        swapped, current = self.compare_and_set(key, None, value)
        assert current is not None  # swapped: our value; not swapped: the key exists
        return swapped, current

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        want = b"" if expected is None else encode(expected)
        new = encode(value)
        swapped, before = self._call(
            "compare_and_set", key, lambda: self._store.compare_and_swap(key, want, new)
        )
        if swapped:
            return True, bytes(value)
        return False, decode_current(before)

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        wanted = list(keys)
        seconds = min(max(0.0, float(timeout)), _LONGEST_WAIT)  # NaN -> 0.0 (only checks)
        return bool(self._call("wait_for", wanted, lambda: self._store.wait(wanted, seconds)))

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self._store.delete_key(key))

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._owns_server:
            try:
                self._store.stop()
            except Exception:  # close never raises (port contract)
                pass

    def __repr__(self) -> str:
        return f"TensorplayStore({self._where}, closed={self._closed})"


def tcp_store(host: str, port: int, *, is_server: bool, timeout: float = 60.0) -> TensorplayStore:
    """A TCPStore client, or the server plus a client when ``is_server``.

    Args:
        host: the server's address (the address to listen on when ``is_server``). IPv4 and host
            names only: tensorplay's TCPStore does not resolve IPv6 literals.
        port: the server's port; with ``is_server`` and ``port=0`` the OS picks a free one
            (read it back from ``store.raw.port``).
        is_server: host the server in this process; ``close`` stops it.
        timeout: the read timeout in seconds: how long a call keeps retrying an unreachable
            server before raising ``StoreUnavailable``.

    Raises:
        StoreUnavailable: ``is_server`` and the address cannot be bound (port in use, unknown
            host). A client does not connect until its first call, so an unreachable server is
            reported by that call.
    """
    try:
        store = TCPStore(host, int(port), is_master=is_server, timeout=float(timeout))
    except RuntimeError as error:
        raise StoreUnavailable(
            f"cannot listen on {host}:{port} (port in use or host not local): {_one_line(error)}"
        ) from error
    return TensorplayStore(store, where=f"tcp store {host}:{store.port}", owns_server=is_server)


def file_store(path: str) -> TensorplayStore:
    """A FileStore at ``path`` (shared by every process that opens the same file).

    Raises:
        StoreUnavailable: the file cannot be created or opened (a missing directory above the
            parent, which tensorplay creates one level deep; a directory at ``path``; no
            permission). Also raised later if the file is deleted under us.
    """
    try:
        store = FileStore(str(path))
        store.has("tpelastic/probe")  # one cheap call: an unusable file fails here, not later
    except RuntimeError as error:
        raise StoreUnavailable(f"file store {path}: {_one_line(error)}") from error
    return TensorplayStore(store, where=f"file store {path}")


def hash_store() -> TensorplayStore:
    """A tensorplay HashStore: in this process only, one table per call."""
    return TensorplayStore(HashStore(), where="hash store")


def prefix_store(prefix: str, inner: TensorplayStore) -> TensorplayStore:
    """A tensorplay PrefixStore over ``inner``: key ``k`` lives at ``prefix + "/" + k``.

    Closing the result never stops ``inner``'s server; close ``inner`` for that.
    """
    return TensorplayStore(PrefixStore(prefix, inner.raw), where=f"{inner.where} [{prefix}/]")


__all__ = ["TensorplayStore", "file_store", "hash_store", "prefix_store", "tcp_store"]
