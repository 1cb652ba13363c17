"""TcpStoreClient: our own client for a TCPStore server, behind the KeyValueStore port.

It keeps its connections open (a small pool: one per call in flight, so a heartbeat thread is
never stuck behind a waiting thread) and blocks on the server: ``wait_for`` is one WAIT request
that our server (:mod:`tcp_server`) answers when the keys exist, ``wait_any`` one WAIT_ANY
answered when any of them does, and ``multi_get`` reads many keys in one round trip. Against
tensorplay's own server, which has none of these, it falls back to CHECK requests on its open
connection with a growing pause (1 ms doubling to 50 ms); that is still polling, but without
a new connection per look.

A client given an :class:`~tpelastic.core.store_outage.OutagePolicy` waits out a lost server:
once it has been connected, a refused or reset connection (the server's process is gone) and a
call that gets no answer for ``silent_after`` (it is paused; the call goes on waiting) are told
apart, and the core's
:mod:`~tpelastic.core.store_outage` decides how long each is retried with backoff; the first
failure of an outage is logged at once, then calls fail with the core's one-line reason.

Values are stored as tensorplay clients of our adapter store them (:mod:`escaping`), so a
``TensorplayStore`` and a ``TcpStoreClient`` on one server read each other's values. Nothing
read is unpickled or evaluated.
"""

from __future__ import annotations

import functools
import logging
import math
import socket
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.stores import escaping, wire
from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.adapters.stores.tcp_reader import (
    PeerClosed,
    Reader,
    expect_ok,
    read_present,
    read_values,
    status_then_field,
)
from tpelastic.core import store_outage
from tpelastic.core.store_outage import GiveUp, LossKind, Outage, OutagePolicy

log = logging.getLogger(__name__)
T = TypeVar("T")
# The longest single WAIT we send; longer waits are cut into slices (int64 ms is no limit, but
# a wait far beyond any deadline only hides bugs).
_WAIT_SLICE = 3600.0
_POLL_FIRST, _POLL_MOST = 0.001, 0.05
_CONNECT_PAUSE_FIRST, _CONNECT_PAUSE_MOST = 0.01, 0.5
_IDLE_KEPT = 4


class TcpStoreClient:
    """Talk to a TCPStore server (ours or tensorplay's) through persistent connections.

    Args:
        host: the server's address.
        port: the server's port.
        timeout: the read timeout in seconds: how long a call may take to connect (retrying a
            refused connection) and to get its answer, not counting the time a ``wait_for`` is
            asked to wait.
        server: a server this client owns; ``close`` stops it.
        outage: how long a lost server is waited out (None: a call fails at its first loss).
        clock: the monotonic clock the outage is timed on.
        secret: the run secret, proved to the server on every new connection (a server
            started with it serves nothing else; :mod:`wire`).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = 60.0,
        server: object | None = None,
        outage: OutagePolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
        secret: bytes | None = None,
    ) -> None:
        self._address = (host, int(port))
        self._secret = secret
        self._timeout = float(timeout)
        self._server = server
        self._where = f"tcp store {host}:{port}"
        self._idle: list[socket.socket] = []
        self._busy: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._plain: bool | None = None  # True: tensorplay's server (no WAIT / MULTI_GET)
        self._policy = outage
        self._clock = clock
        self._outage: Outage | None = None  # shared by every thread using this client
        self._connected_once = False  # after that, a refused connection means the server is gone
        self._closing = threading.Event()  # wakes a caller backing off when the client closes

    @property
    def where(self) -> str:
        return self._where

    @property
    def port(self) -> int:
        return self._address[1]

    @property
    def server(self) -> object | None:
        """The server this client owns (None for a plain client)."""
        return self._server

    def wait_until_alone(self, timeout: float, poll: float = 0.02) -> bool:
        """For a client that owns its server: wait until no other client is connected to it,
        at most ``timeout`` seconds. A host that ends the job waits so, until its peers have
        read how it ended and gone. True when alone (at once without a server of our own)."""
        usage = getattr(self._server, "usage", None)
        if usage is None:
            return True
        deadline = self._clock.now() + timeout
        while True:
            with self._lock:
                own = len(self._idle) + len(self._busy)
            if usage()["connections"] <= own:
                return True
            if self._clock.now() >= deadline:
                return False
            self._clock.sleep(poll)

    # -- connections --------------------------------------------------------------------------

    def _connect(self, deadline: float) -> socket.socket:
        pause = _CONNECT_PAUSE_FIRST
        while True:
            left = deadline - self._clock.now()
            try:
                sock = socket.create_connection(self._address, timeout=max(0.05, min(left, 5.0)))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as error:
                refused = isinstance(error, (ConnectionRefusedError, ConnectionResetError))
                left = deadline - self._clock.now()
                if refused and self._connected_once and not self._closed:
                    # It served us before: nothing listens there now. How long to wait that
                    # out is the outage policy's decision, not a retry hidden here.
                    raise StoreUnavailable(
                        f"{self._where}: could not connect: {error.strerror or error}",
                        loss="gone",
                    ) from error
                # Refused before the first connection is normal while the host agent starts
                # its server.
                if left <= 0 or self._closed:
                    raise StoreUnavailable(
                        f"{self._where}: could not connect: {error.strerror or error}"
                    ) from error
                self._clock.sleep(min(pause, left))
                pause = min(pause * 2, _CONNECT_PAUSE_MOST)
                continue
            self._connected_once = True
            if self._secret is not None:
                self._prove(sock, deadline)
            return sock

    def _prove(self, sock: socket.socket, deadline: float) -> None:
        """Show a new connection's server that we hold the run secret (CHALLENGE, PROVE).
        A refusal is no outage: it fails the call at once."""
        assert self._secret is not None
        step = "asked for its challenge"
        try:
            sock.sendall(wire.request(wire.CHALLENGE))
            nonce = status_then_field(
                Reader(sock, max(deadline, self._clock.now() + 1.0), clock=self._clock)
            )
            if nonce:
                step = "proved the run secret"
                sock.sendall(wire.request(wire.PROVE, wire.proof(self._secret, nonce)))
                expect_ok(
                    Reader(sock, max(deadline, self._clock.now() + 1.0), clock=self._clock).byte()
                )
        except (OSError, PeerClosed, wire.WireError) as error:
            sock.close()
            why = (
                "closed the connection (a different run secret, or a server without the "
                "handshake, e.g. tensorplay's)"
                if isinstance(error, PeerClosed)
                else str(error)
            )
            raise StoreUnavailable(f"{self._where}: {step}: the server {why}") from None

    def _take(self, deadline: float) -> tuple[socket.socket, bool]:
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"{self._where}: used after close", waited_out=True)
            sock = self._idle.pop() if self._idle else None
        fresh = sock is None
        if sock is None:
            sock = self._connect(deadline)
        with self._lock:
            self._busy.add(sock)
        return sock, fresh

    def _give_back(self, sock: socket.socket, healthy: bool) -> None:
        with self._lock:
            self._busy.discard(sock)
            if healthy and not self._closed and len(self._idle) < _IDLE_KEPT:
                self._idle.append(sock)
                return
        sock.close()

    def _exchange(
        self,
        what: str,
        payload: bytes,
        read: Callable[[Reader], T],
        *,
        idempotent: bool,
        wait: float = 0.0,
    ) -> T:
        """Send one request and read its reply; one retry on a fresh connection when a pooled
        one turns out dead and the request may safely be repeated."""
        started = self._clock.now()
        # Connecting is bounded by the read timeout alone; the answer may also take the wait.
        connect_by, deadline = started + self._timeout, started + self._timeout + wait
        while True:
            sock, fresh = self._take(connect_by)
            slow_at, on_slow = None, None
            if self._policy is not None and wait == 0:
                # Not a held wait: an answer this late means a silent server; say so now.
                slow_at = started + self._policy.silent_after
                on_slow = functools.partial(self._noticed_silence, started)
            try:
                sock.sendall(payload)
                result = read(
                    Reader(sock, deadline, slow_at=slow_at, on_slow=on_slow, clock=self._clock)
                )
            except PeerClosed as error:
                self._give_back(sock, healthy=False)
                if fresh or not idempotent:
                    raise PeerClosed(f"{self._where}: {what}: {error}") from None
                continue  # a stale pooled connection (server restarted): try a fresh one
            except (OSError, wire.WireError) as error:
                self._give_back(sock, healthy=False)
                if not fresh and idempotent and not isinstance(error, TimeoutError):
                    continue
                raise self._unavailable(what, error) from error
            self._give_back(sock, healthy=True)
            return result

    def _unavailable(self, what: str, error: BaseException) -> StoreUnavailable:
        if self._closed:
            return StoreUnavailable(f"{self._where}: {what} interrupted by close")
        if isinstance(error, TimeoutError):
            reason = f"{self._where}: {what} failed: no answer in time"
            return StoreUnavailable(reason, loss="silent")
        loss: LossKind | None = None if isinstance(error, wire.WireError) else "gone"
        return StoreUnavailable(f"{self._where}: {what} failed: {error}", loss=loss)

    def _waiting_out(self, attempt: Callable[[], T], *, idempotent: bool = True) -> T:
        """``attempt()``, retried through an outage as the core's outage policy says. A request
        that may not be repeated is not retried after a timeout (the server may still apply
        it); its failure still starts the outage."""
        tries = 0
        while True:
            try:
                result = attempt()
            except StoreUnavailable as error:
                loss = error.loss
                if self._policy is None or loss not in ("gone", "silent") or self._closed:
                    raise
                tries += 1
                with self._lock:
                    self._outage, verdict = store_outage.on_failure(
                        self._outage,
                        loss,  # type: ignore[arg-type]
                        self._clock.now(),
                        self._policy,
                        where=self._where,
                        tries=tries,
                    )
                if isinstance(verdict, GiveUp):
                    raise StoreUnavailable(verdict.reason, loss=loss, waited_out=True) from None
                if verdict.announce:
                    log.warning("%s", verdict.line)
                if not idempotent and loss == "silent":
                    raise
                if self._closing.wait(verdict.delay):
                    raise StoreUnavailable(f"{self._where}: interrupted by close") from None
                continue
            if self._outage is not None:
                self._outage_over()
            return result

    def _noticed_silence(self, started: float) -> None:
        assert self._policy is not None
        began = started  # the Reader times the call on this client's clock
        with self._lock:
            self._outage, line = store_outage.on_slow(
                self._outage, began, self._policy, where=self._where
            )
        if line is not None:
            log.warning("%s", line)

    def _outage_over(self) -> None:
        with self._lock:
            self._outage, lasted = store_outage.on_success(self._outage, self._clock.now())
        if lasted is not None:
            log.warning("%s answers again after %.1fs", self._where, lasted)

    def _call(
        self,
        what: str,
        payload: bytes,
        read: Callable[[Reader], T],
        *,
        idempotent: bool = True,
        wait: float = 0.0,
    ) -> T:
        def attempt() -> T:
            try:
                return self._exchange(what, payload, read, idempotent=idempotent, wait=wait)
            except PeerClosed as error:
                loss = "gone" if self._connected_once and not self._closed else None
                raise StoreUnavailable(str(error), loss=loss) from None

        return self._waiting_out(attempt, idempotent=idempotent)

    # -- the port -----------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        def read(reader: Reader) -> bytes | None:
            status = reader.byte()
            return None if status == wire.MISSING else escaping.decode(reader.field())

        return self._call(f"get {key!r}", wire.request(wire.GET, key.encode()), read)

    def set(self, key: str, value: bytes) -> None:
        payload = wire.request(wire.SET, key.encode(), escaping.encode(value))
        self._call(f"set {key!r}", payload, lambda r: expect_ok(r.byte()))

    def add(self, key: str, amount: int) -> int:
        payload = wire.request(wire.ADD, key.encode(), wire.int64(int(amount)))
        text = self._call(f"add {key!r}", payload, status_then_field, idempotent=False)
        return int(text)

    def set_if_absent(self, key: str, value: bytes) -> tuple[bool, bytes]:
        swapped, current = self.compare_and_set(key, None, value)
        assert current is not None  # swapped: our value; not swapped: the key exists
        return swapped, current

    def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes
    ) -> tuple[bool, bytes | None]:
        want = b"" if expected is None else escaping.encode(expected)
        payload = wire.request(wire.CAS, key.encode(), want, escaping.encode(value))
        before = self._call(
            f"compare_and_set {key!r}", payload, status_then_field, idempotent=False
        )
        if before == want:
            return True, bytes(value)
        return False, escaping.decode_current(before)

    def delete(self, key: str) -> None:
        payload = wire.request(wire.DELETE, key.encode())
        self._call(f"delete {key!r}", payload, lambda r: r.byte())  # 0 deleted, 1 was absent

    def wait_for(self, keys: Sequence[str], timeout: float) -> bool:
        wanted = list(keys)
        if not wanted:
            self._check_open()
            return True
        return self._held(wire.WAIT, "wait_for", wanted, timeout, self._check)

    def wait_any(self, keys: Sequence[str], timeout: float) -> bool:
        """Block until at least one of ``keys`` exists (True) or ``timeout`` seconds pass (False).

        Not part of the KeyValueStore port: the optional ``WaitAnyStore`` capability. On our
        server it is one WAIT_ANY request held there (a write of any listed key answers it at
        once); on tensorplay's server it polls like ``wait_for`` does. ``timeout <= 0`` only
        checks; no keys: False at once.

        Raises:
            StoreUnavailable: the server went away (or the client was closed) while waiting.
        """
        wanted = list(keys)
        if not wanted:
            self._check_open()
            return False
        return self._held(wire.WAIT_ANY, "wait_any", wanted, timeout, self._check_any)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable(f"{self._where}: used after close", waited_out=True)

    def _held(
        self,
        op: int,
        what: str,
        wanted: list[str],
        timeout: float,
        check: Callable[[list[str]], bool],
    ) -> bool:
        """One held request (WAIT or WAIT_ANY) in slices up to ``timeout``; ``check`` is one look
        (tensorplay's server, and the last look of a zero timeout)."""
        seconds = float(timeout)
        seconds = min(seconds, 1e9) if seconds > 0 else 0.0  # NaN and <= 0: only check
        self._check_open()
        deadline = self._clock.now() + seconds
        while True:
            if self._plain:
                return self._poll(wanted, deadline, check)
            if deadline - self._clock.now() <= 0:
                return check(wanted)
            try:
                present, last = self._waiting_out(
                    functools.partial(self._held_slice, op, f"{what} {wanted!r}", wanted, deadline)
                )
            except PeerClosed as error:
                self._learn_plain(error)
                continue
            self._plain = False
            if present or last:
                return present

    def _held_slice(
        self, op: int, what: str, wanted: list[str], deadline: float
    ) -> tuple[bool, bool]:
        """One slice of a held wait, up to ``deadline``: (present, whether it was the last)."""
        left = max(0.0, deadline - self._clock.now())
        slice_ = min(left, _WAIT_SLICE)
        payload = wire.request(op, wire.pack_keys(wanted), wire.int64(math.ceil(slice_ * 1000)))
        present = self._ours_or_learning(
            lambda: self._exchange(what, payload, read_present, idempotent=True, wait=slice_)
        )
        return present, slice_ >= left

    def _ours_or_learning(self, attempt: Callable[[], T]) -> T:
        """``attempt()`` of a request tensorplay's server does not know: a hang-up is a lost
        server once we know the server is ours, else it is left for :meth:`_learn_plain`."""
        try:
            return attempt()
        except PeerClosed as error:
            if self._plain is False and not self._closed:
                raise StoreUnavailable(str(error), loss="gone") from None
            raise

    def multi_get(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` (None where absent), in order, read in one round trip.

        Not part of the KeyValueStore port: an optional capability the rendezvous driver uses
        when a store offers it. Raises ``StoreUnavailable`` like the port's calls.
        """
        wanted = list(keys)
        if not self._plain:
            try:
                values = self._waiting_out(
                    lambda: self._ours_or_learning(
                        lambda: self._exchange(
                            "multi_get",
                            wire.request(wire.MULTI_GET, wire.pack_keys(wanted)),
                            lambda r: read_values(r, len(wanted)),
                            idempotent=True,
                        )
                    )
                )
            except PeerClosed as error:
                self._learn_plain(error)
            else:
                self._plain = False
                return values
        return [self.get(key) for key in wanted]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._closing.set()
            idle, busy = list(self._idle), list(self._busy)
            self._idle.clear()
        for sock in idle:
            sock.close()
        for sock in busy:  # wake calls blocked in a wait: they raise StoreUnavailable
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        stop = getattr(self._server, "stop", None)
        if stop is not None:
            try:
                stop()
            except Exception:  # close never raises (port contract)
                pass

    # -- tensorplay's server ------------------------------------------------------------------

    def _learn_plain(self, error: PeerClosed) -> None:
        """The server hung up on a request of ours on a fresh connection: tensorplay's server
        does that for requests it does not know. A server that really went away fails the
        CHECK that follows with StoreUnavailable."""
        if self._plain is False:
            raise StoreUnavailable(str(error)) from None
        self._plain = True

    def _check(self, keys: list[str]) -> bool:
        payload = wire.request(wire.CHECK, b"", wire.pack_keys(keys))
        return self._call(f"wait_for {keys!r}", payload, read_present)

    def _check_any(self, keys: list[str]) -> bool:
        return any(self._check([key]) for key in keys)

    def _poll(self, keys: list[str], deadline: float, check: Callable[[list[str]], bool]) -> bool:
        pause = _POLL_FIRST
        while True:
            if check(keys):
                return True
            left = deadline - self._clock.now()
            if left <= 0:
                return False
            self._clock.sleep(min(pause, left))
            pause = min(pause * 2, _POLL_MOST)

    def __repr__(self) -> str:
        return f"TcpStoreClient({self._where}, closed={self._closed})"


def connect(
    host: str,
    port: int,
    *,
    timeout: float = 60.0,
    outage: OutagePolicy | None = None,
    secret: bytes | None = None,
) -> TcpStoreClient:
    """A client of the TCPStore server at ``host:port`` (ours or tensorplay's; with ``secret``,
    ours started with the same secret).

    It connects on its first call; an unreachable server fails that call with
    ``StoreUnavailable`` after ``timeout`` seconds of retrying. ``outage``: how a server lost
    after that is waited out.
    """
    return TcpStoreClient(host, port, timeout=timeout, outage=outage, secret=secret)


def host(
    host: str,
    port: int,
    *,
    timeout: float = 60.0,
    outage: OutagePolicy | None = None,
    secret: bytes | None = None,
) -> TcpStoreClient:
    """Start our server on ``host:port`` (port 0: the OS picks) and return a client that owns it
    (``close`` stops the server; the port is ``client.port``). With ``secret``, the server
    serves only clients that prove it, this one included.

    Raises:
        StoreUnavailable: the address cannot be bound (port in use, host not local).
    """
    from tpelastic.adapters.stores.tcp_server import StoreServer

    server = StoreServer(host, port, secret=secret).start()
    return TcpStoreClient(
        host, server.port, timeout=timeout, server=server, outage=outage, secret=secret
    )


__all__ = ["TcpStoreClient", "connect", "host"]
