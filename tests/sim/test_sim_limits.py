"""What the simulator does not model is refused with one clear message, not simulated wrongly."""

from __future__ import annotations

import pytest

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.sim.cluster import Cluster


def test_the_simulator_refuses_leased_liveness_it_cannot_model() -> None:
    config = RendezvousConfig(min_nodes=1, max_nodes=2, leased_liveness=True)
    with pytest.raises(ValueError, match="counted heartbeats only"):
        Cluster(config=config)


def test_counted_liveness_is_simulated() -> None:
    cluster = Cluster(config=RendezvousConfig(min_nodes=1, max_nodes=2, last_call_timeout=1.0))
    cluster.start("a")
    cluster.advance(2.0)
    assert cluster.training_rounds() == {0}
