"""A closer that finds a counted arrival's slot still unwritten waits for it (R15).

Found by the multi-process tests: with ``max`` arrivals counted, the closer used to publish at
once with the slots written so far, leaving out a live node that had counted itself but not yet
written its slot (it then waited alone in the next round). Here the race is made certain: the
test takes an arrival for a node and writes its slot only later (or never).
"""

from __future__ import annotations

import threading
import time

from tpelastic.adapters.rendezvous.driver import run_join
from tpelastic.adapters.stores import MemoryStore
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import JoinSucceeded
from tpelastic.core.rendezvous.records import NodeInfo, encode_node

RUN = "unwritten"
KEYS = RunKeys(RUN)


def _config(heartbeat_timeout: float) -> RendezvousConfig:
    return RendezvousConfig(
        min_nodes=1,
        max_nodes=3,
        join_timeout=20,
        last_call_timeout=10,
        heartbeat_interval=0.2,
        heartbeat_timeout=heartbeat_timeout,
    )


def _until(probe: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _two_joins_around_a_slow_arrival(
    config: RendezvousConfig, write_after: float | None
) -> tuple[dict[str, JoinSucceeded], float]:
    """Node a arrives (and closes), the test counts an arrival it does not write yet, node b
    arrives: three arrivals, the closer sees the middle slot unwritten."""
    store = MemoryStore()
    results: dict[str, JoinSucceeded] = {}
    errors: list[BaseException] = []

    def join(node: str) -> None:
        try:
            results[node] = run_join(store, config, run_id=RUN, node=node, addr=node)
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    first = threading.Thread(target=join, args=("a",))
    first.start()
    _until(lambda: store.get(KEYS.arrivals(0)) is not None)
    assert store.add(KEYS.arrivals(0), 1) == 2  # "slow" counted itself: slot 1, not written yet
    started = time.monotonic()
    second = threading.Thread(target=join, args=("b",))
    second.start()
    if write_after is not None:
        time.sleep(write_after)
        store.set(KEYS.slot(0, 1), encode_node(NodeInfo(node="slow", addr="slow")))
    for thread in (first, second):
        thread.join(20)
    assert not errors, errors
    return results, time.monotonic() - started


def test_R15_the_closer_waits_for_a_counted_arrival_to_write_its_slot() -> None:
    results, _ = _two_joins_around_a_slow_arrival(_config(heartbeat_timeout=5.0), write_after=0.5)
    for joined in results.values():
        assert [p.node for p in joined.result.participants] == ["a", "slow", "b"]
        assert joined.result.world_size == 3


def test_a_slot_never_written_is_given_up_after_the_heartbeat_timeout() -> None:
    results, took = _two_joins_around_a_slow_arrival(_config(heartbeat_timeout=1.0), None)
    for joined in results.values():
        assert sorted(p.node for p in joined.result.participants) == ["a", "b"]
    assert took >= 0.9  # it waited for the slot before leaving it out
