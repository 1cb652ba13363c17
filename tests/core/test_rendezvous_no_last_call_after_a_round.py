"""The last call waits for nodes still starting up: the first round has it, a round after another
completes as soon as every member of that one arrived, left or was found dead."""

from __future__ import annotations

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.sim.cluster import Cluster

LAST_CALL = 30.0  # far longer than anything else here: waiting for it shows at once


def cluster(min_nodes: int = 1, max_nodes: int = 4) -> Cluster:
    config = RendezvousConfig(
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        join_timeout=1000.0,
        last_call_timeout=LAST_CALL,
        heartbeat_interval=1.0,
        heartbeat_timeout=3.0,
    )
    return Cluster(config=config)


def test_the_first_round_below_max_waits_for_the_last_call() -> None:
    run = cluster()
    run.start("a")
    run.start("b")
    run.advance(LAST_CALL - 1.0)
    assert run.training_rounds() == set()
    run.advance(2.0)
    assert run.training_rounds() == {0}


def test_survivors_of_a_leave_complete_their_round_without_the_last_call() -> None:
    run = cluster()
    for name in "abc":
        run.start(name)
    run.advance(LAST_CALL + 1.0)
    assert run.training_rounds() == {0}
    run.leave("c")
    run.advance(2.0)  # the others' next watch, their joins: no last call
    assert run.training_rounds() == {1}
    assert sorted(p.node for p in run.results()[1].participants) == ["a", "b"]


def test_survivors_of_a_crash_complete_their_round_once_it_is_found_dead() -> None:
    run = cluster()
    for name in "abc":
        run.start(name)
    run.advance(LAST_CALL + 1.0)
    run.crash("b")
    # first sighting (a tick), the heartbeat timeout, the others' next watch and their joins
    run.advance(1.0 + 3.0 + 1.0 + 1.0)
    assert run.training_rounds() == {1}
    assert sorted(p.node for p in run.results()[1].participants) == ["a", "c"]


def test_a_newcomer_is_admitted_as_soon_as_every_member_rejoined() -> None:
    run = cluster()
    run.start("a")
    run.start("b")
    run.advance(LAST_CALL + 1.0)
    run.start("c")
    run.advance(2.0)  # the members see it waiting at their next watch and rejoin
    last = max(run.results())
    assert run.training_rounds() == {last}
    assert run.results()[last].world_size == 3
