"""TensorplayStore against real failures: dead servers, other processes, bad paths."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tpelastic.adapters.stores import (
    StoreUnavailable,
    TensorplayStore,
    file_store,
    hash_store,
    tcp_store,
)

SERVER = """
import sys, time
from tpelastic.adapters.stores import tcp_store
store = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
print(store.raw.port, flush=True)
time.sleep(60)
"""

SETTER = """
import sys, time
from tpelastic.adapters.stores import file_store, tcp_store
kind, where, key = sys.argv[1:4]
if kind == "tcp":
    store = tcp_store("127.0.0.1", int(where), is_server=False, timeout=5.0)
else:
    store = file_store(where)
time.sleep(0.3)
print(time.monotonic(), flush=True)  # CLOCK_MONOTONIC is one clock for every process here
store.set(key, b"from another process")
"""


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def server_process():
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield proc, port
    finally:
        proc.kill()
        proc.wait(10)


def test_unreachable_server_fails_within_the_read_timeout() -> None:
    store = tcp_store("127.0.0.1", _closed_port(), is_server=False, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="could not connect") as caught:
        store.get("k")
    assert time.monotonic() - started < 3.0
    assert "\n" not in str(caught.value)
    assert "Expected" not in str(caught.value)  # the C++ assertion text is stripped


def test_server_killed_while_waiting_raises_not_hangs(server_process) -> None:
    proc, port = server_process
    store = tcp_store("127.0.0.1", port, is_server=False, timeout=1.0)
    store.set("k", b"1")
    outcome: dict[str, object] = {}

    def waiter() -> None:
        started = time.monotonic()
        try:
            outcome["result"] = store.wait_for(["never"], 30.0)
        except StoreUnavailable as error:
            outcome["error"] = error
        outcome["spent"] = time.monotonic() - started

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    thread.join(10.0)
    assert isinstance(outcome.get("error"), StoreUnavailable), outcome
    assert outcome["spent"] < 5.0  # the read timeout (1 s) plus slack, not the 30 s wait
    with pytest.raises(StoreUnavailable):
        store.set("k", b"2")


def test_stopped_server_is_bounded_by_the_read_timeout(server_process) -> None:
    proc, port = server_process
    store = tcp_store("127.0.0.1", port, is_server=False, timeout=1.0)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            store.add("n", 1)
        assert time.monotonic() - started < 4.0
    finally:
        os.kill(proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("kind", ["tcp", "file"])
def test_wait_for_wakes_when_another_process_sets_the_key(kind: str, tmp_path: Path) -> None:
    if kind == "tcp":
        store = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
        where = str(store.raw.port)
    else:
        where = str(tmp_path / "store")
        store = file_store(where)
    try:
        setter = subprocess.Popen(
            [sys.executable, "-c", SETTER, kind, where, "news"], stdout=subprocess.PIPE, text=True
        )
        assert store.wait_for(["news"], 20.0)
        woke = time.monotonic()
        out, _ = setter.communicate(timeout=20)
        assert setter.returncode == 0
        assert store.get("news") == b"from another process"
        # Woken by the write itself, not by a coarse poll or the 20 s timeout.
        assert woke - float(out) < 0.5
    finally:
        store.close()


def test_busy_port_is_one_line_store_unavailable() -> None:
    first = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    try:
        with pytest.raises(StoreUnavailable, match=r"cannot listen on 127\.0\.0\.1:\d+") as caught:
            tcp_store("127.0.0.1", int(first.raw.port), is_server=True, timeout=5.0)
        assert "\n" not in str(caught.value)
    finally:
        first.close()


def test_server_close_stops_the_server_and_is_idempotent() -> None:
    server = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    client = tcp_store("127.0.0.1", int(server.raw.port), is_server=False, timeout=0.5)
    client.set("k", b"1")
    server.close()
    server.close()
    with pytest.raises(StoreUnavailable):
        client.get("k")
    client.close()
    client.close()


def test_file_store_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="file store"):
        file_store(str(tmp_path / "no" / "such" / "dir" / "store"))
    with pytest.raises(StoreUnavailable):
        file_store(str(tmp_path))  # a directory, not a file
    path = tmp_path / "store"
    store = file_store(str(path))
    store.set("k", b"1")
    path.unlink()
    with pytest.raises(StoreUnavailable):
        store.get("k")


def test_ordinary_values_are_stored_raw_and_empty_values_escaped() -> None:
    # Other tensorplay clients (workers) must read our ordinary values unchanged.
    store: TensorplayStore = hash_store()
    store.set("json", b'{"a": 1}')
    assert store.raw.get("json", timeout=0) == b'{"a": 1}'
    store.set("empty", b"")
    assert store.raw.get("empty", timeout=0) != b""  # raw b"" would read as absent in a CAS
    assert store.get("empty") == b""
    assert store.add("count", 2) == 2
    assert store.raw.get("count", timeout=0) == b"2"
