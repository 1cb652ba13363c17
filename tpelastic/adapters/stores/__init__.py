"""Store adapters: the KeyValueStore port over tensorplay's stores and an in-memory one.

The tensorplay-backed names load tensorplay on first use only, so importing the errors or the
memory store stays cheap.
"""

from __future__ import annotations

from typing import Any

from tpelastic.adapters.stores.errors import StoreCorrupt, StoreError, StoreUnavailable
from tpelastic.adapters.stores.memory import MemoryStore
from tpelastic.adapters.stores.prefixed import PrefixedStore

_TENSORPLAY_NAMES = ("TensorplayStore", "file_store", "hash_store", "prefix_store", "tcp_store")


def __getattr__(name: str) -> Any:
    if name in _TENSORPLAY_NAMES:
        from tpelastic.adapters.stores import tensorplay_store

        return getattr(tensorplay_store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MemoryStore",
    "PrefixedStore",
    "StoreCorrupt",
    "StoreError",
    "StoreUnavailable",
    "TensorplayStore",
    "file_store",
    "hash_store",
    "prefix_store",
    "tcp_store",
]
