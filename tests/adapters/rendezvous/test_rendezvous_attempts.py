"""DynamicRendezvousHandler restarts a round in place (attempts within a round) over our TCPStore,
handlers on threads with one client each: the opener's attempt reaches the other member through
its look and its held wait, each attempt has its own namespace and a fresh bootstrap endpoint,
two members opening at once open one attempt, a member that missed an attempt moves to the
newest, and the next round carries the attempts into its restart count."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tpelastic.adapters.stores.tcp_client import connect
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.rendezvous import (
    DynamicRendezvousHandler,
    P10dRendezvousBackend,
    RendezvousError,
)

FAST = {
    "join_timeout": 15.0,
    "last_call_timeout": 0.3,
    "heartbeat_interval": 0.3,
    "heartbeat_timeout": 5.0,  # no one is judged dead while the machine is busy
}


def _handler(port: int, run_id: str, node: str) -> DynamicRendezvousHandler:
    store = P10dRendezvousBackend(connect("127.0.0.1", port, timeout=5.0))
    config = RendezvousConfig(min_nodes=2, max_nodes=2, **FAST)
    return DynamicRendezvousHandler(
        run_id, store, config, backend_name="tcp", node_id=node, local_addr="127.0.0.1"
    )


def _all(calls: list[Callable[[], Any]], timeout: float = 30.0) -> list[Any]:
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result(timeout=timeout) for f in [pool.submit(c) for c in calls]]


@pytest.fixture
def pair(server: StoreServer, request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    run_id = request.node.name.replace("[", "-").replace("]", "")[:40]
    a, b = (_handler(server.port, run_id, n) for n in ("a", "b"))
    try:
        yield a, b
    finally:
        a.shutdown()
        b.shutdown()


def test_an_opened_attempt_reaches_the_other_member_with_its_own_namespace_and_port(
    pair: tuple[DynamicRendezvousHandler, DynamicRendezvousHandler],
) -> None:
    a, b = pair
    first_a, first_b = _all([a.next_rendezvous, b.next_rendezvous])
    first_a.store.set("left-by-attempt-0", b"stale")
    assert b.watch().next_attempt is None
    assert a.open_attempt("worker local rank 0 failed") == 1
    assert (a.attempt, b.attempt) == (1, 0)
    assert b.watch().next_attempt == "worker local rank 0 failed"
    b.follow_attempt(1)
    info_a, info_b = _all([lambda: a.attempt_info(timeout=5.0), lambda: b.attempt_info(timeout=5)])
    assert (info_a.round, info_a.attempt, info_b.attempt) == (first_a.round, 1, 1)
    assert info_a.restart_count == info_b.restart_count == first_a.restart_count + 1
    assert (info_a.rank, info_b.rank) == (first_a.rank, first_b.rank)  # same world
    assert info_a.bootstrap_store_info == info_b.bootstrap_store_info
    assert info_a.bootstrap_store_info != first_a.bootstrap_store_info  # a fresh endpoint
    assert info_b.store.get("left-by-attempt-0") is None  # nothing of attempt 0 is read again
    assert b.watch().next_attempt is None  # the look now reads attempt 2


def test_two_members_opening_at_once_open_one_attempt(
    pair: tuple[DynamicRendezvousHandler, DynamicRendezvousHandler],
) -> None:
    a, b = pair
    _all([a.next_rendezvous, b.next_rendezvous])
    assert _all([lambda: a.open_attempt("a failed"), lambda: b.open_attempt("b failed")]) == [1, 1]
    infos = _all([lambda: a.attempt_info(timeout=5.0), lambda: b.attempt_info(timeout=5.0)])
    assert {i.restart_count for i in infos} == {infos[0].restart_count}


def test_a_member_that_missed_an_attempt_moves_to_the_newest(
    pair: tuple[DynamicRendezvousHandler, DynamicRendezvousHandler],
) -> None:
    a, b = pair
    _all([a.next_rendezvous, b.next_rendezvous])
    a.open_attempt("first")
    a.open_attempt("second")
    assert b.watch().next_attempt == "first"
    b.follow_attempt(1)
    assert b.watch().next_attempt == "second"
    b.follow_attempt(2)
    assert b.watch().next_attempt is None
    with pytest.raises(ValueError, match="older than attempt 2"):
        b.follow_attempt(1)
    with pytest.raises(ValueError, match="not newer than attempt 2"):
        b.open_attempt("again", attempt=2)


def test_the_held_wait_wakes_on_an_attempt_and_leaves_a_seen_one_out(
    pair: tuple[DynamicRendezvousHandler, DynamicRendezvousHandler],
) -> None:
    a, b = pair
    _all([a.next_rendezvous, b.next_rendezvous])
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        waiting = pool.submit(b.wait_for_change, 20.0)
        time.sleep(0.3)
        a.open_attempt("exit 1")
        assert waiting.result(timeout=20.0) is True
        assert time.monotonic() - started < 15.0
    assert b.watch().next_attempt == "exit 1"
    assert b.wait_for_change(0.3) is False  # seen and not yet followed: left out
    b.follow_attempt(1)
    assert b.wait_for_change(0.3) is False  # now held on attempt 2's key
    a.open_attempt("exit 1 again")
    assert b.wait_for_change(5.0) is True


def test_the_next_round_carries_the_attempts_into_its_restart_count(
    pair: tuple[DynamicRendezvousHandler, DynamicRendezvousHandler],
) -> None:
    a, b = pair
    first, _ = _all([a.next_rendezvous, b.next_rendezvous])
    a.open_attempt("exit 1")
    b.follow_attempt(1)
    a.open_next_round("scale_up")  # a membership change after the in-place restart
    second, _ = _all(
        [lambda: a.next_rendezvous(reason="scale_up"), lambda: b.next_rendezvous(reason="rejoin")]
    )
    assert second.round == first.round + 1
    assert second.restart_count == first.restart_count + 1  # the attempt's unit stays spent
    assert (second.attempt, a.attempt, b.attempt) == (0, 0, 0)


@pytest.mark.parametrize(("a_charges", "count_rises"), [(0, False), (None, True)])
def test_an_attempt_every_member_reports_not_spent_leaves_the_next_count(
    pair: tuple[DynamicRendezvousHandler, DynamicRendezvousHandler],
    a_charges: int | None,
    count_rises: bool,
) -> None:
    """Both members re-join after attempt 1 reporting attempt 0 as the last spent (a peer's
    loss caused attempt 1): the next round's count is the first's. One member reporting every
    attempt is enough to keep the unit spent (the closer takes the highest report)."""
    a, b = pair
    first, _ = _all([a.next_rendezvous, b.next_rendezvous])
    a.open_attempt("peer closed the connection")
    b.follow_attempt(1)
    a.open_next_round("membership")
    second, _ = _all(
        [
            lambda: a.next_rendezvous(reason="membership", charged_attempt=a_charges),
            lambda: b.next_rendezvous(reason="rejoin", charged_attempt=0),
        ]
    )
    assert second.round == first.round + 1
    assert second.restart_count == first.restart_count + (1 if count_rises else 0)


def test_attempts_need_a_round(server: StoreServer) -> None:
    a = _handler(server.port, "no-round", "a")
    try:
        with pytest.raises(RendezvousError, match="open_attempt"):
            a.open_attempt("exit 1")
        with pytest.raises(RendezvousError, match="attempt_info"):
            a.attempt_info(timeout=1.0)
    finally:
        a.shutdown()
