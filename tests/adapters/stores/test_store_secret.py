"""The run secret at the store: SignedStore's records (signed on write, checked on read) and our
server's handshake (nothing is served to a connection that has not proved the secret)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.stores import MemoryStore, StoreUnavailable, tcp_store, wire
from tpelastic.adapters.stores.errors import StoreCorrupt
from tpelastic.adapters.stores.signed import load_secret, sign, signed
from tpelastic.adapters.stores.tcp_client import TcpStoreClient, connect
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.testing import store_contract as contract

SECRET = b"0123456789abcdef-the-run-secret"
_names = itertools.count()


@pytest.fixture(scope="module")
def secured() -> Iterator[StoreServer]:
    served = StoreServer("127.0.0.1", 0, secret=SECRET).start()
    yield served
    served.stop()


def _signed_factories(port: int) -> dict[str, Callable[[], KeyValueStore]]:
    return {
        "memory": lambda: signed(MemoryStore(), SECRET),
        "tcp-with-handshake": lambda: signed(
            connect("127.0.0.1", port, timeout=5.0, secret=SECRET), SECRET
        ),
    }


@pytest.mark.parametrize("kind", ["memory", "tcp-with-handshake"])
@pytest.mark.parametrize("check", contract.ALL_CHECKS, ids=lambda c: c.__name__)
def test_signed_store_keeps_the_port_contract(
    check: Callable[..., None], kind: str, secured: StoreServer
) -> None:
    factory = _signed_factories(secured.port)[kind]
    if kind == "tcp-with-handshake":  # one shared server: each store in its own namespace
        from tpelastic.adapters.stores import PrefixedStore

        def factory() -> KeyValueStore:
            inner = connect("127.0.0.1", secured.port, timeout=5.0, secret=SECRET)
            return PrefixedStore(signed(inner, SECRET), f"c{next(_names)}")

    check(factory)


def test_signed_store_agrees_with_the_memory_model() -> None:
    machine = contract.store_comparison_machine(lambda: signed(MemoryStore(), SECRET))
    run_state_machine_as_test(machine, settings=settings(max_examples=30, deadline=None))


def test_what_a_stranger_writes_is_corrupt_naming_the_key() -> None:
    raw = MemoryStore()
    store = signed(raw, SECRET)
    store.set("a", b'{"v": 1}')
    assert store.get("a") == b'{"v": 1}'
    raw.set("forged", b'{"v": 1, "kind": "closed", "outcome": "failed", "reason": ""}')
    raw.set("altered", raw.get("a").replace(b"1", b"2", 1))  # type: ignore[union-attr]
    raw.set("moved", raw.get("a"))  # type: ignore[arg-type]  # a valid record at another key
    raw.set("other-secret", sign(b"another secret of 16+ bytes", "other-secret", b"{}"))
    for key in ("forged", "altered", "moved", "other-secret"):
        with pytest.raises(StoreCorrupt, match=repr(key)):
            store.get(key)
    with pytest.raises(StoreCorrupt):
        store.set_if_absent("forged", b"mine")  # the current value is checked too
    assert store.add("n", 3) == 3 and store.get("n") == b"3"  # counters are the store's
    assert not hasattr(store, "multi_get")  # only what the inner store offers


def test_multi_get_checks_every_value(secured: StoreServer) -> None:
    inner = connect("127.0.0.1", secured.port, timeout=5.0, secret=SECRET)
    store = signed(inner, SECRET)
    store.set("mg/a", b"record")
    store.add("mg/n", 2)
    assert store.multi_get(["mg/a", "mg/n", "mg/none"]) == [b"record", b"2", None]
    inner.set("mg/forged", b"record")
    with pytest.raises(StoreCorrupt, match="mg/forged"):
        store.multi_get(["mg/a", "mg/forged"])
    store.close()


def test_load_secret(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(SECRET + b"\n")
    assert load_secret(str(path), {}) == SECRET
    assert load_secret(None, {"TPELASTIC_RDZV_SECRET": SECRET.decode()}) == SECRET
    assert load_secret(str(path), {"TPELASTIC_RDZV_SECRET": "x" * 20}) == SECRET  # file wins
    assert load_secret(None, {}) is None
    with pytest.raises(ValueError, match="has 5 bytes, at least 16"):
        load_secret(None, {"TPELASTIC_RDZV_SECRET": "short"})
    with pytest.raises(ValueError, match="cannot read it"):
        load_secret(str(tmp_path / "absent"), {})


def test_the_server_serves_only_who_proves_the_secret(secured: StoreServer) -> None:
    friend = TcpStoreClient("127.0.0.1", secured.port, timeout=2.0, secret=SECRET)
    friend.set("k", b"v")
    assert friend.get("k") == b"v"
    stranger = TcpStoreClient("127.0.0.1", secured.port, timeout=2.0)
    with pytest.raises(StoreUnavailable):
        stranger.set("k", b"forged")
    wrong = TcpStoreClient("127.0.0.1", secured.port, timeout=2.0, secret=b"x" * 32)
    with pytest.raises(StoreUnavailable, match="different run secret"):
        wrong.add("k/n", 1)
    tp = tcp_store("127.0.0.1", secured.port, is_server=False, timeout=2.0)
    with pytest.raises(StoreUnavailable):
        tp.set("k", b"forged")
    assert friend.get("k") == b"v" and friend.get("k/n") is None
    for client in (friend, stranger, wrong, tp):
        client.close()
    assert secured.usage().get("closed_wrong secret", 0) >= 1


@pytest.mark.parametrize(
    "payload",
    [
        wire.request(wire.SET, b"k", b"forged"),  # no handshake at all
        wire.request(wire.PROVE, b"\0" * 32),  # PROVE with no challenge
        wire.request(wire.CHALLENGE) + wire.request(wire.PROVE, b"\0" * 32),  # a guess
        wire.request(wire.CHALLENGE) + wire.request(wire.GET, b"k"),  # skipping PROVE
    ],
)
def test_raw_requests_before_the_proof_close_the_connection(
    secured: StoreServer, payload: bytes
) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", secured.port), timeout=5.0) as sock:
        sock.sendall(payload)
        got = b""
        while chunk := sock.recv(4096):
            got += chunk
    assert len(got) <= 1 + 4 + 32  # at most the challenge itself was answered
    client = TcpStoreClient("127.0.0.1", secured.port, timeout=2.0, secret=SECRET)
    assert client.get("k") != b"forged"
    client.close()


def test_a_server_without_a_secret_lets_a_client_with_one_in() -> None:
    server = StoreServer("127.0.0.1", 0).start()
    try:
        client = TcpStoreClient("127.0.0.1", server.port, timeout=2.0, secret=SECRET)
        client.set("k", b"v")
        assert client.get("k") == b"v"
        client.close()
    finally:
        server.stop()


def test_etcd_records_are_signed_with_the_run_secret(etcd: Any, tmp_path: Path) -> None:
    """The etcd backend with a secret: its records (the leased heartbeat included) carry the
    tag, and a closed record a stranger with etcd access writes is corrupt state, not a close."""
    from tpelastic.adapters.rendezvous.etcd_factory import create_etcd_handler
    from tpelastic.adapters.rendezvous.parameters import RendezvousParameters
    from tpelastic.adapters.stores.etcd import EtcdStore
    from tpelastic.core.rendezvous.keys import RunKeys
    from tpelastic.core.rendezvous.records import ClosedRecord, encode_closed
    from tpelastic.rendezvous import RendezvousStateError

    path = tmp_path / "run.secret"
    path.write_bytes(SECRET)
    endpoint = ",".join(f"{host}:{port}" for host, port in etcd.endpoints)
    prefix = f"/signed{next(_names)}"
    params = RendezvousParameters(
        "etcd", endpoint, "job", 1, 1, etcd_prefix=prefix, secret_file=str(path)
    )
    handler = create_etcd_handler(params)
    stranger = EtcdStore(etcd.endpoints, prefix=prefix, timeout=5.0)
    keys = RunKeys("job")
    try:
        info = handler.next_rendezvous()
        assert info.world_size == 1
        result = stranger.get(keys.result(0))
        assert result is not None and b"#hmac-sha256=" in result
        beat = stranger.get(keys.heartbeat(handler.node_id))  # type: ignore[attr-defined]
        assert beat is not None and beat.startswith(b"alive\n#hmac-sha256="), beat
        stranger.set(keys.closed(), encode_closed(ClosedRecord(outcome="failed", reason="x")))
        with pytest.raises(RendezvousStateError, match="not signed with the run secret"):
            handler.is_closed()
    finally:
        handler.shutdown()
        stranger.close()


@pytest.mark.parametrize("server", ["tcp", "tensorplay"])
def test_static_records_are_signed_with_the_run_secret(server: str) -> None:
    """The static backend with a secret (its server, ours or tensorplay's, asks for no proof:
    workers share it): two nodes meet over signed records; a stranger's joined mark for the
    missing third node, or its closed record, is corrupt state, never a member or a close.

    The stranger is our client: tensorplay's client holds the GIL through a call, so in this
    process it could never reach our server's thread (a worker is a process of its own)."""
    import threading

    from tpelastic.adapters.rendezvous.static import StaticTCPRendezvous
    from tpelastic.adapters.stores.tcp_client import connect
    from tpelastic.core.rendezvous.keys import RunKeys
    from tpelastic.core.rendezvous.records import ClosedRecord, encode_closed
    from tpelastic.rendezvous import RendezvousStateError

    port = _free_port()
    nodes = [
        StaticTCPRendezvous("127.0.0.1", port, rank, 3, "job", 20.0, secret=SECRET, server=server)
        for rank in range(3)
    ]
    outcomes: dict[int, object] = {}

    def join(rank: int) -> None:
        try:
            outcomes[rank] = nodes[rank].next_rendezvous()
        except Exception as error:  # the outcome is the test's to judge
            outcomes[rank] = error

    threads = [threading.Thread(target=join, args=(rank,), daemon=True) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    stranger = connect("127.0.0.1", port, timeout=10.0)
    try:
        deadline = time.monotonic() + 15.0
        while stranger.get("tpelastic/job/static/joined/1") is None:
            assert time.monotonic() < deadline, outcomes
            time.sleep(0.05)
        stranger.set("tpelastic/job/static/joined/2", b"joined")
        for thread in threads:
            thread.join(15.0)
        assert all(isinstance(outcomes[r], RendezvousStateError) for r in (0, 1)), outcomes
        assert "not signed with the run secret" in str(outcomes[0]), outcomes

        # The third node comes: with the stranger's mark gone, the nodes meet over signed marks.
        stranger.delete("tpelastic/job/static/joined/2")
        threads = [threading.Thread(target=join, args=(r,), daemon=True) for r in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20.0)
        assert [getattr(outcomes[r], "world_size", outcomes[r]) for r in range(3)] == [3, 3, 3]
        closed = "tpelastic/job/" + RunKeys("job").closed()
        stranger.set(closed, encode_closed(ClosedRecord(outcome="failed")))
        with pytest.raises(RendezvousStateError, match="not signed with the run secret"):
            nodes[1].is_closed()
    finally:
        stranger.close()
        for node in reversed(nodes):
            node.shutdown()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_launchers_store_check_passes_a_real_store_and_its_secret() -> None:
    """The launcher's check that an endpoint is a store (before anything starts): our server
    with the secret and tensorplay's server pass; a wrong secret is refused in one line."""
    from tpelastic.adapters.launcher.checks import require_store_answers
    from tpelastic.adapters.launcher.config import ConfigError
    from tpelastic.adapters.stores.tensorplay_store import tcp_store

    ours = StoreServer("127.0.0.1", 0, secret=SECRET).start()
    theirs = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    try:
        require_store_answers("rendezvous store", "127.0.0.1", ours.port, 5.0, SECRET)
        require_store_answers("rendezvous store", "127.0.0.1", theirs.raw.port, 5.0)
        with pytest.raises(ConfigError, match="did not answer as a TCPStore"):
            require_store_answers("rendezvous store", "127.0.0.1", ours.port, 2.0, b"x" * 16)
    finally:
        ours.stop()
        theirs.close()
