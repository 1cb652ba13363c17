"""A live ``tpelastic store`` in a subprocess (so its RSS is its own), raw connections to it, and
the check that it still serves a correct client."""

from __future__ import annotations

import itertools
import os
import resource
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable

import psutil

from tpelastic.adapters.stores import wire
from tpelastic.adapters.stores.tcp_client import TcpStoreClient

MIB = 1024 * 1024
# The target of the store's limits: whatever clients send, the server stays under this.
RSS_BOUND = 100 * MIB
_I64 = struct.Struct("<q")
_names = itertools.count()


class LiveStore:
    """``python -m tpelastic store --port 0`` (default host) in a subprocess we own."""

    def __init__(self, open_files: int | None = None, env: dict[str, str] | None = None) -> None:
        def limit_files() -> None:
            if open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tpelastic", "store", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=limit_files,
            env={**os.environ, **(env or {})},
        )
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(30.0):
                self.stop()
                raise AssertionError("tpelastic store printed no ready line within 30 s")
        self.ready_line = self.proc.stdout.readline().strip()
        self.host, port = self.ready_line.rsplit(" ", 1)[1].rsplit(":", 1)
        self.port = int(port)
        self.process = psutil.Process(self.proc.pid)

    def rss(self) -> int:
        return int(self.process.memory_info().rss)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def client(self, timeout: float = 10.0) -> TcpStoreClient:
        return TcpStoreClient("127.0.0.1", self.port, timeout=timeout)

    def serves_correctly(self) -> None:
        """A correct client's set, get, add, wait and multi_get get right answers."""
        client = self.client()
        try:
            key = f"check/{next(_names)}"
            client.set(key, b"value")
            assert client.get(key) == b"value"
            assert client.add(key + "/n", 2) == 2
            assert client.wait_for([key], 5.0)
            assert not client.wait_for([key + "/absent"], 0.05)
            assert client.multi_get([key, key + "/absent"]) == [b"value", None]
        finally:
            client.close()

    def stop(self) -> str:
        """SIGTERM, then the server's stderr (it must exit 0 within 10 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError("tpelastic store ignored SIGTERM for 10 s") from None
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc.stderr.close()
        return err


def raw(port: int, timeout: float = 5.0) -> socket.socket:
    """A raw connection whose close is a reset (no TIME_WAIT left on this host's ports)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return sock


def send_quietly(sock: socket.socket, data: bytes) -> bool:
    """Send what the server takes; False once it closed the connection (or stopped reading)."""
    try:
        sock.sendall(data)
    except OSError:  # reset, broken pipe, or our timeout because the server stopped reading
        return False
    return True


def closed_by_server(sock: socket.socket, within: float = 10.0) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (replies are drained)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(1 << 20):
                return True
        except TimeoutError:
            return False
        except OSError:
            return True
    return False


def wait_request(keys: list[bytes], timeout_ms: int, op: int = wire.WAIT) -> bytes:
    packed = b"".join(wire.field(k) for k in keys)
    return wire.request(op, packed, _I64.pack(timeout_ms))


def settle_rss(live: LiveStore, seconds: float = 3.0) -> int:
    """The server's RSS once it stops falling (freed buffers go back to the OS lazily)."""
    deadline = time.monotonic() + seconds
    low = live.rss()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        low = min(low, live.rss())
    return low


def peak_rss_during(live: LiveStore, attack: Callable[[], None]) -> int:
    """Run ``attack`` in this thread while a sampler notes the server's highest RSS."""
    import threading

    peak = [live.rss()]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                peak[0] = max(peak[0], live.rss())
            except psutil.Error:
                return
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        attack()
    finally:
        done.set()
        sampler.join(5)
    return max(peak[0], live.rss())
