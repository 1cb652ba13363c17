"""DynamicRendezvousHandler.wait_for_change over our TCPStore (handlers on threads, one client
each): a graceful leave and a new node's arrival end the held wait long before its timeout, a
seen arrival is left out of the next wait, a close ends it, and over a store without WAIT_ANY
(tensorplay's client, a MemoryStore) it returns False at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tpelastic.adapters.stores import MemoryStore, tcp_store
from tpelastic.adapters.stores.tcp_client import connect
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.rendezvous import (
    DynamicRendezvousHandler,
    P10dRendezvousBackend,
    StoreRendezvousBackend,
)

FAST = {
    "join_timeout": 15.0,
    "last_call_timeout": 0.3,
    "heartbeat_interval": 0.3,
    "heartbeat_timeout": 5.0,  # no one is judged dead while the machine is busy
}


def _handler(port: int, run_id: str, node: str, lo: int, hi: int) -> DynamicRendezvousHandler:
    store = P10dRendezvousBackend(connect("127.0.0.1", port, timeout=5.0))
    config = RendezvousConfig(min_nodes=lo, max_nodes=hi, **FAST)
    return DynamicRendezvousHandler(
        run_id, store, config, backend_name="tcp", node_id=node, local_addr="127.0.0.1"
    )


def _all(calls: list[Callable[[], Any]], timeout: float = 30.0) -> list[Any]:
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result(timeout=timeout) for f in [pool.submit(c) for c in calls]]


def _timed_wait(handler: DynamicRendezvousHandler, timeout: float) -> tuple[threading.Thread, list]:
    out: list[Any] = []

    def run() -> None:
        started = time.monotonic()
        out.append(handler.wait_for_change(timeout))
        out.append(time.monotonic() - started)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_graceful_leave_ends_the_survivors_wait_at_once(server: StoreServer) -> None:
    a, b = (_handler(server.port, "leave", n, 2, 2) for n in ("a", "b"))
    try:
        _all([a.next_rendezvous, b.next_rendezvous])
        assert a.can_wait_for_change()
        assert a.wait_for_change(0.2) is False  # nothing changed yet: its timeout
        thread, out = _timed_wait(a, 30.0)
        time.sleep(0.3)
        assert out == []
        assert b.shutdown()
        thread.join(15.0)
        assert out[0] is True and out[1] < 15.0
        assert a.watch().next_opened is not None  # the look sees what woke the wait
    finally:
        a.shutdown()
        b.shutdown()


def test_an_arrival_wakes_once_then_only_the_round_opening_does(server: StoreServer) -> None:
    a, b = (_handler(server.port, "grow", n, 1, 3) for n in ("a", "b"))
    c = _handler(server.port, "grow", "c", 1, 3)
    try:
        _all([a.next_rendezvous, b.next_rendezvous])
        thread, out = _timed_wait(a, 30.0)
        time.sleep(0.3)
        with ThreadPoolExecutor(1) as pool:
            joining = pool.submit(c.next_rendezvous)  # waits at the next round
            thread.join(15.0)
            assert out[0] is True
            assert a.watch().waiting == 1
            assert a.wait_for_change(0.3) is False  # the arrival seen is left out
            thread, out = _timed_wait(a, 30.0)
            time.sleep(0.2)
            a.open_next_round("scale_up")
            thread.join(15.0)
            assert out[0] is True and a.watch().next_opened == "scale_up"
            infos = _all([a.next_rendezvous, b.next_rendezvous])
            assert joining.result(timeout=30).world_size == 3
            assert {i.world_size for i in infos} == {3}
    finally:
        for handler in (a, b, c):
            handler.shutdown()


def test_a_close_ends_the_wait_and_shutdown_releases_a_waiting_thread(
    server: StoreServer,
) -> None:
    a, b = (_handler(server.port, "close", n, 2, 2) for n in ("a", "b"))
    try:
        _all([a.next_rendezvous, b.next_rendezvous])
        thread, out = _timed_wait(a, 30.0)
        time.sleep(0.2)
        b.set_closed("succeeded", "done")
        thread.join(15.0)
        assert out[0] is True
        thread, out = _timed_wait(b, 30.0)  # closed is there: at once
        thread.join(15.0)
        assert out[0] is True
    finally:
        a.shutdown()
        b.shutdown()
    assert a.wait_for_change(5.0) is False  # shut down: at once


def test_shutdown_while_waiting_releases_the_waiting_thread(server: StoreServer) -> None:
    a, b = (_handler(server.port, "stop", n, 2, 2) for n in ("a", "b"))
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(a.wait_for_change(30.0))
        except Exception as error:  # what the agent's watcher thread may get
            outcome.append(error)

    try:
        _all([a.next_rendezvous, b.next_rendezvous])
        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        time.sleep(0.3)
        assert outcome == []
        started = time.monotonic()
        a.shutdown()  # its own leave, or the closed client, ends the wait
        thread.join(10.0)
        assert not thread.is_alive() and time.monotonic() - started < 10.0
        assert len(outcome) == 1
    finally:
        a.shutdown()
        b.shutdown()


def test_stores_without_wait_any_answer_false_at_once() -> None:
    hosted = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    try:
        stores = [
            StoreRendezvousBackend(MemoryStore()),
            P10dRendezvousBackend(tcp_store("127.0.0.1", hosted.raw.port, is_server=False)),
        ]
        for store in stores:
            config = RendezvousConfig(min_nodes=1, max_nodes=2, **FAST)
            handler = DynamicRendezvousHandler("plain", store, config, backend_name="x")
            assert not handler.can_wait_for_change()
            handler.next_rendezvous()
            started = time.monotonic()
            assert handler.wait_for_change(30.0) is False
            assert time.monotonic() - started < 5.0
            handler.shutdown()
    finally:
        hosted.close()
