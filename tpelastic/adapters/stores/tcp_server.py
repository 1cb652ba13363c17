"""Our TCPStore server: tensorplay's wire format, persistent connections, waits held on the server.

tensorplay's own client implements a blocking wait by polling with a new connection every
≈12 ms, so a few hundred waiting agents overwhelm its server (docs/benchmarks.md). This server
speaks the same requests (any tensorplay TCPStore client can use it) and adds WAIT, WAIT_ANY and
MULTI_GET (:mod:`wire`): a WAIT is parked on the server and answered when its last missing key
is written (a WAIT_ANY when its first one is), waking only the waiters of that key, and a
connection serves any number of requests.

One thread runs a ``selectors`` loop over every connection; nothing blocks inside it. Whatever a
client sends is bounded (:mod:`limits`): a request past a bound, or bytes we cannot parse, close
that connection (as tensorplay's server does) and the rest carry on. A failure while serving one
connection closes that connection and is logged; it never ends the loop.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.stores import wire
from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.adapters.stores.limits import DEFAULT_LIMITS, ServerLimits
from tpelastic.adapters.stores.tcp_conn import (
    Conn,
    Refused,
    Waiter,
    parse_request,
    reply_value,
    unpack_keys,
)

_log = logging.getLogger(__name__)

_PRESENT = bytes([wire.OK, 0])
_ABSENT = bytes([wire.OK, 1])
_BACKLOG = 4096
_RECV = 64 * 1024
_SEND_BUFFERS = 256  # buffers handed to one sendmsg call (the OS limit is 1024)
_ACCEPT_PAUSE = 0.1
_LONGEST_SELECT = 3600.0
_INT64 = range(-(2**63), 2**63)
# Out of descriptors (or kernel memory): stop accepting for a moment, the backlog holds clients.
_ACCEPT_EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# Deadlines of waits answered otherwise stay in the heap until they come up; past this many (and
# half the heap) it is rebuilt without them.
_STALE_REBUILD = 1024


class StoreServer:
    """A TCPStore-compatible server on a background thread.

    Args:
        host: the address to listen on (``0.0.0.0`` for every interface).
        port: the port; 0 lets the OS choose (read :attr:`port`).
        limits: what clients may send and make the server hold (:class:`ServerLimits`).
        secret: the run secret; with one, a connection is served only once it proved it
            holds it (CHALLENGE, then PROVE: :mod:`wire`), and anything else closes it.

    Raises:
        StoreUnavailable: the address cannot be bound (port in use, host not local).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        limits: ServerLimits = DEFAULT_LIMITS,
        secret: bytes | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self._limits = limits
        self._secret = secret
        self._data: dict[bytes, bytes] = {}
        # key -> the waits parked on it (a dict for its order and O(1) removal)
        self._waiters: dict[bytes, dict[Waiter, None]] = {}
        self._parked_keys = 0
        self._deadlines: list[tuple[float, int, Waiter]] = []
        self._stale = 0
        self._seq = itertools.count()
        self._conns: set[Conn] = set()
        self._per_peer: dict[str, int] = {}
        self._buffered = 0
        self._ready: list[Conn] = []  # answered waits whose connection has more to do
        self._closures: dict[str, int] = {}
        self._listener = _listen(host, port)
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._chunk = bytearray(_RECV)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stopping = False
        self._accept_resumes: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"tpelastic-store-{self.port}")
        self._thread.daemon = True

    def start(self) -> StoreServer:
        """Serve on the background thread; returns self.

        Also raises this process's soft limit of open files to its hard limit: every agent
        holds one or two connections, and the usual soft limit (1,024) would cap a job at a
        few hundred nodes. When the limit is reached anyway, the server stops accepting for
        0.1 s at a time and the clients wait in the backlog (their connect is bounded by their
        read timeout).
        """
        raise_open_file_limit()
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close every connection (clients then fail fast). Idempotent.

        Waits at most ``timeout`` seconds for the thread; the thread is a daemon either way.
        """
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def limits(self) -> ServerLimits:
        return self._limits

    def usage(self) -> dict[str, int]:
        """What the server holds for its clients now (read from another thread: a snapshot
        that may be a step behind). ``closed_<kind>`` counts connections closed for a bound."""
        held = {
            "connections": len(self._conns),
            "parked_keys": self._parked_keys,
            "parked_waits": sum(1 for c in list(self._conns) if c.waiting is not None),
            "deadlines": len(self._deadlines),
            "buffered_bytes": self._buffered,
        }
        held.update({f"closed_{kind}": n for kind, n in list(self._closures.items())})
        return held

    # -- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping:
                for selected, mask in self._selector.select(self._next_timeout()):
                    if selected.data is None:
                        self._accept()
                    elif selected.data == "wake":
                        self._drain_wake()
                    else:
                        self._guarded(selected.data, self._service, mask)
                    self._run_ready()
                now = self._clock.now()
                self._expire(now)
                self._run_ready()
                if self._accept_resumes is not None and now >= self._accept_resumes:
                    self._accept_resumes = None
                    self._selector.register(self._listener, selectors.EVENT_READ, None)
        finally:
            self._close_all()

    def _guarded(self, conn: Conn, work: Callable[..., None], *args: int) -> None:
        """``work(conn, *args)``; if it fails, that connection is closed, never the loop."""
        try:
            work(conn, *args)
            self._account(conn)
        except Refused as refused:
            self._close_for(conn, refused.kind, str(refused))
        except Exception as error:  # whatever one request does, the others are served
            kind = f"crash {type(error).__name__}"
            self._close_for(conn, kind, f"serving it failed: {type(error).__name__}: {error}")

    def _run_ready(self) -> None:
        while self._ready:
            ready, self._ready = self._ready, []
            for conn in ready:
                if not conn.closed:
                    self._guarded(conn, self._process)

    def _next_timeout(self) -> float:
        heap = self._deadlines
        while heap and heap[0][2].done:
            heapq.heappop(heap)  # answered already: drop the stale deadline
            self._stale -= 1
        if self._stale > _STALE_REBUILD and self._stale * 2 > len(heap):
            self._deadlines = [entry for entry in heap if not entry[2].done]
            heapq.heapify(self._deadlines)
            self._stale = 0
        wake = [t for t in (self._accept_resumes,) if t is not None]
        if self._deadlines:
            wake.append(self._deadlines[0][0])
        if not wake:
            return _LONGEST_SELECT
        return min(_LONGEST_SELECT, max(0.0, min(wake) - self._clock.now()))

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as error:
                if error.errno not in _ACCEPT_EXHAUSTED:
                    _log.warning("store server: accept failed: %s", error)
                # Pending clients wait in the backlog. Stop listening for a moment instead of
                # spinning on a listener that stays readable.
                self._selector.unregister(self._listener)
                self._accept_resumes = self._clock.now() + _ACCEPT_PAUSE
                return
            peer = str(address[0]) if isinstance(address, tuple) else str(address)
            if self._per_peer.get(peer, 0) >= self._limits.max_connections_per_peer:
                sock.close()
                self._note(
                    "connections per peer",
                    peer,
                    f"more than {self._limits.max_connections_per_peer} connections at once",
                )
                continue
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                sock.close()  # reset before we got to it
                continue
            conn = Conn(sock, peer, trusted=self._secret is None)
            self._conns.add(conn)
            self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _drain_wake(self) -> None:
        try:
            self._wake_r.recv(64)
        except OSError:
            pass

    def _blocked(self, conn: Conn) -> bool:
        """Whether ``conn``'s next request must wait (a parked wait, or unread replies)."""
        return conn.waiting is not None or conn.unsent() >= self._limits.max_unread_reply_bytes

    def _service(self, conn: Conn, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            try:
                got: int | None = conn.sock.recv_into(self._chunk)
            except (BlockingIOError, InterruptedError):
                got = None
            except OSError:
                got = 0
            if got == 0:
                self._drop(conn)
                return
            if got:
                conn.inbox += memoryview(self._chunk)[:got]
                if self._blocked(conn) and len(conn.inbox) > self._limits.max_pipelined_bytes:
                    raise Refused(
                        "pipelined bytes",
                        f"more than {self._limits.max_pipelined_bytes} bytes of requests "
                        "behind one not yet answered",
                    )
                self._account(conn)
                if self._buffered > self._limits.max_buffered_bytes:
                    self._shed()
                    if conn.closed:
                        return
                self._process(conn)
        if mask & selectors.EVENT_WRITE and not conn.closed:
            self._flush(conn)
            if conn.inbox and not self._blocked(conn):
                self._process(conn)  # requests held back while the client did not read

    def _process(self, conn: Conn) -> None:
        """Answer every whole request in the inbox, in order, until one must wait."""
        at = 0
        inbox = conn.inbox
        try:
            while not conn.closed and not self._blocked(conn):
                parsed = parse_request(inbox, at, self._limits, conn.trusted)
                if parsed is None:
                    break
                op, fields, at = parsed
                self._handle(conn, op, fields)
        except Refused as refused:
            self._close_for(conn, refused.kind, str(refused))
            return
        except wire.WireError as error:
            self._close_for(conn, "malformed", str(error))
            return
        if conn.closed:
            return
        del inbox[:at]
        held_back = self._blocked(conn)
        self._flush(conn)
        if held_back and inbox and not self._blocked(conn):
            self._ready.append(conn)  # the client read its replies as fast as we sent them

    def _flush(self, conn: Conn) -> None:
        if conn.closed:
            return
        queue = conn.queue
        if conn.outbox:
            queue.append(bytes(conn.outbox))
            conn.queued += len(conn.outbox)
            conn.outbox.clear()
        while queue:
            try:
                sent = conn.sock.sendmsg(list(itertools.islice(queue, _SEND_BUFFERS)))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(conn)
                return
            conn.queued -= sent
            while sent:
                head = queue[0]
                if len(head) <= sent:
                    sent -= len(head)
                    queue.popleft()
                else:
                    queue[0] = memoryview(head)[sent:]
                    sent = 0
        wants_write = bool(queue)
        if wants_write != conn.writing:
            conn.writing = wants_write
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if wants_write else 0)
            self._selector.modify(conn.sock, events, conn)

    def _account(self, conn: Conn) -> None:
        held = 0 if conn.closed else conn.held()
        self._buffered += held - conn.counted
        conn.counted = held

    def _shed(self) -> None:
        """Over the budget of buffered bytes: close the connection holding the most."""
        biggest = max(self._conns, key=Conn.held)
        self._close_for(
            biggest,
            "buffered bytes",
            f"it held {biggest.held()} of {self._buffered} buffered bytes, over the server's "
            f"{self._limits.max_buffered_bytes}",
        )

    def _close_for(self, conn: Conn, kind: str, why: str) -> None:
        self._note(kind, conn.peer, why)
        self._drop(conn)

    def _note(self, kind: str, peer: str, why: str) -> None:
        seen = self._closures.get(kind, 0)
        self._closures[kind] = seen + 1
        if not seen:
            _log.warning(
                "store server: closed a connection from %s: %s (further ones for this reason "
                "are counted, not logged)",
                peer,
                why,
            )

    def _drop(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        waiter = conn.waiting
        if waiter is not None:
            self._unpark(waiter)
            waiter.done = True
            self._stale += 1
        self._conns.discard(conn)
        left = self._per_peer.get(conn.peer, 1) - 1
        if left > 0:
            self._per_peer[conn.peer] = left
        else:
            self._per_peer.pop(conn.peer, None)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        conn.release()
        self._account(conn)

    def _close_all(self) -> None:
        for conn in list(self._conns):
            self._drop(conn)
        self._selector.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    # -- requests -----------------------------------------------------------------------------

    def _handle(self, conn: Conn, op: int, fields: list[bytes]) -> None:
        out = conn.outbox
        data = self._data
        if op == wire.SET:
            self._write(fields[0], fields[1])
            out.append(wire.OK)
        elif op == wire.GET:
            value = data.get(fields[0])
            if value is None:
                out.append(wire.MISSING)
            else:
                reply_value(conn, b"\0", value)
        elif op == wire.ADD:
            total = wire.counter_value(data.get(fields[0])) + wire.decode_int64(fields[1])
            if total not in _INT64:
                raise Refused("counter range", f"ADD makes {fields[0]!r} leave the int64 range")
            text = str(total).encode()
            self._write(fields[0], text)
            out += b"\0" + wire.field(text)
        elif op == wire.HAS:
            out.append(wire.OK if fields[0] in data else wire.MISSING)
        elif op == wire.CAS:
            out += b"\0" + wire.field(self._compare_and_swap(*fields))
        elif op == wire.DELETE:
            out.append(wire.MISSING if data.pop(fields[0], None) is None else wire.OK)
        elif op == wire.CHECK:
            keys = unpack_keys(fields[1], self._limits)
            out += _PRESENT if all(k in data for k in keys) else _ABSENT
        elif op == wire.NUM_KEYS:
            out += b"\0" + wire.field(wire.int64(len(data)))
        elif op == wire.WAIT:
            self._park(conn, fields[0], wire.decode_int64(fields[1]))
        elif op == wire.WAIT_ANY:
            self._park(conn, fields[0], wire.decode_int64(fields[1]), any_=True)
        elif op == wire.MULTI_GET:
            self._multi_get(conn, unpack_keys(fields[0], self._limits))
        elif op == wire.CHALLENGE:
            conn.nonce = os.urandom(32) if self._secret is not None else b""
            out += b"\0" + wire.field(conn.nonce)
        else:  # PROVE (parse_request lets no other opcode through)
            if self._secret is not None and not (
                conn.nonce and wire.proof_matches(fields[0], self._secret, conn.nonce)
            ):
                raise Refused("wrong secret", "its PROVE does not match the run secret")
            conn.trusted = True
            conn.nonce = b""
            out.append(wire.OK)

    def _multi_get(self, conn: Conn, keys: list[bytes]) -> None:
        values = [self._data.get(key) for key in keys]
        size = 1 + sum(1 if value is None else 5 + len(value) for value in values)
        if size > self._limits.max_reply_bytes:
            raise Refused(
                "reply size",
                f"a MULTI_GET reply of {size} bytes (at most {self._limits.max_reply_bytes})",
            )
        out = conn.outbox
        out.append(wire.OK)
        for value in values:
            if value is None:
                out.append(0)
            else:
                reply_value(conn, b"\1", value)

    def _compare_and_swap(self, key: bytes, expected: bytes, new: bytes) -> bytes:
        before = self._data.get(key)
        if (before is None and expected == b"") or (before is not None and before == expected):
            self._write(key, new)
        return b"" if before is None else before

    def _write(self, key: bytes, value: bytes) -> None:
        self._data[key] = value
        waiters = self._waiters.pop(key, None)
        if not waiters:
            return
        self._parked_keys -= len(waiters)
        for waiter in waiters:
            waiter.missing.discard(key)
            if waiter.any_:
                # Answered: its other keys' lists must not keep it (they may never be written).
                self._unpark(waiter)
                self._answer(waiter, _PRESENT)
            elif not waiter.missing:
                self._answer(waiter, _PRESENT)

    def _park(self, conn: Conn, packed: bytes, timeout_ms: int, any_: bool = False) -> None:
        keys = unpack_keys(packed, self._limits)
        missing = {k for k in keys if k not in self._data}
        present = len(missing) < len(set(keys)) if any_ else not missing
        if present:
            conn.outbox += _PRESENT
            return
        if timeout_ms <= 0 or not missing:  # not missing here: WAIT_ANY of no keys
            conn.outbox += _ABSENT
            return
        if self._parked_keys + len(missing) > self._limits.max_parked_keys:
            raise Refused(
                "parked keys",
                f"a wait on {len(missing)} keys with {self._parked_keys} parked already "
                f"(at most {self._limits.max_parked_keys})",
            )
        waiter = Waiter(conn, missing, any_)
        conn.waiting = waiter
        for key in missing:
            self._waiters.setdefault(key, {})[waiter] = None
        self._parked_keys += len(missing)
        seconds = min(timeout_ms, self._limits.max_wait_ms) / 1000.0
        heapq.heappush(self._deadlines, (self._clock.now() + seconds, next(self._seq), waiter))

    def _answer(self, waiter: Waiter, reply: bytes) -> None:
        waiter.done = True
        conn = waiter.conn
        conn.waiting = None
        if conn.closed:
            return
        conn.outbox += reply
        self._ready.append(conn)  # requests that arrived behind the wait, then flush

    def _expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, waiter = heapq.heappop(self._deadlines)
            if waiter.done:
                self._stale -= 1
                continue
            self._unpark(waiter)
            self._answer(waiter, _ABSENT)

    def _unpark(self, waiter: Waiter) -> None:
        """Take ``waiter`` off the lists of the keys it still waits for."""
        for key in waiter.missing:
            parked = self._waiters.get(key)
            if parked is not None and parked.pop(waiter, 0) is None:
                self._parked_keys -= 1
                if not parked:
                    del self._waiters[key]
        waiter.missing = set()


def raise_open_file_limit() -> None:
    """Raise the soft limit of open files to the hard limit (no-op where unsupported)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass  # a limit we may not raise: the server still works, up to it


def _listen(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        listener = socket.socket(family, kind, proto)
    except OSError as error:
        raise StoreUnavailable(f"cannot listen on {host}:{port}: {error}") from error
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(_BACKLOG)
        listener.setblocking(False)
    except OSError as error:
        listener.close()
        raise StoreUnavailable(
            f"cannot listen on {host}:{port} (port in use or host not local): {error}"
        ) from error
    return listener


__all__ = ["StoreServer"]
