"""Our TCPStore server and client (tcp_server.py, tcp_client.py): the shipped conformance suite,
wire compatibility with tensorplay's TCPStore both ways, waits held on the server, and failure
behaviour (a dead server, close during a wait, garbage on the wire, no leaked threads)."""

from __future__ import annotations

import itertools
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import psutil
import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.stores import PrefixedStore, StoreUnavailable, tcp_store
from tpelastic.adapters.stores.tcp_client import TcpStoreClient, connect, host
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.testing import store_contract as contract

_counter = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[StoreServer]:
    served = StoreServer("127.0.0.1", 0).start()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def tensorplay_server() -> Iterator[int]:
    hosted = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    yield int(hosted.raw.port)
    hosted.close()


def _fresh(port: int) -> Callable[[], KeyValueStore]:
    def make() -> KeyValueStore:
        return PrefixedStore(connect("127.0.0.1", port, timeout=5.0), f"c{next(_counter)}")

    return make


FACTORIES = ("ours", "ours-own-server", "ours-on-tensorplay-server")


@pytest.fixture(params=FACTORIES)
def factory(
    request: pytest.FixtureRequest, server: StoreServer, tensorplay_server: int
) -> Callable[[], KeyValueStore]:
    if request.param == "ours":
        return _fresh(server.port)
    if request.param == "ours-own-server":
        return lambda: host("127.0.0.1", 0, timeout=5.0)
    return _fresh(tensorplay_server)


@pytest.mark.parametrize("check", contract.ALL_CHECKS, ids=lambda c: c.__name__)
def test_contract_clause(check: Callable[..., None], factory: Callable[[], KeyValueStore]) -> None:
    check(factory)


def test_random_operations_agree_with_memory_model(server: StoreServer) -> None:
    run_state_machine_as_test(
        contract.store_comparison_machine(_fresh(server.port)), settings=settings.default
    )


def test_random_operations_on_tensorplays_server(tensorplay_server: int) -> None:
    # Persistent connections: no TIME_WAIT per call, so this can run the default size too.
    run_state_machine_as_test(
        contract.store_comparison_machine(_fresh(tensorplay_server)), settings=settings.default
    )


def test_multi_get_reads_many_keys_in_order(server: StoreServer) -> None:
    store = connect("127.0.0.1", server.port, timeout=5.0)
    try:
        store.set("mg/a", b"1")
        store.set("mg/empty", b"")
        assert store.multi_get(["mg/a", "mg/none", "mg/empty", "mg/a"]) == [b"1", None, b"", b"1"]
        assert store.multi_get([]) == []
    finally:
        store.close()


def test_large_values_round_trip_alone_and_among_others(server: StoreServer) -> None:
    store = connect("127.0.0.1", server.port, timeout=10.0)
    big = bytes(range(256)) * 8192  # 2 MiB: many sends and receives per reply
    try:
        store.set("big/a", big)
        store.set("big/small", b"s")
        assert store.get("big/a") == big
        assert store.multi_get(["big/a", "big/small", "big/none", "big/a"]) == [
            big,
            b"s",
            None,
            big,
        ]
        assert store.compare_and_set("big/a", big, b"x") == (True, b"x")
    finally:
        store.close()


def test_multi_get_falls_back_on_tensorplays_server(tensorplay_server: int) -> None:
    store = connect("127.0.0.1", tensorplay_server, timeout=5.0)
    try:
        store.set("mgt/a", b"1")
        assert store.multi_get(["mgt/a", "mgt/none"]) == [b"1", None]
    finally:
        store.close()


def test_a_wait_is_woken_by_its_key_only(server: StoreServer) -> None:
    store = connect("127.0.0.1", server.port, timeout=5.0)
    other = connect("127.0.0.1", server.port, timeout=5.0)
    results: dict[str, tuple[bool, float]] = {}

    def wait(name: str, keys: list[str]) -> None:
        started = time.monotonic()
        results[name] = (store.wait_for(keys, 5.0), time.monotonic() - started)

    threads = [
        threading.Thread(target=wait, args=("a", ["w/a"])),
        threading.Thread(target=wait, args=("ab", ["w/a", "w/b"])),
    ]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.2)
        other.set("w/a", b"x")
        threads[0].join(5.0)
        assert results["a"][0] is True
        assert "ab" not in results  # still waiting for w/b
        other.set("w/b", b"y")
        threads[1].join(5.0)
        assert results["ab"][0] is True
    finally:
        store.close()
        other.close()


def test_tensorplay_client_in_another_process_reads_and_writes_our_server(
    server: StoreServer,
) -> None:
    # tensorplay's client must run in another process: it holds the GIL during its socket
    # calls, so a Python server thread in the same process never gets to answer it.
    ours = connect("127.0.0.1", server.port, timeout=5.0)
    try:
        ours.set("tp/ours", b"from-ours")
        ours.set("tp/empty", b"")
        script = (
            "from tensorplay.distributed import TCPStore\n"
            f"s = TCPStore('127.0.0.1', {server.port}, is_master=False, timeout=5)\n"
            "print(s.get('tp/ours'), s.add('tp/n', 5), s.has('tp/ours'), s.has('tp/none'),\n"
            "      s.wait(['tp/ours'], 1.0), s.wait(['tp/none'], 0.05),\n"
            "      s.compare_and_swap('tp/ours', b'from-ours', b'swapped'))\n"
            "s.set('tp/theirs', b'from-tensorplay')\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [
            "b'from-ours'", "5", "True", "False", "True", "False", "(True,", "b'from-ours')"
        ]  # fmt: skip
        assert ours.get("tp/theirs") == b"from-tensorplay"
        assert ours.get("tp/ours") == b"swapped"
        assert ours.get("tp/n") == b"5"
        assert ours.add("tp/n", 1) == 6
    finally:
        ours.close()


def test_a_dead_server_fails_a_waiting_client_at_once_and_new_calls_within_the_timeout() -> None:
    owner = host("127.0.0.1", 0, timeout=1.0)
    port = owner.port
    client = connect("127.0.0.1", port, timeout=1.0)
    outcome: list[BaseException | bool] = []

    def wait() -> None:
        try:
            outcome.append(client.wait_for(["never"], 30.0))
        except StoreUnavailable as error:
            outcome.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    started = time.monotonic()
    owner.close()  # stops the server
    waiter.join(10.0)
    assert not waiter.is_alive()
    assert isinstance(outcome[0], StoreUnavailable)
    # The retry on a fresh connection is refused until the read timeout (1 s) runs out.
    assert time.monotonic() - started < 5.0
    assert "127.0.0.1" in str(outcome[0]) and "\n" not in str(outcome[0])
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="could not connect"):
        client.get("k")
    assert time.monotonic() - started < 5.0
    client.close()


def test_close_interrupts_a_wait_in_progress(server: StoreServer) -> None:
    client = connect("127.0.0.1", server.port, timeout=5.0)
    outcome: list[object] = []
    waiter = threading.Thread(target=lambda: _record(outcome, client.wait_for, ["nope"], 30.0))
    waiter.start()
    time.sleep(0.2)
    client.close()
    waiter.join(5.0)
    assert not waiter.is_alive()
    assert isinstance(outcome[0], StoreUnavailable)
    with pytest.raises(StoreUnavailable, match="after close"):
        client.get("x")


def _record(into: list[object], call: Callable[..., object], *args: object) -> None:
    try:
        into.append(call(*args))
    except StoreUnavailable as error:
        into.append(error)


def test_garbage_on_the_wire_drops_only_that_connection(server: StoreServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5.0) as rogue:
        rogue.sendall(b"\x99garbage")
        assert rogue.recv(10) == b""  # closed on us
    with socket.create_connection(("127.0.0.1", server.port), timeout=5.0) as rogue:
        rogue.sendall(b"\x00\xff\xff\xff\xff")  # a 4 GiB field: refused, not buffered
        assert rogue.recv(10) == b""
    client = connect("127.0.0.1", server.port, timeout=5.0)
    try:
        client.set("after-garbage", b"ok")
        assert client.get("after-garbage") == b"ok"
    finally:
        client.close()


def test_unreachable_server_is_a_clear_error_within_the_timeout() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound but not listening: connections are refused
        client = TcpStoreClient("127.0.0.1", port, timeout=0.5)
        started = time.monotonic()
        with pytest.raises(
            StoreUnavailable, match=f"tcp store 127.0.0.1:{port}: could not connect"
        ):
            client.set("k", b"v")
        assert time.monotonic() - started < 3.0


def test_a_busy_port_cannot_be_hosted(server: StoreServer) -> None:
    with pytest.raises(StoreUnavailable, match="cannot listen"):
        StoreServer("127.0.0.1", server.port)


def test_stopping_leaves_no_threads_behind() -> None:
    before = set(threading.enumerate())
    owner = host("127.0.0.1", 0, timeout=2.0)
    client = connect("127.0.0.1", owner.port, timeout=2.0)
    client.set("k", b"v")
    assert client.wait_for(["k"], 1.0)
    client.close()
    owner.close()
    deadline = time.monotonic() + 5.0
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert set(threading.enumerate()) - before == set()


def test_the_store_command_serves_our_client_and_tensorplays() -> None:
    """``tpelastic store`` runs our server; a tensorplay client (here, in another process than
    the server) reads what ours wrote and the other way round."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpelastic", "store", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()  # the command prints it flushed, or exits
        assert ready.startswith("tpelastic store listening on 127.0.0.1:"), ready
        port = int(ready.rsplit(":", 1)[1])
        ours = connect("127.0.0.1", port, timeout=5.0)
        theirs = tcp_store("127.0.0.1", port, is_server=False, timeout=5.0)
        try:
            ours.set("cmd/ours", b"1")
            assert theirs.get("cmd/ours") == b"1"
            theirs.set("cmd/theirs", b"")
            assert ours.get("cmd/theirs") == b""
            assert ours.wait_for(["cmd/theirs"], 1.0)
        finally:
            ours.close()
            theirs.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _server_process() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpelastic", "store", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.startswith("tpelastic store listening on"), ready
    return proc, int(ready.rsplit(":", 1)[1])


def test_a_killed_server_process_fails_a_waiting_client_at_once() -> None:
    proc, port = _server_process()
    client = connect("127.0.0.1", port, timeout=1.0)
    outcome: list[object] = []
    try:
        client.set("k", b"v")
        waiter = threading.Thread(target=_record, args=(outcome, client.wait_for, ["no"], 30.0))
        waiter.start()
        time.sleep(0.2)
        started = time.monotonic()
        proc.kill()
        waiter.join(10.0)
        assert not waiter.is_alive() and isinstance(outcome[0], StoreUnavailable)
        assert time.monotonic() - started < 5.0  # the drop, then refused until the 1 s timeout
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_a_hung_server_process_is_no_answer_within_the_read_timeout() -> None:
    proc, port = _server_process()
    client = connect("127.0.0.1", port, timeout=0.5)
    try:
        client.set("k", b"v")
        proc.send_signal(signal.SIGSTOP)  # alive, connected, silent
        # kill() returns before every thread has stopped; the server thread may still answer.
        stopping, until = psutil.Process(proc.pid), time.monotonic() + 10.0
        while stopping.status() != psutil.STATUS_STOPPED and time.monotonic() < until:
            time.sleep(0.01)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="no answer in time"):
            client.get("k")
        with pytest.raises(StoreUnavailable, match="no answer in time"):
            client.wait_for(["never"], 0.5)  # its own 0.5 s plus the read timeout
        assert time.monotonic() - started < 5.0
    finally:
        client.close()
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)


def test_out_of_file_descriptors_the_server_pauses_instead_of_spinning() -> None:
    """A server limited to 40 open files, with 60 clients connecting: it does not burn a core
    while it cannot accept, and serves new clients once connections close."""
    script = (
        "import resource, sys, time\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))\n"
        "from tpelastic.adapters.stores.tcp_server import StoreServer\n"
        "server = StoreServer('127.0.0.1', 0).start()\n"
        "print(server.port, flush=True)\n"
        "sys.stdin.readline()\n"
        "print(time.process_time(), flush=True)\n"
        "sys.stdin.readline()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    socks: list[socket.socket] = []
    try:
        assert proc.stdout is not None and proc.stdin is not None
        port = int(proc.stdout.readline())
        for _ in range(60):  # the kernel completes them into the backlog either way
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5.0))
        time.sleep(1.0)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert float(proc.stdout.readline()) < 0.8  # not a spinning loop (startup included)
        for sock in socks:
            sock.close()
        socks.clear()
        client = connect("127.0.0.1", port, timeout=5.0)
        try:
            client.set("after", b"1")
            assert client.get("after") == b"1"
        finally:
            client.close()
    finally:
        for sock in socks:
            sock.close()
        proc.kill()
        proc.wait(10)
