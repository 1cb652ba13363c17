"""Re-forming after leaves and crashes in the simulated cluster (R23): over random losses, one
at a time or close together, one world trains at a time, every member holds the stored result
of its round, ranks stay sticky from each round to the next, and every live node trains again
in one full world."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.records import RoundResult
from tpelastic.core.sim.cluster import Cluster, Status

CONFIG = dict(heartbeat_interval=1.0, heartbeat_timeout=3.0, last_call_timeout=2.0)
# A loss, and the virtual seconds before the next one: 0 and one latency make two losses land
# inside one re-forming (the proposal of the first then ends void, R22).
LOSS = st.tuples(
    st.sampled_from(["leave", "crash"]),
    st.integers(0, 1000),
    st.sampled_from([0.0, 0.001, 0.3, 6.0]),
)


def settled(cluster: Cluster, live: int) -> tuple[int, int]:
    """Advance until the ``live`` nodes all train in one world; return its (round, attempt)."""
    for _ in range(800):
        worlds = cluster.worlds()
        if len(worlds) == 1 and next(iter(worlds.values())) == live:
            ((round_no, attempt),) = worlds
            if cluster.round_results[round_no].world_size == live:  # a full world
                return round_no, attempt
        cluster.advance(0.25)
    raise AssertionError(f"{live} live nodes never trained in one world: {cluster.worlds()}")


def sticky(before: RoundResult, after: RoundResult) -> list[str]:
    """Members of ``before`` whose rank still exists in ``after`` but moved."""
    return [
        f"{p.node}: rank {before.rank_of(p.node)} in round {before.round_no}, {rank} in "
        f"round {after.round_no}"
        for rank, p in enumerate(after.participants)
        if (old := before.rank_of(p.node)) is not None and old < after.world_size and old != rank
    ]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 10), losses=st.lists(LOSS, min_size=1, max_size=3))
def test_R23_reforming_after_losses_keeps_one_world_agreement_and_sticky_ranks(
    n: int, losses: list[tuple[str, int, float]]
) -> None:
    config = RendezvousConfig(min_nodes=1, max_nodes=n, join_timeout=600.0, **CONFIG)  # type: ignore[arg-type]
    cluster = Cluster(config=config, latency=0.001, detail=False)
    for i in range(n):
        cluster.start(f"n{i}")
    settled(cluster, n)
    live = n
    for kind, pick, gap in losses:
        training = sorted(
            name for name, node in cluster.nodes.items() if node.status is Status.TRAINING
        )
        if len(training) <= 1:
            break
        victim = training[pick % len(training)]
        (cluster.leave if kind == "leave" else cluster.crash)(victim)
        live -= 1
        cluster.advance(gap)
    round_no, _attempt = settled(cluster, live)

    assert not cluster.overlaps, cluster.overlaps[:3]
    stored = cluster.results()
    for node in cluster.nodes.values():
        if node.status is Status.TRAINING:
            assert node.world == stored[round_no], f"{node.name} holds another round {round_no}"
    moved = [m for r in sorted(stored) if r - 1 in stored for m in sticky(stored[r - 1], stored[r])]
    assert not moved, moved
    final = stored[round_no]
    assert not final.void and final.world_size == live
