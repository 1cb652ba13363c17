"""WAIT_ANY on our TCPStore server and client (the WaitAnyStore capability): held on the server
and answered by the first listed key written, timed out on its deadline, polled on tensorplay's
server, passed through a prefixed view and a rendezvous backend, interrupted by close, and
leaving no parked waiter behind on the keys that were never written."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tpelastic.adapters.ports import WaitAnyStore
from tpelastic.adapters.rendezvous.backends import (
    P10dRendezvousBackend,
    StoreRendezvousBackend,
    supports_wait_any,
)
from tpelastic.adapters.stores import PrefixedStore, StoreUnavailable, tcp_store
from tpelastic.adapters.stores.memory import MemoryStore
from tpelastic.adapters.stores.tcp_client import TcpStoreClient, connect
from tpelastic.adapters.stores.tcp_server import StoreServer


@pytest.fixture(scope="module")
def server() -> Iterator[StoreServer]:
    served = StoreServer("127.0.0.1", 0).start()
    yield served
    served.stop()


@pytest.fixture
def pair(server: StoreServer) -> Iterator[tuple[TcpStoreClient, TcpStoreClient]]:
    waiter, writer = (connect("127.0.0.1", server.port, timeout=5.0) for _ in range(2))
    yield waiter, writer
    waiter.close()
    writer.close()


def _in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run ``call`` on a thread; its result (or StoreUnavailable) lands in the list."""
    out: list[object] = []

    def run() -> None:
        started = time.monotonic()
        try:
            out.append(call())
        except StoreUnavailable as error:
            out.append(error)
        out.append(time.monotonic() - started)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_the_first_key_written_answers_a_held_wait(
    pair: tuple[TcpStoreClient, TcpStoreClient],
) -> None:
    waiter, writer = pair
    thread, out = _in_thread(lambda: waiter.wait_any(["wa1/a", "wa1/b", "wa1/c"], 30.0))
    time.sleep(0.3)
    assert out == []  # held on the server: nothing there yet
    writer.set("wa1/b", b"x")
    thread.join(10.0)
    assert out[0] is True
    assert out[1] < 10.0  # woken by the write, far before its 30 s timeout


def test_a_key_already_there_answers_at_once_and_none_there_times_out(
    pair: tuple[TcpStoreClient, TcpStoreClient],
) -> None:
    waiter, writer = pair
    writer.set("wa2/there", b"")  # an empty value is a present key
    assert waiter.wait_any(["wa2/absent", "wa2/there"], 30.0) is True
    started = time.monotonic()
    assert waiter.wait_any(["wa2/absent", "wa2/other"], 0.3) is False
    assert time.monotonic() - started >= 0.25
    assert waiter.wait_any(["wa2/absent"], 0.0) is False  # only checks
    assert waiter.wait_any(["wa2/there"], 0.0) is True
    assert waiter.wait_any([], 30.0) is False  # no key can appear


def test_an_answered_wait_leaves_no_waiter_on_its_other_keys(
    server: StoreServer, pair: tuple[TcpStoreClient, TcpStoreClient]
) -> None:
    waiter, writer = pair
    for n in range(20):  # a watcher waits again and again on keys that are never written
        thread, out = _in_thread(lambda n=n: waiter.wait_any([f"wa3/fire{n}", "wa3/never"], 30.0))
        time.sleep(0.02)
        writer.set(f"wa3/fire{n}", b"1")
        thread.join(10.0)
        assert out[0] is True
    assert waiter.wait_any(["wa3/never"], 0.05) is False  # the deadline path unparks too
    parked = server._waiters  # white-box: the server's per-key waiter lists
    assert not any(k.startswith(b"wa3/") for k in parked), sorted(parked)


def test_a_plain_wait_still_needs_every_key(pair: tuple[TcpStoreClient, TcpStoreClient]) -> None:
    waiter, writer = pair
    all_of, all_out = _in_thread(lambda: waiter.wait_for(["wa4/a", "wa4/b"], 30.0))
    any_of, any_out = _in_thread(lambda: waiter.wait_any(["wa4/a", "wa4/b"], 30.0))
    time.sleep(0.2)
    writer.set("wa4/a", b"1")
    any_of.join(10.0)
    assert any_out[0] is True
    time.sleep(0.2)
    assert all_out == []  # still waiting for wa4/b
    writer.set("wa4/b", b"1")
    all_of.join(10.0)
    assert all_out[0] is True


def test_close_interrupts_a_wait_any_in_progress(server: StoreServer) -> None:
    client = connect("127.0.0.1", server.port, timeout=5.0)
    thread, out = _in_thread(lambda: client.wait_any(["wa5/nope"], 30.0))
    time.sleep(0.2)
    client.close()
    thread.join(5.0)
    assert not thread.is_alive()
    assert isinstance(out[0], StoreUnavailable)
    with pytest.raises(StoreUnavailable, match="after close"):
        client.wait_any(["wa5/nope"], 1.0)


def test_on_tensorplays_server_wait_any_polls_and_still_wakes() -> None:
    hosted = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    client = connect("127.0.0.1", int(hosted.raw.port), timeout=5.0)
    try:
        thread, out = _in_thread(lambda: client.wait_any(["wa6/a", "wa6/b"], 30.0))
        time.sleep(0.2)
        hosted.set("wa6/b", b"1")
        thread.join(10.0)
        assert out[0] is True
        assert client.wait_any(["wa6/none"], 0.1) is False
    finally:
        client.close()
        hosted.close()


def test_views_and_backends_pass_it_through_and_tell_whether_it_is_real(
    pair: tuple[TcpStoreClient, TcpStoreClient],
) -> None:
    waiter, writer = pair
    view = PrefixedStore(P10dRendezvousBackend(waiter), "run")
    assert supports_wait_any(view) and isinstance(waiter, WaitAnyStore)
    thread, out = _in_thread(lambda: view.wait_any(["k1", "k2"], 30.0))
    time.sleep(0.2)
    writer.set("run/k2", b"1")
    thread.join(10.0)
    assert out[0] is True
    memory = StoreRendezvousBackend(MemoryStore())
    assert not supports_wait_any(memory)
    assert not supports_wait_any(PrefixedStore(memory, "run"))
    with pytest.raises(TypeError, match="cannot wait for any"):
        memory.wait_any(["k"], 0.1)
    with pytest.raises(TypeError, match="cannot wait for any"):
        PrefixedStore(MemoryStore(), "run").wait_any(["k"], 0.1)
