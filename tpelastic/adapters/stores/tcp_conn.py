"""One connection of our TCPStore server: its buffers and parked wait, how a request is parsed
from its bytes and how a reply with a value is framed (split from :mod:`tcp_server`, which runs
the loop and the store itself)."""

from __future__ import annotations

import socket
import struct
from collections import deque

from tpelastic.adapters.stores import wire

# Requests and how many fields each carries.
_FIELDS = {
    wire.SET: 2,
    wire.GET: 1,
    wire.ADD: 2,
    wire.HAS: 1,
    wire.CAS: 3,
    wire.DELETE: 1,
    wire.CHECK: 2,
    wire.NUM_KEYS: 0,
    wire.WAIT: 2,
    wire.MULTI_GET: 1,
    wire.WAIT_ANY: 2,
}
# Values at least this long are queued as they are, not copied into the reply buffer: a round's
# result (O(N) bytes) goes to every member, which is most of the bytes this server sends.
_BIG = 8192
_U32 = struct.Struct("<I")


class Conn:
    """One client connection: bytes not yet parsed, bytes not yet sent, a parked wait.

    Replies collect in ``outbox`` (small pieces) and ``queue`` (whole buffers sent as they are,
    so a large value is never copied in this process).
    """

    __slots__ = ("sock", "inbox", "outbox", "queue", "waiting", "closed", "writing")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.queue: deque[bytes | memoryview] = deque()
        self.waiting: Waiter | None = None
        self.closed = False
        self.writing = False


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
    conn.queue.append(bytes(conn.outbox))
    conn.outbox.clear()
    conn.queue.append(value)


def parse_request(buffer: bytearray, at: int) -> tuple[int, list[bytes], int] | None:
    """The request at ``at``: (op, fields, offset after it), or None when it is incomplete.

    Raises:
        wire.WireError: an unknown opcode or an oversized field.
    """
    if len(buffer) <= at:
        return None
    op = buffer[at]
    count = _FIELDS.get(op)
    if count is None:
        raise wire.WireError(f"unknown request {op}")
    fields: list[bytes] = []
    offset = at + 1
    for _ in range(count):
        got = wire.read_field(buffer, offset)
        if got is None:
            return None
        value, offset = got
        fields.append(value)
    return op, fields, offset


__all__ = ["Conn", "Waiter", "parse_request", "reply_value"]
