"""The rendezvous backends and their per-round views keep the KeyValueStore contract: the
shipped conformance clauses, run over a real TCPStore (P10dRendezvousBackend) and a real
FileStore (TpRendezvousBackend)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.stores import (
    MemoryStore,
    TensorplayStore,
    file_store,
    prefix_store,
    tcp_store,
)
from tpelastic.rendezvous import (
    P10dRendezvousBackend,
    StoreRendezvousBackend,
    TpRendezvousBackend,
)
from tpelastic.testing import store_contract as contract

_fresh = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[TensorplayStore]:
    store = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    yield store
    store.close()


def _factories(server: TensorplayStore, tmp: Path) -> dict[str, Callable[[], KeyValueStore]]:
    port = int(server.raw.port)

    def p10d() -> KeyValueStore:
        client = tcp_store("127.0.0.1", port, is_server=False, timeout=5.0)
        return P10dRendezvousBackend(prefix_store(f"backend{next(_fresh)}", client))

    def p10d_round_view() -> KeyValueStore:
        return P10dRendezvousBackend(
            tcp_store("127.0.0.1", port, is_server=False, timeout=5.0)
        ).scoped(f"view{next(_fresh)}/r0/work")

    def file_view() -> KeyValueStore:
        backend = TpRendezvousBackend(file_store(str(tmp / f"view{next(_fresh)}")))
        return backend.scoped("r0/work")

    return {
        "p10d": p10d,
        "p10d-round-view": p10d_round_view,
        "tp-file": lambda: TpRendezvousBackend(file_store(str(tmp / f"f{next(_fresh)}"))),
        "tp-file-round-view": file_view,
        "generic-memory": lambda: StoreRendezvousBackend(MemoryStore()),
        "generic-memory-view": lambda: StoreRendezvousBackend(MemoryStore()).scoped("r0/work"),
    }


@pytest.fixture(
    params=[
        "p10d",
        "p10d-round-view",
        "tp-file",
        "tp-file-round-view",
        "generic-memory",
        "generic-memory-view",
    ]
)
def factory(
    request: pytest.FixtureRequest, server: TensorplayStore, tmp_path: Path
) -> Callable[[], KeyValueStore]:
    return _factories(server, tmp_path)[request.param]


@pytest.mark.parametrize("check", contract.ALL_CHECKS, ids=lambda c: c.__name__)
def test_backend_keeps_the_store_contract(
    check: Callable[..., None], factory: Callable[[], KeyValueStore]
) -> None:
    check(factory)


def test_round_view_of_a_tensorplay_backend_is_a_tensorplay_prefix_store(
    server: TensorplayStore,
) -> None:
    backend = P10dRendezvousBackend(tcp_store("127.0.0.1", server.raw.port, is_server=False))
    view = backend.scoped("run/r3/work/")
    assert isinstance(view, TensorplayStore)
    view.set("k", b"v")
    assert backend.get("run/r3/work/k") == b"v"  # tensorplay's prefix layout: prefix + "/" + key
    view.close()
    assert backend.get("run/r3/work/k") == b"v"  # closing a view leaves the backend open
    backend.close()
