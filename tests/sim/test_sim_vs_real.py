"""The simulator agrees with the real driver: the same small scenario (three nodes form a round,
one node's workers fail, then it leaves) gives the same membership sequence in the simulator and
with ``run_join`` + ``KeepAlive`` threads over a real tensorplay TCPStore on 127.0.0.1: once with
the failure re-joining (a rendezvous without attempts), once restarted in place (the round's
next attempt, carried into the next round's restart count)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.rendezvous.driver import KeepAlive, execute_ops, run_join
from tpelastic.adapters.stores import tcp_store
from tpelastic.core.rendezvous import attempts, membership
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import JoinSucceeded
from tpelastic.core.rendezvous.records import RoundResult
from tpelastic.core.sim.cluster import Cluster

CONFIG = RendezvousConfig(
    min_nodes=2,
    max_nodes=3,
    join_timeout=20.0,
    # A joiner thread a second late on a loaded machine must still make the round it follows
    # (all three arrive together when none lags, so the round forms at once either way).
    last_call_timeout=4.0,
    heartbeat_interval=0.2,
    heartbeat_timeout=3.0,  # generous: a loaded CI machine must not make anyone look dead
)
NODES = ("a", "b", "c")
RUN = "agree"
# (round, members, restart count): what both worlds must go through.
Membership = tuple[int, tuple[str, ...], int]


def membership_of(result: RoundResult) -> Membership:
    members = tuple(sorted(p.node for p in result.participants))
    return (result.round_no, members, result.restart_count)


def simulated() -> list[Membership]:
    # The real side below re-joins on the failure (a rendezvous without restarts in place).
    cluster = Cluster(config=CONFIG, restart_in_place=False)
    for node in NODES:
        cluster.start(node)
    cluster.advance(2.0)
    cluster.fail_workers("c")
    cluster.advance(3.0)
    cluster.leave("c")
    cluster.advance(3.0)
    results = cluster.results()
    return [membership_of(results[r]) for r in sorted(results)]


def in_threads(work: dict[str, Callable[[], JoinSucceeded | None]]) -> dict[str, JoinSucceeded]:
    """Run one callable per node in its own thread; re-raise the first error; bounded wait."""
    done: dict[str, JoinSucceeded] = {}
    errors: list[BaseException] = []

    def run(node: str, fn: Callable[[], JoinSucceeded | None]) -> None:
        try:
            joined = fn()
            if joined is not None:
                done[node] = joined
        except BaseException as error:  # surfaced below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=item) for item in work.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads), "a node never finished its join"
    if errors:
        raise errors[0]
    return done


def follow(store: KeyValueStore, node: str, result: RoundResult, attempt: int = 0) -> JoinSucceeded:
    """What an agent does between rounds: look at the next round each heartbeat interval and
    rejoin once it is opened (reporting the in-place attempt of its round it reached)."""
    keys, deadline = RunKeys(RUN), time.monotonic() + 20.0
    while time.monotonic() < deadline:
        seen = membership.read_watch(
            execute_ops(store, membership.watch_ops(keys, result.round_no, attempt))
        )
        if seen.next_opened is not None:
            return run_join(
                store,
                CONFIG,
                run_id=RUN,
                node=node,
                from_round=result.round_no,
                reason="rejoin",
                attempt=attempt,
            )
        time.sleep(CONFIG.heartbeat_interval)
    raise AssertionError(f"{node} never saw round {result.round_no + 1} open")


def learn_attempt(store: KeyValueStore, result: RoundResult, attempt: int) -> str:
    """A member's look until the round's next attempt is open; returns why it was opened."""
    keys, deadline = RunKeys(RUN), time.monotonic() + 20.0
    while time.monotonic() < deadline:
        look = membership.watch_ops(keys, result.round_no, attempt)
        seen = membership.read_watch(execute_ops(store, look))
        if seen.next_attempt is not None:
            return seen.next_attempt
        time.sleep(CONFIG.heartbeat_interval)
    raise AssertionError(f"attempt {attempt + 1} of round {result.round_no} never opened")


def real() -> list[Membership]:
    server = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    port = server.raw.port
    stores = {n: tcp_store("127.0.0.1", port, is_server=False, timeout=5.0) for n in NODES}
    beats = {n: KeepAlive(stores[n], CONFIG, run_id=RUN, node=n).start() for n in NODES}
    try:
        first = in_threads({n: _joiner(stores[n], n) for n in NODES})
        r0 = first["a"].result

        def failed_c() -> JoinSucceeded:
            return run_join(
                stores["c"], CONFIG, run_id=RUN, node="c", from_round=r0.round_no, reason="failure"
            )

        second = in_threads(
            {
                "a": lambda: follow(stores["a"], "a", r0),
                "b": lambda: follow(stores["b"], "b", r0),
                "c": failed_c,
            }
        )
        r1 = second["a"].result
        beats["c"].stop()
        execute_ops(stores["c"], membership.leave_ops(RunKeys(RUN), r1, "c"))
        third = in_threads(
            {
                "a": lambda: follow(stores["a"], "a", r1),
                "b": lambda: follow(stores["b"], "b", r1),
            }
        )
        rounds = [r0, r1, third["a"].result]
        for joined in (first, second, third):
            assert len({j.result for j in joined.values()}) == 1, "nodes disagree on a round"
        return [membership_of(r) for r in rounds]
    finally:
        for keep_alive in beats.values():
            keep_alive.stop()
        for store in stores.values():
            store.close()
        server.close()


def _joiner(store: KeyValueStore, node: str) -> Callable[[], JoinSucceeded]:
    return lambda: run_join(store, CONFIG, run_id=RUN, node=node)


def test_the_simulator_and_the_real_driver_form_the_same_rounds() -> None:
    expected = [
        (0, ("a", "b", "c"), 0),
        (1, ("a", "b", "c"), 1),  # c's workers failed: one restart, everyone rejoins
        (2, ("a", "b"), 1),  # c left gracefully: no restart spent
    ]
    assert simulated() == expected
    assert real() == expected


def simulated_in_place() -> list[Membership]:
    cluster = Cluster(config=CONFIG)
    for node in NODES:
        cluster.start(node)
    cluster.advance(2.0)
    cluster.fail_workers("c")
    cluster.advance(3.0)
    assert cluster.worlds() == {(0, 1): 3}  # everyone restarted in place as attempt 1
    cluster.advance(1.5)  # past the collateral window: c's leave explains no failure
    cluster.leave("c")
    cluster.advance(3.0)
    results = cluster.results()
    return [membership_of(results[r]) for r in sorted(results)]


def real_in_place() -> list[Membership]:
    server = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    port = server.raw.port
    stores = {n: tcp_store("127.0.0.1", port, is_server=False, timeout=5.0) for n in NODES}
    beats = {n: KeepAlive(stores[n], CONFIG, run_id=RUN, node=n).start() for n in NODES}
    keys = RunKeys(RUN)
    try:
        first = in_threads({n: _joiner(stores[n], n) for n in NODES})
        r0 = first["a"].result
        # c's workers fail: it opens attempt 1 of round 0; a and b learn of it on their look.
        execute_ops(stores["c"], attempts.open_attempt_ops(keys, r0.round_no, 1, "failure"))
        for node in ("a", "b"):
            assert learn_attempt(stores[node], r0, 0) == "failure"
        beats["c"].stop()
        execute_ops(stores["c"], membership.leave_ops(keys, r0, "c"))
        second = in_threads(
            {
                "a": lambda: follow(stores["a"], "a", r0, attempt=1),
                "b": lambda: follow(stores["b"], "b", r0, attempt=1),
            }
        )
        assert len({j.result for j in second.values()}) == 1, "nodes disagree on a round"
        return [membership_of(r) for r in (r0, second["a"].result)]
    finally:
        for keep_alive in beats.values():
            keep_alive.stop()
        for store in stores.values():
            store.close()
        server.close()


def test_the_simulator_and_the_real_driver_agree_on_a_restart_in_place() -> None:
    expected = [
        (0, ("a", "b", "c"), 0),
        (1, ("a", "b"), 1),  # c left after the round restarted in place: attempt 1 carried
    ]
    assert simulated_in_place() == expected
    assert real_in_place() == expected
