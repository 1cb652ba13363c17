"""run_join and KeepAlive: the join machine driven against real stores, threads and processes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import machine_load
import pytest

from tpelastic.adapters.rendezvous.driver import KeepAlive, execute_ops, run_join
from tpelastic.adapters.stores import MemoryStore, tcp_store
from tpelastic.core.rendezvous import membership
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import JoinSucceeded
from tpelastic.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousStateError,
    RendezvousTimeoutError,
)

FAST = {"heartbeat_interval": 0.2, "heartbeat_timeout": 1.0, "last_call_timeout": 0.3}


def _config(min_nodes: int, max_nodes: int, join_timeout: float = 10.0) -> RendezvousConfig:
    return RendezvousConfig(
        min_nodes=min_nodes, max_nodes=max_nodes, join_timeout=join_timeout, **FAST
    )


def _ranks_agree(results: dict[str, JoinSucceeded], world: int) -> None:
    assert sorted(r.rank for r in results.values()) == list(range(world))
    assert len({r.result for r in results.values()}) == 1
    result = next(iter(results.values())).result
    for node, joined in results.items():
        assert result.participants[joined.rank].node == node


def test_three_threads_over_a_memory_store_agree_on_ranks() -> None:
    store, config = MemoryStore(), _config(3, 3)
    results: dict[str, JoinSucceeded] = {}
    errors: list[BaseException] = []

    def join_one(node: str) -> None:
        try:
            results[node] = run_join(store, config, run_id="mem", node=node, addr=f"h-{node}")
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=join_one, args=(f"n{i}",)) for i in range(3)]
    try:
        for thread in threads:
            thread.start()
    finally:
        for thread in threads:
            thread.join(15)
    assert not errors
    assert not any(t.is_alive() for t in threads)
    _ranks_agree(results, 3)


AGENT = """
import json, sys
from tpelastic.adapters.rendezvous.driver import KeepAlive, run_join
from tpelastic.adapters.stores import tcp_store
from tpelastic.core.rendezvous.config import RendezvousConfig
port, node = int(sys.argv[1]), sys.argv[2]
config = RendezvousConfig(min_nodes=3, max_nodes=3, **json.loads(sys.argv[3]))
store = tcp_store("127.0.0.1", port, is_server=False, timeout=5.0)
with KeepAlive(store, config, run_id="tcp", node=node) as keep_alive:
    joined = run_join(store, config, run_id="tcp", node=node)
    beats_ok = keep_alive.last_success is not None and keep_alive.consecutive_failures == 0
print(json.dumps({
    "rank": joined.rank,
    "round": joined.result.round_no,
    "members": [p.node for p in joined.result.participants],
    "beats_ok": beats_ok,
}), flush=True)
store.close()
"""


@pytest.mark.slow
def test_three_processes_over_a_tcp_store_agree_on_ranks() -> None:
    server = tcp_store("127.0.0.1", 0, is_server=True, timeout=5.0)
    procs: list[subprocess.Popen[str]] = []
    # Three interpreters start and beat on a shared machine: the times stretch with its load.
    load = machine_load.factor()
    conf = {**{k: v * load for k, v in FAST.items()}, "join_timeout": 15.0 * load}
    try:
        port = server.raw.port
        for i in range(3):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", AGENT, str(port), f"p{i}", json.dumps(conf)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=conf["join_timeout"] + 5.0 * load)
            assert proc.returncode == 0, err
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        server.close()
    assert sorted(o["rank"] for o in outputs) == [0, 1, 2]
    assert len({(o["round"], tuple(o["members"])) for o in outputs}) == 1
    members = outputs[0]["members"]
    for i, out in enumerate(outputs):
        assert members[out["rank"]] == f"p{i}"
        assert out["beats_ok"]


def test_below_min_nodes_times_out_within_the_join_timeout() -> None:
    store = MemoryStore()
    started = time.monotonic()
    with pytest.raises(RendezvousTimeoutError, match="join timeout"):
        run_join(store, _config(2, 2, join_timeout=1.0), run_id="few", node="alone")
    assert time.monotonic() - started < 3.0


def test_closed_run_refuses_to_join() -> None:
    store = MemoryStore()
    execute_ops(store, membership.close_ops(RunKeys("shut"), 0, "succeeded", "job done"))
    with pytest.raises(RendezvousClosedError, match="job done"):
        run_join(store, _config(1, 2), run_id="shut", node="late")


def test_garbage_state_is_a_state_error_naming_the_run() -> None:
    store = MemoryStore()
    store.set(RunKeys("junk").published_rounds(), b"\xff\x00not a counter")
    with pytest.raises(RendezvousStateError, match="joining run 'junk'.*expected a counter"):
        run_join(store, _config(1, 1), run_id="junk", node="n0")


def test_an_unreachable_store_is_a_connection_error() -> None:
    store = MemoryStore()
    store.close()
    with pytest.raises(RendezvousConnectionError):
        run_join(store, _config(1, 1), run_id="gone", node="n0")


def test_keep_alive_beats_counts_failures_and_stops_promptly() -> None:
    store, config = MemoryStore(), _config(1, 1)
    key = RunKeys("hb").heartbeat("n0")
    keep_alive = KeepAlive(store, config, run_id="hb", node="n0").start()
    try:
        time.sleep(0.5)
        assert int(store.get(key) or b"0") >= 2
        assert keep_alive.last_success is not None
        store.close()
        time.sleep(0.5)
        assert keep_alive.consecutive_failures >= 1
    finally:
        started = time.monotonic()
        keep_alive.stop()
        assert time.monotonic() - started < 0.5
