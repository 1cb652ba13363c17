"""The workers' bootstrap store hosted by rank 0's agent: a fresh server per attempt, served to
tensorplay's own client, published with the endpoint so every node tells its workers."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tpelastic.adapters.rendezvous.bootstrap import DISABLE_ENV, BootstrapHost, bootstrap_host
from tpelastic.adapters.stores.memory import MemoryStore
from tpelastic.adapters.stores.tcp_client import connect
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.rendezvous import DynamicRendezvousHandler, RendezvousStoreInfo

FAST = {
    "join_timeout": 10.0,
    "last_call_timeout": 0.3,
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 0.8,
}


@pytest.fixture
def host() -> Iterator[BootstrapHost]:
    hosting = BootstrapHost("tcp")
    yield hosting
    hosting.stop()


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2.0).close()
    except ConnectionRefusedError:
        return True
    return False


def test_tensorplays_own_client_uses_the_agents_server(host: BootstrapHost) -> None:
    port = host.serve("127.0.0.1")
    assert port is not None and port == host.port and host.address == "127.0.0.1"
    # In a process of its own, as a worker is: tensorplay's client holds the GIL while it
    # waits for a reply, which a server thread in the same process could never send.
    worker = textwrap.dedent(
        f"""
        from tensorplay.distributed import TCPStore
        client = TCPStore("127.0.0.1", {port}, world_size=2, is_master=False, timeout=10.0)
        client.set("gloo/rank0", b"addr")
        print(client.add("barrier", 2), client.get("gloo/rank0").decode())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", worker], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["2", "addr"], done.stderr[-2000:]


def test_every_attempt_gets_a_fresh_server_and_the_last_one_stops(host: BootstrapHost) -> None:
    first = host.serve("127.0.0.1")
    assert first is not None
    connect("127.0.0.1", first, timeout=5.0).set("left-by-attempt-0", b"1")
    second = host.serve("127.0.0.1")
    assert second is not None
    fresh = connect("127.0.0.1", second, timeout=5.0)
    assert fresh.get("left-by-attempt-0") is None  # nothing an earlier attempt wrote
    fresh.close()
    if second != first:
        assert _refused(first)
    host.stop()
    host.stop()  # idempotent
    assert host.port is None and host.address is None and _refused(second)


def test_tensorplays_server_when_the_store_type_asks_for_it() -> None:
    hosting = BootstrapHost("tensorplay")
    try:
        port = hosting.serve("127.0.0.1")
        assert port is not None
        client = connect("127.0.0.1", port, timeout=5.0)  # ours, on tensorplay's server
        client.set("k", b"v")
        assert client.get("k") == b"v"
        client.close()
    finally:
        hosting.stop()


def test_torchs_switch_leaves_the_store_to_rank_0s_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV, "1")
    assert bootstrap_host("tcp") is None
    monkeypatch.setenv(DISABLE_ENV, "0")
    chosen = bootstrap_host("tensorplay")
    assert chosen is not None and chosen.server == "tensorplay"
    assert bootstrap_host("file").server == "tcp"  # type: ignore[union-attr]


def test_an_unknown_server_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="must be one of"):
        BootstrapHost("etcd")


def test_the_endpoint_record_says_who_hosts_and_reads_old_records() -> None:
    hosted = RendezvousStoreInfo("10.0.0.1", 4000, agent_hosted=True)
    assert RendezvousStoreInfo.decode("k", hosted.encode()) == hosted
    plain = RendezvousStoreInfo("10.0.0.1", 4000)
    assert b"agent" not in plain.encode()  # records without an agent store read as before
    old = b'{"addr": "10.0.0.1", "port": 4000, "schema": 1}'
    assert RendezvousStoreInfo.decode("k", old).agent_hosted is False


def test_rank_0s_agent_serves_its_round_and_every_node_is_told() -> None:
    store = MemoryStore()
    config = RendezvousConfig(min_nodes=2, max_nodes=2, **FAST)
    hosts = [BootstrapHost("tcp") for _ in range(2)]
    handlers = [
        DynamicRendezvousHandler(
            "boot",
            store,
            config,
            backend_name="tcp",
            node_id=f"n{i}",
            local_addr="127.0.0.1",
            bootstrap_host=hosts[i],
        )
        for i in range(2)
    ]
    try:
        with ThreadPoolExecutor(2) as pool:
            infos = list(pool.map(lambda h: h.next_rendezvous(), handlers))
        boot = {info.bootstrap_store_info for info in infos}
        assert len(boot) == 1
        (endpoint,) = boot
        assert endpoint is not None and endpoint.agent_hosted
        rank0 = next(i for i, info in enumerate(infos) if info.rank == 0)
        assert hosts[rank0].port == endpoint.master_port and hosts[1 - rank0].port is None
        # It listens where it tells the workers to connect, not on every interface.
        assert hosts[rank0].address == endpoint.master_addr == "127.0.0.1"
        client = connect("127.0.0.1", endpoint.master_port, timeout=5.0)
        client.set("reachable", b"1")
        client.close()
    finally:
        for handler in handlers:
            handler.shutdown()
    assert all(h.port is None for h in hosts)  # shutdown stops the server
    assert _refused(endpoint.master_port)
