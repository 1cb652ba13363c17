"""EtcdStore over a real 3-member etcd cluster on 127.0.0.1: losing the member a client talks to
(the leader, or a follower) while clients write does not fail a call nor count an add twice;
losing every member gives StoreUnavailable within the store's timeout; and the rendezvous join
driver forms a round over etcd, also while the leader dies under it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from etcd_fixtures import ETCD, SKIP_REASON, EtcdCluster, etcd_cluster

from tpelastic.adapters.rendezvous.driver import run_join
from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.adapters.stores.etcd import EtcdStore
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.ops import JoinSucceeded

pytestmark = [pytest.mark.skipif(ETCD is None, reason=SKIP_REASON), pytest.mark.slow]


@pytest.fixture
def cluster() -> Iterator[EtcdCluster]:
    with etcd_cluster(3) as started:
        yield started


def _talking_to_first(cluster: EtcdCluster, first: int, **kwargs: object) -> EtcdStore:
    """A store whose current endpoint is member ``first`` (it starts at the list's head)."""
    order = [first] + [i for i in range(3) if i != first]
    return EtcdStore([cluster.endpoints[i] for i in order], **kwargs)  # type: ignore[arg-type]


def _add_while_killing(cluster: EtcdCluster, victim: int) -> None:
    """Three threads add to one counter through clients on ``victim``; kill it midway."""
    stores = [_talking_to_first(cluster, victim, prefix="/kill", timeout=15) for _ in range(3)]
    per_thread, returned, errors = 40, [], []

    def work(store: EtcdStore) -> None:
        try:
            for _ in range(per_thread):
                returned.append(store.add("n", 1))
                time.sleep(0.005)
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(s,), daemon=True) for s in stores]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.15)  # the clients are mid-stream when the member dies
        assert len(returned) < 3 * per_thread, "the kill came after the work: test too slow"
        cluster.kill(victim)
        for thread in threads:
            thread.join(40)
        assert errors == []
        # Every add answered once with its own count: none lost, none applied twice.
        assert sorted(returned) == list(range(1, 3 * per_thread + 1))
        assert stores[0].get("n") == str(3 * per_thread).encode()
        assert stores[0].set_if_absent("after", b"1") == (True, b"1")
        assert stores[1].wait_for(["after"], 5.0)
    finally:
        for store in stores:
            store.close()


def test_killing_the_leader_the_clients_talk_to_keeps_the_store_working(
    cluster: EtcdCluster,
) -> None:
    _add_while_killing(cluster, cluster.leader())


def test_killing_a_follower_the_clients_talk_to_keeps_the_store_working(
    cluster: EtcdCluster,
) -> None:
    leader = cluster.leader()
    _add_while_killing(cluster, (leader + 1) % 3)


def test_a_waiter_on_a_killed_member_still_wakes(cluster: EtcdCluster) -> None:
    leader = cluster.leader()
    waiter_store = _talking_to_first(cluster, leader, timeout=10)
    writer_store = _talking_to_first(cluster, (leader + 1) % 3, timeout=10)
    outcome: dict[str, object] = {}

    def waiter() -> None:
        outcome["found"] = waiter_store.wait_for(["late"], 20.0)

    thread = threading.Thread(target=waiter, daemon=True)
    try:
        thread.start()
        time.sleep(0.3)
        cluster.kill(leader)
        writer_store.set("late", b"")
        thread.join(15)
        assert outcome.get("found") is True
    finally:
        waiter_store.close()
        writer_store.close()


def test_every_member_down_is_store_unavailable_within_the_timeout(cluster: EtcdCluster) -> None:
    store = EtcdStore(cluster.endpoints, timeout=1.0)
    try:
        store.set("k", b"1")
        for index in range(3):
            cluster.kill(index)
        for name, call in (
            ("get", lambda: store.get("k")),
            ("compare_and_set", lambda: store.compare_and_set("k", b"1", b"2")),
            ("wait_for", lambda: store.wait_for(["missing"], 30.0)),
        ):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match=r"etcd unreachable within 1 s"):
                call()
            spent = time.monotonic() - started
            assert 0.9 < spent < 2.5, (name, spent)
    finally:
        store.close()


_FAST = {"heartbeat_interval": 0.2, "heartbeat_timeout": 2.0, "last_call_timeout": 0.3}


def _join_three(
    stores: list[EtcdStore], run_id: str, before_last: Callable[[], None] = lambda: None
) -> dict[str, JoinSucceeded]:
    """Three agents join; ``before_last`` runs while the first two wait for the third."""
    config = RendezvousConfig(min_nodes=3, max_nodes=3, join_timeout=20.0, **_FAST)
    results: dict[str, JoinSucceeded] = {}
    errors: list[BaseException] = []

    def join_one(node: str, store: EtcdStore) -> None:
        try:
            results[node] = run_join(store, config, run_id=run_id, node=node, addr=f"h-{node}")
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [
        threading.Thread(target=join_one, args=(f"n{i}", store), daemon=True)
        for i, store in enumerate(stores)
    ]
    threads[0].start()
    threads[1].start()
    time.sleep(0.3)
    before_last()
    threads[2].start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    return results


def _check_one_round(results: dict[str, JoinSucceeded]) -> None:
    assert sorted(r.rank for r in results.values()) == [0, 1, 2]
    assert len({r.result for r in results.values()}) == 1
    result = next(iter(results.values())).result
    for node, joined in results.items():
        assert result.participants[joined.rank].node == node


def test_three_agents_join_one_round_over_etcd(cluster: EtcdCluster) -> None:
    # One client per agent, each starting at a different member, as on three hosts.
    stores = [_talking_to_first(cluster, i, prefix="/rdzv", timeout=10) for i in range(3)]
    try:
        _check_one_round(_join_three(stores, "etcd-run"))
    finally:
        for store in stores:
            store.close()


def test_a_round_forms_while_the_leader_dies(cluster: EtcdCluster) -> None:
    leader = cluster.leader()
    stores = [_talking_to_first(cluster, leader, prefix="/rdzv", timeout=10) for _ in range(3)]
    try:
        # The two early agents are blocked in the store's wait when their member dies.
        _check_one_round(_join_three(stores, "etcd-run-kill", lambda: cluster.kill(leader)))
    finally:
        for store in stores:
            store.close()
