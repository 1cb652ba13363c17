"""RendezvousStoreInfo.build over a real store, RendezvousInfo values, error translation."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tpelastic.adapters.rendezvous.errors import store_errors_as_rendezvous_errors
from tpelastic.adapters.stores import MemoryStore, StoreCorrupt, StoreUnavailable, tcp_store
from tpelastic.rendezvous import (
    RendezvousConnectionError,
    RendezvousError,
    RendezvousInfo,
    RendezvousJoinTimeoutError,
    RendezvousStateError,
    RendezvousStoreInfo,
    RendezvousTimeoutError,
)


def test_rank0_publishes_and_others_read_over_tcp() -> None:
    server = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    client = tcp_store("127.0.0.1", int(server.raw.port), is_server=False, timeout=5.0)
    try:
        got: dict[str, RendezvousStoreInfo] = {}

        def other_rank() -> None:
            got["r1"] = RendezvousStoreInfo.build(1, client, key="round3/master", timeout=10)

        reader = threading.Thread(target=other_rank)
        reader.start()
        time.sleep(0.1)  # rank 1 is already waiting when rank 0 publishes
        mine = RendezvousStoreInfo.build(0, server, "10.0.0.7", 29500, key="round3/master")
        reader.join(10)
        assert mine == RendezvousStoreInfo("10.0.0.7", 29500)
        assert got["r1"] == mine
        assert mine.addr == "10.0.0.7"
    finally:
        client.close()
        server.close()


def test_rank0_without_a_port_picks_a_free_one() -> None:
    info = RendezvousStoreInfo.build(0, MemoryStore(), "host0", key="m")
    assert 0 < info.master_port <= 65535


def test_other_rank_times_out_with_a_clear_error() -> None:
    started = time.monotonic()
    with pytest.raises(RendezvousTimeoutError, match="rank 2: rank 0 did not publish .* 0.2 s"):
        RendezvousStoreInfo.build(2, MemoryStore(), key="m", timeout=0.2)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x80\x04\x95pickle", "can't decode|invalid"),
        (b"not json", "Expecting value"),
        (b"[1, 2]", "not a tpelastic endpoint record"),
        (json.dumps({"schema": 2, "addr": "h", "port": 1}).encode(), "newer tpelastic"),
        (json.dumps({"schema": 1, "addr": "", "port": 1}).encode(), "master_addr must be"),
        (json.dumps({"schema": 1, "addr": "h", "port": "80"}).encode(), "master_port must be"),
        (json.dumps({"schema": 1, "addr": "h", "port": 0}).encode(), "master_port must be"),
        (b"{" + b" " * 5000 + b"}", "too long"),
    ],
)
def test_foreign_bytes_are_a_state_error(blob: bytes, message: str) -> None:
    store = MemoryStore()
    store.set("m", blob)
    with pytest.raises(RendezvousStateError, match=message) as caught:
        RendezvousStoreInfo.build(1, store, key="m", timeout=1)
    assert "'m'" in str(caught.value)


def test_unreachable_store_is_a_connection_error() -> None:
    store = MemoryStore()
    store.close()
    with pytest.raises(RendezvousConnectionError, match="bootstrap store info for rank 1"):
        RendezvousStoreInfo.build(1, store, key="m", timeout=1)


def test_rendezvous_info_values() -> None:
    info = RendezvousInfo("store", 1, 2, None, ["a", "b"], ["c"])
    assert info.participants == ("a", "b")
    assert info.wait_list == ("c",)
    with pytest.raises(ValueError, match=r"rank 2 is outside 0..1"):
        RendezvousInfo(None, 2, 2)
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        RendezvousInfo(None, 0, 0)
    with pytest.raises(ValueError, match="3 participants for world_size 2"):
        RendezvousInfo(None, 0, 2, None, ["a", "b", "c"])


def test_error_hierarchy_and_translation() -> None:
    assert issubclass(RendezvousJoinTimeoutError, RendezvousTimeoutError)
    assert issubclass(RendezvousTimeoutError, RendezvousError)
    with pytest.raises(RendezvousConnectionError, match="joining: gone"):
        with store_errors_as_rendezvous_errors("joining"):
            raise StoreUnavailable("gone")
    with pytest.raises(RendezvousStateError, match="joining: store key 'k' holds data"):
        with store_errors_as_rendezvous_errors("joining"):
            raise StoreCorrupt("k", "not JSON")
