"""How the simulator's cost grows with the number of nodes (a benchmark, not a test).

For each size N: N nodes form the first round, then F times a training node's workers fail and
all N nodes re-form the world (a full re-rendezvous each time). Prints wall time, virtual time,
store operations and simulator actions per size, and the growth exponent between sizes
(1.0 = linear, 2.0 = quadratic).

    python bench/sim_scale.py                       # sizes 100,200,400,800; 100 failures
    python bench/sim_scale.py --sizes 1000 --failures 5
    python bench/sim_scale.py --decode-cache        # what a memoised decode_result would give

``--decode-cache`` wraps the core's ``decode_result`` in a cache for this process only. It is an
experiment to separate the simulator's own cost from the cost of each node decoding the O(N)
round result (see docs/benchmarks-sim.md); the shipped core is not changed.
"""

from __future__ import annotations

import argparse
import functools
import math
import time

from tpelastic.core.rendezvous import reading, records
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.sim.cluster import Cluster, Status

CONFIG = dict(heartbeat_interval=1.0, heartbeat_timeout=3.0, last_call_timeout=2.0)


def settle(cluster: Cluster, n: int, round_no: int, limit: float = 120.0) -> float:
    """Advance in small steps until all n nodes train in ``round_no``; return virtual seconds."""
    started = cluster.now
    while cluster.now - started < limit:
        if cluster.training_rounds() == {round_no} and _training(cluster) == n:
            return cluster.now - started
        cluster.advance(0.25)
    raise RuntimeError(f"{n} nodes did not all train in round {round_no} within {limit}s")


def _training(cluster: Cluster) -> int:
    return cluster._training.get(next(iter(cluster._training)), 0) if cluster._training else 0


def run(n: int, failures: int, latency: float) -> dict[str, float]:
    config = RendezvousConfig(min_nodes=max(1, n // 2), max_nodes=n, **CONFIG)
    cluster = Cluster(config=config, latency=latency, detail=False)
    wall = time.perf_counter()
    for i in range(n):
        cluster.start(f"n{i}")
    first_virtual = settle(cluster, n, 0)
    first_wall = time.perf_counter() - wall
    recovery = 0.0
    for k in range(failures):
        victim = f"n{(k * 7919) % n}"
        assert cluster.nodes[victim].status is Status.TRAINING
        cluster.fail_workers(victim)
        recovery += settle(cluster, n, k + 1)
    assert not cluster.overlaps
    return {
        "n": n,
        "wall": time.perf_counter() - wall,
        "first_wall": first_wall,
        "first_virtual": first_virtual,
        "recovery_virtual": recovery / max(1, failures),
        "store_ops": cluster.store_ops,
        "actions": cluster.queue.processed,
    }


def install_decode_cache() -> None:
    cached = functools.lru_cache(maxsize=256)(records.decode_result)
    records.decode_result = cached  # type: ignore[assignment]
    reading.decode_result = cached  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,200,400,800")
    parser.add_argument("--failures", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.001)
    parser.add_argument("--decode-cache", action="store_true")
    args = parser.parse_args()
    if args.decode_cache:
        install_decode_cache()
    print(
        f"failures per run: {args.failures}; latency {args.latency}s; "
        f"decode cache: {'on' if args.decode_cache else 'off'}"
    )
    print(
        f"{'nodes':>6} {'wall s':>8} {'first s':>8} {'virt 1st':>8} {'virt rec':>8} "
        f"{'store ops':>10} {'actions':>9} {'growth':>6}"
    )
    previous = None
    for n in (int(s) for s in args.sizes.split(",")):
        row = run(n, args.failures, args.latency)
        growth = ""
        if previous is not None:
            growth = f"{math.log(row['wall'] / previous['wall']) / math.log(n / previous['n']):.2f}"
        print(
            f"{n:>6} {row['wall']:>8.2f} {row['first_wall']:>8.2f} {row['first_virtual']:>8.2f} "
            f"{row['recovery_virtual']:>8.2f} {int(row['store_ops']):>10} "
            f"{int(row['actions']):>9} {growth:>6}",
            flush=True,
        )
        previous = row


if __name__ == "__main__":
    main()
