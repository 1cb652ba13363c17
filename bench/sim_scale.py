"""How the simulator's cost grows with the number of nodes (a benchmark, not a test).

For each size N and failure count F: N nodes form the first round, then F faults, each followed
by the recovery. What a fault is (``--fault``):

* ``inplace`` (default): a training node's workers fail and the round restarts in place: the
  node opens the round's next attempt, every member learns of it on its held wait and restarts
  as it. The run settles when every node runs attempt k (a recovery is a few milliseconds of
  virtual time, so the members' heartbeats barely run).
* ``rejoin``: the same failure with a rendezvous that cannot restart in place: the failed node
  re-joins and all N nodes re-form the world (a full re-rendezvous; the protocol before
  attempts). Members learn that the next round opened on their held waits.
* ``crash``: a training node dies; the others find it dead (heartbeat timeout) and re-form the
  world without it, after seconds of virtual time. Its ring predecessor proposes the next round
  and the survivors confirm it (specs/rendezvous_join.md, re-forming without a full re-join).
* ``leave``: a training node leaves gracefully; the survivors re-form the world without it (the
  leaver proposes the next round).

Recoveries advance one latency at a time (at least 1 ms) until the recovered world trains.

Each run is its own process (so peak memory is that run's). Prints wall and CPU time, the first
round's wall time, virtual seconds per recovery, store operations, simulator actions (events
processed), peak resident memory, and the growth exponent of CPU time between sizes (1.0 =
linear, 2.0 = quadratic; CPU time, because the machine is shared and wall time moves with the
load), with the load average before and after.

    python bench/sim_scale.py                                  # 1000,2000,5000,10000 x 0,100
    python bench/sim_scale.py --sizes 1000,2000 --failures 10 --fault rejoin

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
FAULTS = ("inplace", "rejoin", "crash", "leave")


def settle(cluster: Cluster, n: int, world: tuple[int, int], step: float = 0.25) -> float:
    """Advance by ``step`` until ``n`` nodes train in ``world`` (round, attempt) and nobody
    else trains; return the virtual seconds it took."""
    started = cluster.now
    while cluster.now - started < 120.0:
        if cluster.worlds() == {world: n}:
            return cluster.now - started
        cluster.advance(step)
    raise RuntimeError(f"{n} nodes did not all train in {world} within 120s")


def victim(cluster: Cluster, n: int, k: int) -> str:
    """The k-th fault's node: spread over the world, the next training one if that one is not."""
    for i in range(n):
        name = f"n{(k * 7919 + i) % n}"
        if cluster.nodes[name].status is Status.TRAINING:
            return name
    raise RuntimeError("no training node left")


def run(n: int, failures: int, latency: float, fault: str) -> dict[str, object]:
    """One measured run in this process."""
    config = RendezvousConfig(min_nodes=max(1, n // 2), max_nodes=n, **CONFIG)
    cluster = Cluster(
        config=config, latency=latency, detail=False, restart_in_place=fault == "inplace"
    )
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        cluster.start(f"n{i}")
    first_virtual = settle(cluster, n, (0, 0))
    # Recoveries are timed one latency at a time: members learn of a new round or attempt on
    # their held waits, milliseconds after it opens, not at a look once a second.
    step = max(latency, 1e-3)
    first_wall = time.perf_counter() - wall
    recovery = 0.0
    for k in range(1, failures + 1):
        name = victim(cluster, n, k)
        if fault in ("crash", "leave"):
            (cluster.crash if fault == "crash" else cluster.leave)(name)
            recovery += settle(cluster, n - k, (k, 0), step)
        elif fault == "rejoin":
            cluster.fail_workers(name)
            recovery += settle(cluster, n, (k, 0), step)
        else:
            cluster.fail_workers(name)
            recovery += settle(cluster, n, (0, k), step)
    assert not cluster.overlaps, cluster.overlaps[:3]
    return {
        "n": n,
        "failures": failures,
        "fault": fault,
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
        row = run(args.one, args.failures_one, args.latency, args.fault)
    else:
        with collector_paused():
            row = run(args.one, args.failures_one, args.latency, args.fault)
    print(json.dumps(row))


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(n: int, failures: int, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, __file__, "--one", str(n), "--failures-one", str(failures)]
    command += ["--latency", str(args.latency), "--fault", args.fault]
    command += ["--gc"] if args.gc else []
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        raise RuntimeError(f"N={n} F={failures} failed:\n{done.stderr[-2000:]}")
    row: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,2000,5000,10000")
    parser.add_argument("--failures", default="0,100", help="comma-separated failure counts")
    parser.add_argument("--fault", choices=FAULTS, default="inplace", help="what a failure is")
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
    print(
        f"fault {args.fault}; latency {args.latency}s; {collector}; load average before: {load()}"
    )
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
                f"{row['first_wall']:>8.2f} {row['recovery_virtual']:>8.3f} "
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
