"""Our TCPStore server: tensorplay's wire format, persistent connections, waits held on the server.

tensorplay's own client implements a blocking wait by polling with a new connection every
≈12 ms, so a few hundred waiting agents overwhelm its server (docs/benchmarks.md). This server
speaks the same requests (any tensorplay TCPStore client can use it) and adds WAIT, WAIT_ANY and
MULTI_GET (:mod:`wire`): a WAIT is parked on the server and answered when its last missing key
is written (a WAIT_ANY when its first one is), waking only the waiters of that key, and a
connection serves any number of requests.

One thread runs a ``selectors`` loop over every connection; nothing blocks inside it. A
connection that sends bytes we cannot parse is closed (as tensorplay's server does), and the
rest carry on.
"""

from __future__ import annotations

import heapq
import itertools
import selectors
import socket
import threading
import time

from tpelastic.adapters.stores import wire
from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.adapters.stores.tcp_conn import Conn, Waiter, parse_request, reply_value

_PRESENT = bytes([wire.OK, 0])
_ABSENT = bytes([wire.OK, 1])
_BACKLOG = 4096
_RECV = 64 * 1024
_SEND_BUFFERS = 256  # buffers handed to one sendmsg call (the OS limit is 1024)
_ACCEPT_PAUSE = 0.1


class StoreServer:
    """A TCPStore-compatible server on a background thread.

    Args:
        host: the address to listen on (``0.0.0.0`` for every interface).
        port: the port; 0 lets the OS choose (read :attr:`port`).

    Raises:
        StoreUnavailable: the address cannot be bound (port in use, host not local).
    """

    def __init__(self, host: str, port: int) -> None:
        self._data: dict[bytes, bytes] = {}
        self._waiters: dict[bytes, list[Waiter]] = {}
        self._deadlines: list[tuple[float, int, Waiter]] = []
        self._seq = itertools.count()
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
                        self._service(selected.data, mask)
                now = time.monotonic()
                self._expire(now)
                if self._accept_resumes is not None and now >= self._accept_resumes:
                    self._accept_resumes = None
                    self._selector.register(self._listener, selectors.EVENT_READ, None)
        finally:
            self._close_all()

    def _next_timeout(self) -> float | None:
        while self._deadlines and self._deadlines[0][2].done:
            heapq.heappop(self._deadlines)  # answered already: drop the stale deadline
        wake = [t for t in (self._accept_resumes,) if t is not None]
        if self._deadlines:
            wake.append(self._deadlines[0][0])
        return max(0.0, min(wake) - time.monotonic()) if wake else None

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # Out of file descriptors: pending clients wait in the backlog. Stop listening
                # for a moment instead of spinning on a listener that stays readable.
                self._selector.unregister(self._listener)
                self._accept_resumes = time.monotonic() + _ACCEPT_PAUSE
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._selector.register(sock, selectors.EVENT_READ, Conn(sock))

    def _drain_wake(self) -> None:
        try:
            self._wake_r.recv(64)
        except OSError:
            pass

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
                self._process(conn)
        if mask & selectors.EVENT_WRITE and not conn.closed:
            self._flush(conn)

    def _process(self, conn: Conn) -> None:
        """Answer every whole request in the inbox, in order, until one parks a wait."""
        at = 0
        try:
            while conn.waiting is None and not conn.closed:
                parsed = parse_request(conn.inbox, at)
                if parsed is None:
                    break
                op, fields, at = parsed
                self._handle(conn, op, fields)
        except wire.WireError:
            self._drop(conn)
            return
        del conn.inbox[:at]
        self._flush(conn)

    def _flush(self, conn: Conn) -> None:
        if conn.closed:
            return
        queue = conn.queue
        if conn.outbox:
            queue.append(bytes(conn.outbox))
            conn.outbox.clear()
        while queue:
            try:
                sent = conn.sock.sendmsg(list(itertools.islice(queue, _SEND_BUFFERS)))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(conn)
                return
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

    def _drop(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        if conn.waiting is not None:
            conn.waiting.done = True  # its key lists drop it lazily
            conn.waiting = None
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _close_all(self) -> None:
        for key in list(self._selector.get_map().values()):
            if isinstance(key.data, Conn):
                self._drop(key.data)
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
            keys = wire.unpack_keys(fields[1])
            out += _PRESENT if all(k in data for k in keys) else _ABSENT
        elif op == wire.NUM_KEYS:
            out += b"\0" + wire.field(wire.int64(len(data)))
        elif op == wire.WAIT:
            self._park(conn, wire.unpack_keys(fields[0]), wire.decode_int64(fields[1]))
        elif op == wire.WAIT_ANY:
            keys = wire.unpack_keys(fields[0])
            self._park(conn, keys, wire.decode_int64(fields[1]), any_=True)
        else:  # MULTI_GET (_parse lets no other opcode through)
            out.append(wire.OK)
            for key in wire.unpack_keys(fields[0]):
                value = data.get(key)
                if value is None:
                    conn.outbox.append(0)
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
        for waiter in waiters:
            if waiter.done:
                continue
            waiter.missing.discard(key)
            if waiter.any_:
                # Answered: its other keys' lists must not keep it (they may never be written).
                self._unpark(waiter)
                self._answer(waiter, _PRESENT)
            elif not waiter.missing:
                self._answer(waiter, _PRESENT)

    def _park(self, conn: Conn, keys: list[bytes], timeout_ms: int, any_: bool = False) -> None:
        missing = {k for k in keys if k not in self._data}
        present = len(missing) < len(set(keys)) if any_ else not missing
        if present:
            conn.outbox += _PRESENT
            return
        if timeout_ms <= 0 or not missing:  # not missing here: WAIT_ANY of no keys
            conn.outbox += _ABSENT
            return
        waiter = Waiter(conn, missing, any_)
        conn.waiting = waiter
        for key in missing:
            self._waiters.setdefault(key, []).append(waiter)
        deadline = time.monotonic() + timeout_ms / 1000.0
        heapq.heappush(self._deadlines, (deadline, next(self._seq), waiter))

    def _answer(self, waiter: Waiter, reply: bytes) -> None:
        waiter.done = True
        conn = waiter.conn
        conn.waiting = None
        if conn.closed:
            return
        conn.outbox += reply
        self._process(conn)  # requests that arrived behind the wait, then flush

    def _expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, waiter = heapq.heappop(self._deadlines)
            if waiter.done:
                continue
            self._unpark(waiter)
            self._answer(waiter, _ABSENT)

    def _unpark(self, waiter: Waiter) -> None:
        """Take ``waiter`` off the lists of the keys it still waits for."""
        for key in waiter.missing:
            parked = self._waiters.get(key)
            if parked is not None:
                parked[:] = [w for w in parked if w is not waiter]
                if not parked:
                    del self._waiters[key]


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
