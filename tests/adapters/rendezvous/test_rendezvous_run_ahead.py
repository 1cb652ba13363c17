"""A node that finds the run ahead of it joins what is forming (specs/rendezvous_join.md, R18).

Results are written in order and never removed, so a missing previous result means the node
looked too far: the ``published`` hint ran ahead of the results, or the store holds no result of
the round the node comes from (a store that started again empty). Over a real TCPStore.
"""

from __future__ import annotations

from tpelastic.adapters.rendezvous.driver import run_join
from tpelastic.adapters.stores import tcp_client
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys

CONFIG = RendezvousConfig(
    min_nodes=1,
    max_nodes=1,
    join_timeout=10.0,
    heartbeat_interval=0.2,
    heartbeat_timeout=1.0,
    last_call_timeout=0.1,
)


def test_R18_a_node_from_a_round_the_store_never_held_joins_the_forming_round(
    server: StoreServer,
) -> None:
    store = tcp_client.connect("127.0.0.1", server.port, timeout=5.0)
    try:
        # The node was in round 7 of a store that has since started again empty.
        joined = run_join(store, CONFIG, run_id="fresh", node="a", from_round=7, reason="rejoin")
        assert joined.result.round_no == 0 and joined.rank == 0
    finally:
        store.close()


def test_R18_a_published_hint_ahead_of_the_results_is_walked_back(server: StoreServer) -> None:
    store = tcp_client.connect("127.0.0.1", server.port, timeout=5.0)
    try:
        first = run_join(store, CONFIG, run_id="hint", node="a")
        assert first.result.round_no == 0
        store.add(RunKeys("hint").published_rounds(), 3)  # the hint says 4 rounds, 1 exists
        late = run_join(store, CONFIG, run_id="hint", node="b")
        assert late.result.round_no == 1
        # And the member of round 0 that follows it on joins the round after.
        again = run_join(store, CONFIG, run_id="hint", node="a", from_round=0, reason="rejoin")
        assert again.result.round_no == 2
    finally:
        store.close()
