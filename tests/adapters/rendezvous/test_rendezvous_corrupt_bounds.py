"""Corrupt or hostile records are bounded and named (specs/rendezvous_join.md R19): a reader
refuses a record past its size bound or a counter that cannot be true before acting on it,
and the error says "corrupt rendezvous state" with the key. The join machine is driven by the
real driver against a real store."""

from __future__ import annotations

import threading
import time

import pytest

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.rendezvous.driver import run_join
from tpelastic.adapters.stores import MemoryStore, StoreUnavailable, tcp_client
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.core.rendezvous import records
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.records import (
    ClosedRecord,
    NodeInfo,
    RoundResult,
    StateCorrupt,
    encode_closed,
    encode_node,
    encode_result,
)
from tpelastic.rendezvous import RendezvousJoinTimeoutError, RendezvousStateError

FAST = {"heartbeat_interval": 0.2, "heartbeat_timeout": 1.0, "last_call_timeout": 0.3}


def _config(min_nodes: int, max_nodes: int) -> RendezvousConfig:
    return RendezvousConfig(min_nodes=min_nodes, max_nodes=max_nodes, join_timeout=10.0, **FAST)


@pytest.mark.parametrize(
    ("decode", "raw", "problem"),
    [
        (records.decode_node, encode_node(NodeInfo(node="n" * 2000)), "'node' has 2000"),
        (records.decode_node, encode_node(NodeInfo(node="n", addr="a" * 5000)), "'addr' has"),
        (records.decode_node, b'{"v": 1, "pad": "' + b"x" * 70_000 + b'"}', "node record of"),
        (
            records.decode_result,
            encode_result(RoundResult(round_no=0, closer="c" * (17 * 1024 * 1024))),
            "result record of",
        ),
        (
            records.decode_closed,
            encode_closed(ClosedRecord(outcome="failed", reason="r" * 5000)),
            "'reason' has",
        ),
        (records.decode_counter, b"1" * 30, "found 30 bytes"),
    ],
)
def test_R19_records_past_their_bounds_are_refused(decode, raw: bytes, problem: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(StateCorrupt, match=problem):
        decode(raw)


def test_R19_an_arrivals_counter_that_cannot_be_true_is_corrupt_not_a_memory_bomb() -> None:
    store = MemoryStore()
    keys = RunKeys("bomb")
    store.add(keys.arrivals(0), 1_000_000_000)
    started = time.monotonic()
    with pytest.raises(RendezvousStateError) as caught:
        run_join(store, _config(1, 2), run_id="bomb", node="n0")
    message = str(caught.value)
    assert "corrupt rendezvous state at" in message and keys.arrivals(0) in message, message
    assert "1000000001 arrivals cannot be true" in message, message
    assert time.monotonic() - started < 5.0


def test_R19_a_bad_slot_is_named_by_its_key() -> None:
    store = MemoryStore()
    keys = RunKeys("slots")
    store.add(keys.arrivals(0), 1)  # someone counted, then wrote garbage into slot 0
    store.set(keys.slot(0, 0), b"\xff\xfe garbage")
    with pytest.raises(RendezvousStateError) as caught:
        run_join(store, _config(2, 2), run_id="slots", node="n0")
    assert f"corrupt rendezvous state at {keys.slot(0, 0)!r}" in str(caught.value)


def test_R19_a_bad_closed_record_is_named_by_its_key() -> None:
    store = MemoryStore()
    keys = RunKeys("closed")
    store.set(keys.closed(), b'{"v": 1, "kind": "closed", "outcome": 3}')
    with pytest.raises(RendezvousStateError) as caught:
        run_join(store, _config(1, 1), run_id="closed", node="n0")
    assert f"corrupt rendezvous state at {keys.closed()!r}" in str(caught.value)


@pytest.mark.parametrize(
    "raw", [b"\xff\xfe", b"{}", b'{"outcome": "x"}', b"[1]", encode_node(NodeInfo(node="n"))]
)
def test_R19_the_static_backends_closed_record_is_validated(raw: bytes) -> None:
    from tpelastic.adapters.rendezvous.static import StaticTCPRendezvous

    handler = StaticTCPRendezvous("127.0.0.1", 1, 0, 1, "job")
    store = MemoryStore()
    key = RunKeys("job").closed()
    store.set(key, raw)
    with pytest.raises(RendezvousStateError, match=f"corrupt rendezvous state at {key!r}"):
        handler._read_closed(store)  # type: ignore[arg-type]
    store.set(key, encode_closed(ClosedRecord(outcome="failed", reason="why")))
    assert handler._read_closed(store)  # type: ignore[arg-type]


def _join_in_thread(store: KeyValueStore, config: RendezvousConfig, run_id: str, node: str):  # type: ignore[no-untyped-def]
    outcome: list[object] = []

    def join() -> None:
        try:
            outcome.append(run_join(store, config, run_id=run_id, node=node))
        except Exception as error:  # the outcome is the test's to judge
            outcome.append(error)

    thread = threading.Thread(target=join, daemon=True)
    thread.start()
    return thread, outcome


def test_R19_a_slot_copied_over_another_is_corrupt_not_a_wait() -> None:
    store = MemoryStore()
    keys = RunKeys("copied")
    # Two nodes registered, then slot 1 was overwritten with slot 0's record.
    store.add(keys.arrivals(0), 2)
    store.set(keys.slot(0, 0), encode_node(NodeInfo(node="a")))
    store.set(keys.slot(0, 1), encode_node(NodeInfo(node="a")))
    started = time.monotonic()
    with pytest.raises(RendezvousStateError) as caught:
        run_join(store, _config(3, 3), run_id="copied", node="c")
    message = str(caught.value)
    assert f"corrupt rendezvous state at {keys.slot(0, 1)!r}" in message, message
    assert "'a' is in slot 0 too" in message, message
    assert time.monotonic() - started < 5.0


def test_R19_an_arrival_that_never_wrote_its_slot_is_waited_out_not_corrupt() -> None:
    """A counted arrival without a slot is what a node that died between the two writes
    leaves: it is no corrupt state. The round forms without it once its heartbeat timeout is
    over, or the join ends with the timeout line at the join deadline."""
    store = MemoryStore()
    keys = RunKeys("ahead")
    store.add(keys.arrivals(0), 1)  # slot 0 counted, never written
    config = RendezvousConfig(min_nodes=2, max_nodes=3, join_timeout=10.0, **FAST)
    joins = [_join_in_thread(store, config, "ahead", node) for node in ("a", "b")]
    for thread, _ in joins:
        thread.join(8.0)
    results = [outcome[0] for _, outcome in joins]
    assert all(not isinstance(r, Exception) for r in results), results
    worlds = {tuple(p.node for p in r.result.participants) for r in results}  # type: ignore[union-attr]
    assert worlds in ({("a", "b")}, {("b", "a")}), worlds

    alone = RendezvousConfig(min_nodes=2, max_nodes=2, join_timeout=2.0, **FAST)
    store.add(RunKeys("alone").arrivals(0), 1)
    started = time.monotonic()
    with pytest.raises(RendezvousJoinTimeoutError, match="1 arrival.s. never wrote their slot"):
        run_join(store, alone, run_id="alone", node="a")
    assert time.monotonic() - started < 6.0


def test_R19_a_huge_published_hint_costs_a_scan_not_a_walk_down() -> None:
    store = MemoryStore()
    keys = RunKeys("hint")
    store.add(keys.published_rounds(), 1_000_000_000)
    started = time.monotonic()
    joined = run_join(store, _config(1, 1), run_id="hint", node="a")
    assert joined.result.round_no == 0
    again = run_join(store, _config(1, 1), run_id="hint", node="a", from_round=0, reason="rejoin")
    assert again.result.round_no == 1
    assert time.monotonic() - started < 5.0


def test_R19_a_huge_node_record_in_a_slot_is_refused_by_its_key(server: StoreServer) -> None:
    """Over our TCPStore: a 50 MiB value is refused by the server; the largest it takes (16
    MiB) is refused by the record bound, naming the slot, without reading it into a node."""
    store = tcp_client.connect("127.0.0.1", server.port, timeout=5.0)
    keys = RunKeys("huge")
    try:
        stranger = tcp_client.connect("127.0.0.1", server.port, timeout=5.0)
        with pytest.raises(StoreUnavailable):
            stranger.set(keys.slot(0, 0), b"x" * (50 * 1024 * 1024))
        stranger.close()
        store.add(keys.arrivals(0), 1)
        huge = encode_node(NodeInfo(node="n" * (15 * 1024 * 1024)))
        store.set(keys.slot(0, 0), huge)
        started = time.monotonic()
        with pytest.raises(RendezvousStateError) as caught:
            run_join(store, _config(2, 2), run_id="huge", node="b")
        message = str(caught.value)
        assert f"corrupt rendezvous state at {keys.slot(0, 0)!r}" in message, message
        assert "node record of 15728" in message and len(message) < 500, message
        assert time.monotonic() - started < 8.0
    finally:
        store.close()


def test_R19_a_counter_below_zero_is_corrupt() -> None:
    store = MemoryStore()
    keys = RunKeys("negative")
    store.add(keys.published_rounds(), -5)
    with pytest.raises(RendezvousStateError) as caught:
        run_join(store, _config(1, 1), run_id="negative", node="a")
    message = str(caught.value)
    assert f"corrupt rendezvous state at {keys.published_rounds()!r}" in message, message
    assert "a counter below 0: -5" in message, message


def test_R19_arrivals_moved_back_below_the_closers_slot_is_corrupt() -> None:
    store = MemoryStore()
    keys = RunKeys("back")
    thread, outcome = _join_in_thread(store, _config(2, 2), "back", "a")
    deadline = time.monotonic() + 5.0
    while store.get(keys.slot(0, 0)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    store.add(keys.arrivals(0), -1)  # the counter that gave slot 0 now says nobody came
    thread.join(5.0)
    assert outcome and isinstance(outcome[0], RendezvousStateError), outcome
    assert "0 arrivals, but this node holds slot 0" in str(outcome[0])
