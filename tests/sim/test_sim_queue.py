"""The simulator's virtual time: order, cancellation, and no pile of dead timers in big runs."""

from __future__ import annotations

import pytest

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.sim.cluster import Cluster, Status
from tpelastic.core.sim.queue import EventQueue, SimulationStuck


def test_actions_run_by_instant_then_in_scheduling_order() -> None:
    queue, ran = EventQueue(), []
    for at, name in [(2.0, "c"), (1.0, "a"), (2.0, "d"), (1.0, "b")]:
        queue.schedule(at, lambda name=name: ran.append(name))
    queue.run_until(5.0, limit_per_instant=10)
    assert ran == ["a", "b", "c", "d"] and queue.now == 5.0 and queue.processed == 4


def test_a_cancelled_action_never_runs_and_a_spent_handle_is_harmless() -> None:
    queue, ran = EventQueue(), []
    first = queue.schedule(1.0, lambda: ran.append("first"))
    dropped = queue.schedule(2.0, lambda: ran.append("dropped"))
    queue.schedule(3.0, lambda: ran.append("last"))
    queue.cancel(dropped)
    queue.run_until(1.5, limit_per_instant=10)
    queue.cancel(first)  # already ran: nothing to drop
    queue.run_until(5.0, limit_per_instant=10)
    assert ran == ["first", "last"] and queue.processed == 2
    assert queue.next_at() is None


def test_sweeping_cancelled_actions_keeps_the_order_of_the_rest() -> None:
    queue, ran = EventQueue(), []
    handles = [queue.schedule(float(i % 7), lambda i=i: ran.append(i)) for i in range(300)]
    for handle in handles[::3] + handles[1::3]:
        queue.cancel(handle)  # enough to trigger sweeps on the way
    assert len(queue._heap) < 300
    queue.run_until(10.0, limit_per_instant=1000)
    kept = [i for i in range(300) if i % 3 == 2]
    assert ran == sorted(kept, key=lambda i: (i % 7, i))


def test_a_loop_without_time_moving_is_reported() -> None:
    queue = EventQueue()

    def again() -> None:
        queue.schedule(queue.now, again)

    queue.schedule(0.0, again)
    with pytest.raises(SimulationStuck, match="without time moving"):
        queue.run_until(1.0, limit_per_instant=50)


def test_recoveries_leave_no_dead_wait_timers_behind() -> None:
    """Every follower's wait has a deadline timer; a wait that ends sooner cancels it, so after
    many re-rendezvous the queue holds a few actions per node (its tick, a heartbeat and a look
    in flight), not one more per node per round (≈6 per node here before cancellation)."""
    n = 40
    config = RendezvousConfig(
        min_nodes=n // 2,
        max_nodes=n,
        heartbeat_interval=1.0,
        heartbeat_timeout=3.0,
        last_call_timeout=2.0,
    )
    # Failures re-form the world here (no restarts in place): eight full re-rendezvous.
    cluster = Cluster(config=config, latency=0.001, detail=False, restart_in_place=False)
    for i in range(n):
        cluster.start(f"n{i}")
    cluster.advance(3.0)
    for k in range(8):
        cluster.fail_workers(f"n{(k * 7) % n}")
        cluster.advance(2.0)
    assert cluster.training_rounds() == {8}
    assert all(node.status is Status.TRAINING for node in cluster.nodes.values())
    live = len(cluster.queue._heap) - len(cluster.queue._cancelled)
    assert live <= 4 * n, f"{live} actions pending for {n} nodes"
