"""Reading one reply of a TCPStore server from a blocking socket, never past a deadline.

Split from the client (:mod:`tcp_client`) so that the wire-level reading, which has to deal
with partial reads, resets and large values, sits in one place of its own.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.stores import escaping, wire

_U32 = struct.Struct("<I")


class PeerClosed(Exception):
    """The server closed the connection before answering (sent: whether the request went out)."""


class Reader:
    """Reads a reply from a blocking socket, never past ``deadline`` (an instant on ``clock``).

    With ``slow_at``, ``on_slow()`` is called once when no reply has come by then (the read
    goes on until ``deadline``): the caller says at once that the server is silent.
    """

    __slots__ = ("sock", "deadline", "buf", "slow_at", "on_slow", "clock")

    def __init__(
        self,
        sock: socket.socket,
        deadline: float,
        *,
        slow_at: float | None = None,
        on_slow: Callable[[], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.sock = sock
        self.clock = clock
        self.deadline = deadline
        self.buf = bytearray()
        self.slow_at = slow_at if on_slow is not None else None
        self.on_slow = on_slow

    def _left(self) -> float:
        left = self.deadline - self.clock.now()
        if left <= 0:
            raise TimeoutError("no answer in time")
        return left

    def _recv_into(self, view: memoryview) -> int:
        while True:
            left, slow_at = self._left(), self.slow_at
            if slow_at is not None and slow_at - self.clock.now() <= 0:
                self.slow_at = None
                if self.on_slow is not None:
                    self.on_slow()
                continue
            wake = left if slow_at is None else min(left, slow_at - self.clock.now())
            self.sock.settimeout(max(wake, 0.001))
            try:
                got = self.sock.recv_into(view)
            except ConnectionResetError:
                got = 0  # a close with our request unread arrives as a reset
            except TimeoutError:
                if slow_at is None:
                    raise
                continue  # slow, or at the deadline: the top of the loop tells which
            break
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
