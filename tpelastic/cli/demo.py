"""``tpelastic demo``: an elastic job in virtual time, printed as a timeline.

It runs the real rendezvous machine for a handful of nodes over the in-memory store of the
simulator, with a crash, a late joiner, a worker failure and a graceful leave, and prints what
each node saw. (When the launcher lands, this command will run a real tensorplay training.)
"""

from __future__ import annotations

import argparse

from tpelastic.cli.errors import UsageError
from tpelastic.sim import Cluster, RendezvousConfig


def add_parser(commands: argparse._SubParsersAction, name: str) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        name, help="run the demo: an elastic job, simulated, as a timeline"
    )
    parser.add_argument("--nodes", type=int, default=4, help="nodes at the start (default 4)")


def run(args: argparse.Namespace) -> int:
    if not 2 <= args.nodes <= 64:
        raise UsageError(f"--nodes must be between 2 and 64, got {args.nodes}")
    config = RendezvousConfig(
        min_nodes=2,
        max_nodes=args.nodes,
        join_timeout=600.0,
        last_call_timeout=2.0,
        heartbeat_interval=1.0,
        heartbeat_timeout=3.0,
    )
    cluster = Cluster(config=config)
    names = [f"node{i}" for i in range(args.nodes)]
    print(
        f"elastic job: min_nodes=2 max_nodes={args.nodes}, heartbeat 1s, timeout 3s, "
        "last call 2s (virtual time)"
    )
    for name in names:
        cluster.start(name)
    script = [
        (10.0, "crash", names[1]),
        (10.0, "start", "late-node"),
        (10.0, "fail_workers", names[0]),
        (10.0, "leave", names[-1]),
    ]
    for wait, action, name in script:
        cluster.advance(wait)
        getattr(cluster, action)(name)
    cluster.advance(10.0)
    for line in cluster.log:
        print(line)
    results = cluster.results()
    last = results[max(results)]
    print(
        f"\n{len(results)} rounds in {cluster.now:.0f}s of virtual time, "
        f"{cluster.store_ops} store operations; the last round has "
        f"{last.world_size} nodes and restart count {last.restart_count}; "
        f"worlds that trained side by side: {len(cluster.overlaps)}"
    )
    return 0
