"""The simulated members hold the real round watcher's wait on every watch key: they learn that
the next round opened, that nodes arrived at it, or that the job closed one latency after the
key is written, not at their next periodic look (once per heartbeat interval)."""

from __future__ import annotations

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.sim.cluster import Cluster, Status

LATENCY = 0.01
STEP = 0.001  # how finely the tests watch the store: a tenth of a latency


def formed(names: str, max_nodes: int = 4, **fields: object) -> Cluster:
    config = RendezvousConfig(
        min_nodes=2,
        max_nodes=max_nodes,
        join_timeout=600.0,
        last_call_timeout=2.0,
        heartbeat_interval=1.0,
        heartbeat_timeout=3.0,
    )
    cluster = Cluster(config=config, latency=LATENCY, **fields)  # type: ignore[arg-type]
    for name in names:
        cluster.start(name)
    cluster.advance(2.5)  # past the last call when the world is not full
    assert cluster.worlds() == {(0, 0): len(names)}
    return cluster


def written_by(cluster: Cluster, key: str, within: float = 0.5) -> float:
    """Advance in steps of STEP until ``key`` is in the store; the instant it was seen (the
    write happened in the last STEP)."""
    end = cluster.now + within
    while key not in cluster.store:
        assert cluster.now < end, f"{key} was not written within {within}s"
        cluster.advance(STEP)
    return cluster.now


def joins(cluster: Cluster, since: float, reason: str) -> dict[str, float]:
    return {
        r.node: r.t
        for r in cluster.records
        if r.name == "rendezvous.join_started"
        and r.t >= since
        and dict(r.fields)["reason"] == reason
    }


def one_latency_after(write_seen: float, at: float) -> bool:
    # The write happened in (write_seen - STEP, write_seen]; the wake-up one latency later.
    return write_seen - STEP < at - LATENCY <= write_seen + 1e-9


def test_members_learn_the_next_round_opened_one_latency_after_it_is_written() -> None:
    cluster = formed("abcd", restart_in_place=False)
    failed_at = cluster.now
    cluster.fail_workers("b")  # b re-joins reporting the failure: it opens round 1
    seen = written_by(cluster, cluster.keys.opened(1))
    cluster.advance(0.1)  # far less than a heartbeat interval: no periodic look ran
    rejoined = joins(cluster, failed_at, "rejoin")
    assert sorted(rejoined) == ["a", "c", "d"]
    for at in rejoined.values():
        assert one_latency_after(seen, at), (seen, rejoined)
    cluster.advance(0.5)
    assert cluster.worlds() == {(1, 0): 4}
    assert not cluster.overlaps


def test_members_learn_of_an_arrival_at_once_and_scale_up() -> None:
    cluster = formed("abc")
    started = cluster.now
    cluster.start("d")  # room for one more: the members open the next round for it
    seen = written_by(cluster, cluster.keys.arrivals(1))
    cluster.advance(0.1)
    scaled = joins(cluster, started, "scale_up")
    assert scaled, "no member scaled up within 0.1 s"
    assert all(one_latency_after(seen, at) for at in scaled.values()), (seen, scaled)
    cluster.advance(0.5)
    assert cluster.worlds() == {(1, 0): 4}


def test_an_arrival_at_a_full_world_wakes_the_members_but_changes_nothing() -> None:
    cluster = formed("abc", max_nodes=3)
    cluster.start("d")
    written_by(cluster, cluster.keys.arrivals(1))
    cluster.advance(3.0)  # several looks too
    assert cluster.worlds() == {(0, 0): 3}
    assert cluster.nodes["d"].status is Status.JOINING
    assert not joins(cluster, 0.1, "scale_up")


def test_members_learn_the_job_closed_one_latency_after_it_is_written() -> None:
    cluster = formed("abc")
    cluster.close("a")
    seen = written_by(cluster, cluster.keys.closed())
    cluster.advance(LATENCY + STEP)
    assert {n.name: n.status for n in cluster.nodes.values()} == dict.fromkeys("abc", Status.FAILED)
    assert all(n.failure.startswith("closed") for n in cluster.nodes.values())
    assert cluster.now < seen + 0.5  # not at the next look


def test_held_waits_of_an_earlier_round_are_not_woken_by_the_close() -> None:
    # After a re-rendezvous the closed key carries only the current round's waits: a member
    # of round 1 is woken once, and the waits of round 0 were dropped (their round is over).
    cluster = formed("abcd", restart_in_place=False)
    cluster.fail_workers("b")
    cluster.advance(0.5)
    assert cluster.worlds() == {(1, 0): 4}
    held = cluster.sim_store._held[cluster.keys.closed()]
    assert sorted(entry[0].name for entry in held) == list("abcd")  # type: ignore[index]
    cluster.close("c")
    cluster.advance(0.1)
    assert all(n.status is Status.FAILED for n in cluster.nodes.values())


def test_the_same_run_twice_gives_the_same_records() -> None:
    def trace() -> list[tuple[float, str, str]]:
        cluster = formed("abcd", restart_in_place=False)
        cluster.fail_workers("c")
        cluster.advance(1.0)
        cluster.start("e")
        cluster.crash("a")
        cluster.advance(10.0)
        return [(r.t, r.name, r.node) for r in cluster.records]

    assert trace() == trace()
