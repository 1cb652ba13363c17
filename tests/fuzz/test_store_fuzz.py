"""Hypothesis over the store's wire protocol against a live ``tpelastic store``: random frames
(known and unknown opcodes, declared lengths that lie, truncated fields), random wait timeouts,
pipelined bursts and disconnects on a few raw connections at once. After every example the
server is alive, serves a correct client correctly, and stays under RSS_BOUND."""

from __future__ import annotations

import socket
import struct

from hypothesis import given
from hypothesis import strategies as st
from store_fuzz_helpers import MIB, RSS_BOUND, LiveStore, raw, send_quietly

from tpelastic.adapters.stores import wire

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_OPS = [wire.SET, wire.GET, wire.ADD, wire.HAS, wire.CAS, wire.DELETE, wire.CHECK]
_OPS += [wire.NUM_KEYS, wire.WAIT, wire.MULTI_GET, wire.WAIT_ANY]
_KEYS = [b"a", b"b", b"c", b"fuzz/x", b""]

lengths = st.one_of(
    st.integers(0, 64),
    st.sampled_from([255, 4096, 16 * 1024, 16 * 1024 + 1, 16 * MIB, 16 * MIB + 1]),
    st.sampled_from([2**31, 2**32 - 1]),
)
timeouts = st.one_of(
    st.integers(-5, 200),
    st.sampled_from([2**31 - 1, 2**31, 2**32, 2**53, 2**62, 2**63 - 1, -(2**63)]),
)
packed_keys = st.lists(st.sampled_from(_KEYS), max_size=6).map(
    lambda keys: b"".join(wire.field(k) for k in keys)
)


@st.composite
def lying_field(draw: st.DrawFn) -> bytes:
    """A field whose declared length may differ from the bytes that follow."""
    body = draw(st.binary(max_size=96))
    declared = draw(st.one_of(st.just(len(body)), lengths))
    return _U32.pack(declared) + body[:declared]


@st.composite
def frame(draw: st.DrawFn) -> bytes:
    op = draw(st.one_of(st.sampled_from(_OPS), st.integers(0, 255)))
    kind = draw(st.sampled_from(["well-formed", "lying", "garbage"]))
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=200))
    if kind == "lying":
        return bytes([op]) + b"".join(draw(st.lists(lying_field(), max_size=3)))
    key = draw(st.sampled_from(_KEYS))
    if op in (wire.WAIT, wire.WAIT_ANY):
        return wire.request(op, draw(packed_keys), _I64.pack(draw(timeouts)))
    if op == wire.MULTI_GET:
        return wire.request(op, draw(packed_keys))
    if op == wire.CHECK:
        return wire.request(op, b"", draw(packed_keys))
    if op == wire.ADD:
        return wire.request(op, key, _I64.pack(draw(st.integers(-(2**63), 2**63 - 1))))
    if op == wire.NUM_KEYS:
        return bytes([op])
    values = draw(st.lists(st.binary(max_size=64), min_size=2, max_size=2))
    fields = {wire.SET: [key, values[0]], wire.CAS: [key, *values]}.get(op, [key])
    return wire.request(op, *fields)


action = st.tuples(
    st.sampled_from(["send", "send", "send", "disconnect"]),
    st.integers(0, 2),  # which connection
    frame(),
    st.one_of(st.just(1), st.integers(1, 300)),  # pipelined copies
)


@given(st.lists(action, min_size=1, max_size=12))
def test_store_survives_any_bytes(live: LiveStore, actions: list) -> None:  # type: ignore[type-arg]
    conns: dict[int, socket.socket] = {}
    try:
        for what, which, payload, copies in actions:
            if what == "disconnect":
                sock = conns.pop(which, None)
                if sock is not None:
                    sock.close()
                continue
            if which not in conns:
                conns[which] = raw(live.port, timeout=0.5)
            if not send_quietly(conns[which], payload * copies):
                conns.pop(which).close()
    finally:
        for sock in conns.values():
            sock.close()
    assert live.alive()
    live.serves_correctly()
    assert live.rss() <= RSS_BOUND, f"RSS {live.rss() / MIB:.0f} MiB"
