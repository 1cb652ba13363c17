"""Corrupt or hostile records are bounded and named (specs/rendezvous_join.md R19): a reader
refuses a record past its size bound or a counter that cannot be true before acting on it,
and the error says "corrupt rendezvous state" with the key. The join machine is driven by the
real driver against a real store."""

from __future__ import annotations

import time

import pytest

from tpelastic.adapters.rendezvous.driver import run_join
from tpelastic.adapters.stores import MemoryStore
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
from tpelastic.rendezvous import RendezvousStateError

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
