"""The tcp backend's store path: store_type picks our TCPStore or tensorplay's, reads of one batch
go out as one multi_get, and a rendezvous completes over our store, also with a tensorplay client
in another process (mixed versions)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence

import pytest

from tpelastic.adapters.ports import MultiGetStore
from tpelastic.adapters.rendezvous.backends import P10dRendezvousBackend
from tpelastic.adapters.rendezvous.driver import execute_ops, run_join
from tpelastic.adapters.rendezvous.hosting import open_rendezvous_store
from tpelastic.adapters.stores import MemoryStore, TensorplayStore
from tpelastic.adapters.stores.tcp_client import TcpStoreClient
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.ops import Add, Get, Set, SetIfAbsent
from tpelastic.rendezvous import RendezvousParameters


class _CountingMemory(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def get(self, key: str) -> bytes | None:
        self.calls["get"] += 1
        return super().get(key)

    def multi_get(self, keys: Sequence[str]) -> list[bytes | None]:
        self.calls["multi_get"] += 1
        return [super(_CountingMemory, self).get(key) for key in keys]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_runs_of_reads_become_one_multi_get_and_replies_stay_in_order() -> None:
    store = _CountingMemory()
    assert isinstance(store, MultiGetStore)
    store.set("a", b"1")
    store.set("c", b"3")
    ops = (Get("a"), Get("b"), Set("c", b"4"), Get("c"), Add("n", 2), Get("n"), Get("a"))
    replies = execute_ops(store, ops)
    assert replies == (b"1", None, None, b"4", 2, b"2", b"1")
    # [a, b] and [n, a] are runs of two; the lone Get("c") is a plain get.
    assert store.calls == Counter({"multi_get": 2, "get": 1})


def test_a_store_without_multi_get_is_read_key_by_key() -> None:
    store = MemoryStore()
    assert not isinstance(store, MultiGetStore)
    assert execute_ops(store, (Get("x"), SetIfAbsent("x", b"v"), Get("x"), Get("y"))) == (
        None,
        b"v",
        b"v",
        None,
    )


def test_the_backend_passes_multi_get_through_or_falls_back() -> None:
    assert P10dRendezvousBackend(MemoryStore()).multi_get(["a"]) == [None]
    inner = _CountingMemory()
    inner.set("a", b"1")
    assert P10dRendezvousBackend(inner).multi_get(["a", "b"]) == [b"1", None]
    assert inner.calls["multi_get"] == 1


def _params(endpoint: str, **config: object) -> RendezvousParameters:
    return RendezvousParameters("tcp", endpoint, "run", 1, 2, read_timeout="2", **config)


@pytest.mark.parametrize(("store_type", "kind"), [(None, TcpStoreClient), ("tcp", TcpStoreClient)])
def test_store_type_tcp_is_our_client_and_server(store_type: str | None, kind: type) -> None:
    config = {"store_type": store_type} if store_type else {}
    endpoint = f"127.0.0.1:{_free_port()}"
    host = open_rendezvous_store(_params(endpoint, **config))
    client = open_rendezvous_store(_params(endpoint, **config))
    try:
        assert isinstance(host.store, kind) and isinstance(client.store, kind)
        assert (host.is_host, client.is_host) == (True, False)
        host.store.set("k", b"v")
        assert client.store.wait_for(["k"], 1.0) and client.store.get("k") == b"v"
    finally:
        client.store.close()
        host.store.close()


def test_store_type_tensorplay_is_tensorplays_client_and_server() -> None:
    endpoint = f"127.0.0.1:{_free_port()}"
    host = open_rendezvous_store(_params(endpoint, store_type="tensorplay"))
    client = open_rendezvous_store(_params(endpoint, store_type="tensorplay"))
    try:
        assert isinstance(host.store, TensorplayStore) and host.is_host
        host.store.set("k", b"v")
        assert client.store.get("k") == b"v"
    finally:
        client.store.close()
        host.store.close()


def test_a_round_over_our_server_with_a_tensorplay_client_in_another_process() -> None:
    """Mixed versions: this process hosts our server and joins with our client; another joins
    through tensorplay's own TCPStore client (store_type=tensorplay). Both see one round."""
    endpoint = f"127.0.0.1:{_free_port()}"
    host = open_rendezvous_store(_params(endpoint))
    config = RendezvousConfig(min_nodes=2, max_nodes=2, join_timeout=30.0, last_call_timeout=0.1)
    script = (
        "from tpelastic.adapters.rendezvous.driver import run_join\n"
        "from tpelastic.adapters.rendezvous.hosting import open_rendezvous_store\n"
        "from tpelastic.core.rendezvous.config import RendezvousConfig\n"
        "from tpelastic.rendezvous import RendezvousParameters\n"
        f"p = RendezvousParameters('tcp', '{endpoint}', 'run', 1, 2, read_timeout='10',\n"
        "    store_type='tensorplay', is_host='false')\n"
        "c = RendezvousConfig(min_nodes=2, max_nodes=2, join_timeout=30.0, last_call_timeout=0.1)\n"
        "done = run_join(open_rendezvous_store(p).store, c, run_id='mixed', node='theirs')\n"
        "print(done.rank, done.result.world_size, done.result.round_no)\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    outcome: list[object] = []
    joiner = threading.Thread(
        target=lambda: outcome.append(run_join(host.store, config, run_id="mixed", node="ours"))
    )
    try:
        joiner.start()
        out, err = other.communicate(timeout=60)
        joiner.join(30)
        assert other.returncode == 0, err
        ours = outcome[0]
        their_rank, world, round_no = (int(x) for x in out.split())
        assert (world, round_no) == (2, ours.result.round_no)  # type: ignore[attr-defined]
        assert {their_rank, ours.rank} == {0, 1}  # type: ignore[attr-defined]
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(10)
        host.store.close()


def test_a_hosting_handler_leaves_no_threads_or_listener_behind() -> None:
    """create_handler hosts our server, completes a one-node round, shuts down: the server's
    thread and the keep-alive are gone and the port is free again."""
    from tpelastic.rendezvous import create_handler

    before = set(threading.enumerate())
    port = _free_port()
    params = RendezvousParameters(
        "c10d", f"127.0.0.1:{port}", "tidy", 1, 1, read_timeout="2", last_call_timeout="0.1"
    )
    handler = create_handler(params)
    info = handler.next_rendezvous()
    assert (info.rank, info.world_size) == (0, 1)
    assert handler.shutdown()
    deadline = time.monotonic() + 10.0
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(threading.enumerate()) - before == set()
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))  # nothing listens there any more
