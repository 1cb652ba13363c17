"""How the simulator's cost grows with the number of nodes (a benchmark, not a test).

For each size N and failure count F: N nodes form the first round, then F times a training
node's workers fail and all N nodes re-form the world (a full re-rendezvous each time). Each run
is its own process (so peak memory is that run's). Prints wall and CPU time, the first round's
wall time, virtual seconds, store operations, simulator actions (events processed), peak
resident memory, and the growth exponent of CPU time between sizes (1.0 = linear, 2.0 =
quadratic; CPU time, because the machine is shared and wall time moves with the load), with the
load average before and after.

    python bench/sim_scale.py                                  # 1000,2000,5000,10000 x 0,100
    python bench/sim_scale.py --sizes 1000,2000 --failures 10

Runs pause Python's cyclic garbage collector (``tpelastic.adapters.sim.collector``); ``--gc``
keeps it running, to measure what it costs. ``--json FILE`` appends one JSON object per run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

from tpelastic.adapters.sim.collector import collector_paused
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
    """One measured run in this process."""
    config = RendezvousConfig(min_nodes=max(1, n // 2), max_nodes=n, **CONFIG)
    cluster = Cluster(config=config, latency=latency, detail=False)
    wall, cpu = time.perf_counter(), time.process_time()
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
        "failures": failures,
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "first_wall": first_wall,
        "first_virtual": first_virtual,
        "recovery_virtual": recovery / max(1, failures),
        "store_ops": cluster.store_ops,
        "actions": cluster.queue.processed,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def child(args: argparse.Namespace) -> None:
    if args.gc:
        row = run(args.one, args.failures_one, args.latency)
    else:
        with collector_paused():
            row = run(args.one, args.failures_one, args.latency)
    print(json.dumps(row))


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(n: int, failures: int, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, __file__, "--one", str(n), "--failures-one", str(failures)]
    command += ["--latency", str(args.latency)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        raise RuntimeError(f"N={n} F={failures} failed:\n{done.stderr[-2000:]}")
    row: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,2000,5000,10000")
    parser.add_argument("--failures", default="0,100", help="comma-separated failure counts")
    parser.add_argument("--latency", type=float, default=0.001)
    parser.add_argument("--gc", action="store_true", help="keep the garbage collector running")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--json", help="append one JSON object per run to this file")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--failures-one", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        child(args)
        return
    collector = "collector on" if args.gc else "collector paused"
    print(f"latency {args.latency}s; {collector}; load average before: {load()}")
    print(
        f"{'nodes':>6} {'fails':>5} {'wall s':>8} {'cpu s':>8} {'first s':>8} {'virt rec':>8} "
        f"{'store ops':>11} {'actions':>10} {'peak MB':>8} {'growth':>6}"
    )
    for failures in (int(f) for f in args.failures.split(",")):
        previous = None
        for n in (int(s) for s in args.sizes.split(",")):
            row = measure(n, failures, args)
            row["gc"] = args.gc
            growth = ""
            if previous is not None:
                ratio = math.log(row["cpu"] / previous["cpu"]) / math.log(n / previous["n"])
                growth = f"{ratio:.2f}"
            print(
                f"{n:>6} {failures:>5} {row['wall']:>8.2f} {row['cpu']:>8.2f} "
                f"{row['first_wall']:>8.2f} {row['recovery_virtual']:>8.2f} "
                f"{int(row['store_ops']):>11,} {int(row['actions']):>10,} "
                f"{row['peak_mb']:>8.0f} {growth:>6}",
                flush=True,
            )
            if args.json:
                with open(args.json, "a") as out:
                    out.write(json.dumps(row) + "\n")
            previous = row
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
