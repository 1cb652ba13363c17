"""Reading one reply of a TCPStore server from a blocking socket, never past a deadline.

Split from the client (:mod:`tcp_client`) so that the wire-level reading, which has to deal
with partial reads, resets and large values, sits in one place of its own.
"""

from __future__ import annotations

import socket
import struct
import time

from tpelastic.adapters.stores import escaping, wire

_U32 = struct.Struct("<I")


class PeerClosed(Exception):
    """The server closed the connection before answering (sent: whether the request went out)."""


class Reader:
    """Reads a reply from a blocking socket, never past ``deadline`` (time.monotonic)."""

    __slots__ = ("sock", "deadline", "buf")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer in time")
        return left

    def _recv_into(self, view: memoryview) -> int:
        self.sock.settimeout(self._left())
        try:
            got = self.sock.recv_into(view)
        except ConnectionResetError:
            got = 0  # a close with our request unread arrives as a reset
        if not got:
            raise PeerClosed("the server closed the connection")
        return got

    def _fill(self, need: int) -> None:
        while len(self.buf) < need:
            chunk = bytearray(max(4096, need - len(self.buf)))
            got = self._recv_into(memoryview(chunk))
            self.buf += memoryview(chunk)[:got]

    def byte(self) -> int:
        self._fill(1)
        value = self.buf[0]
        del self.buf[:1]
        return value

    def field(self) -> bytes:
        self._fill(4)
        (size,) = _U32.unpack_from(self.buf)
        if size > wire.MAX_FIELD:
            raise wire.WireError(f"reply field of {size} bytes")
        del self.buf[:4]
        if len(self.buf) >= size:
            value = bytes(self.buf[:size])
            del self.buf[:size]
            return value
        # A large value (a round's result): read it straight into its own buffer; recv_into
        # never reads past the field's end, so what follows stays on the socket.
        out = bytearray(size)
        have = len(self.buf)
        out[:have] = self.buf
        self.buf.clear()
        view = memoryview(out)
        while have < size:
            have += self._recv_into(view[have:])
        return bytes(out)


def status_then_field(reader: Reader) -> bytes:
    expect_ok(reader.byte())
    return reader.field()


def expect_ok(status: int) -> None:
    if status != wire.OK:
        raise wire.WireError(f"unexpected status {status}")


def read_present(reader: Reader) -> bool:
    expect_ok(reader.byte())
    return reader.byte() == 0


def read_values(reader: Reader, count: int) -> list[bytes | None]:
    expect_ok(reader.byte())
    out: list[bytes | None] = []
    for _ in range(count):
        out.append(escaping.decode(reader.field()) if reader.byte() else None)
    return out


__all__ = ["PeerClosed", "Reader", "expect_ok", "read_present", "read_values", "status_then_field"]
