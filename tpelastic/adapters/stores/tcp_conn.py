"""One connection of our TCPStore server: its buffers and parked wait, how a request is parsed
from its bytes (each field checked against :class:`~limits.ServerLimits` as soon as its length
is known) and how a reply with a value is framed. :mod:`tcp_server` runs the loop and the store.
"""

from __future__ import annotations

import socket
import struct
from collections import deque

from tpelastic.adapters.stores import wire
from tpelastic.adapters.stores.limits import ServerLimits

# What each field of a request is, for its size bound.
_KEY, _VALUE, _KEYS, _INT, _PROOF = "key", "value", "keys", "int", "proof"
_FIELDS: dict[int, tuple[str, ...]] = {
    wire.SET: (_KEY, _VALUE),
    wire.GET: (_KEY,),
    wire.ADD: (_KEY, _INT),
    wire.HAS: (_KEY,),
    wire.CAS: (_KEY, _VALUE, _VALUE),
    wire.DELETE: (_KEY,),
    wire.CHECK: (_KEY, _KEYS),
    wire.NUM_KEYS: (),
    wire.WAIT: (_KEYS, _INT),
    wire.MULTI_GET: (_KEYS,),
    wire.WAIT_ANY: (_KEYS, _INT),
    wire.CHALLENGE: (),
    wire.PROVE: (_PROOF,),
}
_HANDSHAKE = (wire.CHALLENGE, wire.PROVE)
# Values at least this long are queued as they are, not copied into the reply buffer: a round's
# result (O(N) bytes) goes to every member, which is most of the bytes this server sends.
_BIG = 8192
_U32 = struct.Struct("<I")


class Refused(wire.WireError):
    """A request the server will not serve; the connection is closed. ``kind`` names the bound
    (one log line per kind), the message says what was sent."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Conn:
    """One client connection: bytes not yet parsed, bytes not yet sent, a parked wait.

    Replies collect in ``outbox`` (small pieces) and ``queue`` (whole buffers sent as they are,
    so a large value is never copied in this process); ``queued`` counts the queue's bytes.
    ``counted`` is what the server's total of buffered bytes holds for this connection.
    """

    __slots__ = (
        "sock",
        "peer",
        "inbox",
        "outbox",
        "queue",
        "queued",
        "counted",
        "waiting",
        "closed",
        "writing",
        "nonce",
        "trusted",
    )

    def __init__(self, sock: socket.socket, peer: str, trusted: bool = True) -> None:
        self.sock = sock
        self.peer = peer
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.queue: deque[bytes | memoryview] = deque()
        self.queued = 0
        self.counted = 0
        self.waiting: Waiter | None = None
        self.closed = False
        self.writing = False
        self.nonce = b""  # the CHALLENGE sent, which PROVE must answer
        self.trusted = trusted  # False until it proved it holds the server's secret

    def unsent(self) -> int:
        return len(self.outbox) + self.queued

    def held(self) -> int:
        return len(self.inbox) + len(self.outbox) + self.queued

    def release(self) -> None:
        """Let go of every buffer (the connection is closed)."""
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.queue.clear()
        self.queued = 0
        self.waiting = None


class Waiter:
    """A parked WAIT (or WAIT_ANY, ``any_``): the keys still missing; answered once, by a
    write (the last missing key's, or for WAIT_ANY the first one's) or by its deadline."""

    __slots__ = ("conn", "missing", "done", "any_")

    def __init__(self, conn: Conn, missing: set[bytes], any_: bool = False) -> None:
        self.conn = conn
        self.missing = missing
        self.done = False
        self.any_ = any_


def reply_value(conn: Conn, status: bytes, value: bytes) -> None:
    """Append ``status`` and ``value`` as a field; a big value is queued, not copied."""
    head = status + _U32.pack(len(value))
    if len(value) < _BIG:
        conn.outbox += head
        conn.outbox += value
        return
    conn.outbox += head
    pending = bytes(conn.outbox)
    conn.outbox.clear()
    conn.queue.append(pending)
    conn.queue.append(value)
    conn.queued += len(pending) + len(value)


def parse_request(
    buffer: bytearray, at: int, limits: ServerLimits, trusted: bool = True
) -> tuple[int, list[bytes], int] | None:
    """The request at ``at``: (op, fields, offset after it), or None when it is incomplete.
    Not ``trusted``: only the handshake's requests are accepted.

    Raises:
        Refused: an unknown opcode, a request before the handshake, or a field longer than
            its bound (known from its length prefix, before its bytes arrive).
    """
    if len(buffer) <= at:
        return None
    op = buffer[at]
    kinds = _FIELDS.get(op)
    if kinds is None:
        raise Refused("opcode", f"unknown request {op}")
    if not trusted and op not in _HANDSHAKE:
        raise Refused("no secret", f"request {op} before proving the run secret")
    fields: list[bytes] = []
    offset = at + 1
    for kind in kinds:
        if len(buffer) < offset + 4:
            return None
        (size,) = _U32.unpack_from(buffer, offset)
        _check_size(kind, size, limits)
        end = offset + 4 + size
        if len(buffer) < end:
            return None
        fields.append(bytes(buffer[offset + 4 : end]))
        offset = end
    return op, fields, offset


def _check_size(kind: str, size: int, limits: ServerLimits) -> None:
    if kind in (_INT, _PROOF):
        want = 8 if kind == _INT else 32
        if size != want:
            raise Refused(kind, f"an {kind} field of {size} bytes ({want} expected)")
        return
    bound = {
        _KEY: limits.max_key_bytes,
        _VALUE: limits.max_value_bytes,
        _KEYS: limits.max_keys_field_bytes,
    }[kind]
    if size > bound:
        raise Refused(f"{kind} size", f"a {kind} field of {size} bytes (at most {bound})")


def unpack_keys(packed: bytes, limits: ServerLimits) -> list[bytes]:
    """The keys of a packed-keys field, each and their count within ``limits``.

    Raises:
        Refused: truncated, too many keys, or a key too long.
    """
    keys: list[bytes] = []
    at = 0
    end = len(packed)
    while at < end:
        if end < at + 4:
            raise Refused("key list", "truncated key list")
        (size,) = _U32.unpack_from(packed, at)
        if size > limits.max_key_bytes:
            raise Refused("key size", f"a key of {size} bytes (at most {limits.max_key_bytes})")
        if end < at + 4 + size:
            raise Refused("key list", "truncated key list")
        if len(keys) >= limits.max_keys_per_request:
            raise Refused("key count", f"more than {limits.max_keys_per_request} keys at once")
        keys.append(packed[at + 4 : at + 4 + size])
        at += 4 + size
    return keys


__all__ = ["Conn", "Refused", "Waiter", "parse_request", "reply_value", "unpack_keys"]
