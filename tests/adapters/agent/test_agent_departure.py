"""A finished agent's departure carried out over a real TCPStore (tpelastic/adapters/agent/
barrier.py::depart, decided by tpelastic/core/agent/departure.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

from tpelastic.adapters.agent.barrier import depart
from tpelastic.adapters.agent.env import RoundFacts
from tpelastic.adapters.agent.membership import Joined
from tpelastic.adapters.stores.tcp_client import connect
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.core.agent.states import EXIT_OK, EXIT_SIGNAL_BASE

KEY = "agent/exit/2/departed"


class Member:
    """What depart reads of a Membership: the round joined (its store is a real client of
    the server) and whether this node hosts the store. Standing in for the handler, which
    would need a whole rendezvous to say just that."""

    def __init__(
        self, server: StoreServer, world: int, hosts_store: bool, timeout: float = 5.0
    ) -> None:
        facts = RoundFacts(
            round=2,
            group_rank=0,
            group_world_size=world,
            restart_count=0,
            master_addr="127.0.0.1",
            master_port=1,
        )
        self.joined = Joined(facts=facts, store=connect("127.0.0.1", server.port, timeout=timeout))
        self.hosts_store = hosts_store

    def wait_until_alone(self, timeout: float) -> bool:
        raise AssertionError("a node with a world counts departures")


def test_D3_the_hosts_wait_for_its_peers_departure_over_a_real_store(server: StoreServer) -> None:
    host: Any = Member(server, world=2, hosts_store=True)
    peer = connect("127.0.0.1", server.port, timeout=5.0)
    threading.Timer(0.5, peer.add, args=(KEY, 1)).start()
    began = time.monotonic()
    why = depart(host, EXIT_OK, 300.0)
    took = time.monotonic() - began
    assert why == "all 2 nodes departed"
    assert 0.4 <= took < 5.0  # waited for the peer, and not to the 10 s bound
    # A node that hosts nothing says it is done and goes.
    guest: Any = Member(server, world=2, hosts_store=False)
    began = time.monotonic()
    assert depart(guest, EXIT_OK, 300.0) == "said done; the store is not this node's"
    assert time.monotonic() - began < 2.0
    assert peer.get(KEY) == b"3"
    # A signal's exit waits for nobody, and says nothing.
    assert depart(guest, EXIT_SIGNAL_BASE + 15, 300.0) == "nobody waits on this node's end"
    assert peer.get(KEY) == b"3"


def test_D3_a_stop_signal_ends_the_hosts_wait_within_a_slice(server: StoreServer) -> None:
    host: Any = Member(server, world=3, hosts_store=True)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    began = time.monotonic()
    why = depart(host, EXIT_OK, 300.0, stopped=stop.is_set)
    assert why == "a stop signal came"
    assert time.monotonic() - began < 3.0  # not the 10 s bound


def test_a_store_that_is_gone_ends_the_hosts_wait_at_once(server: StoreServer) -> None:
    host: Any = Member(server, world=3, hosts_store=True, timeout=1.0)
    server.stop()
    began = time.monotonic()
    why = depart(host, EXIT_OK, 300.0)
    assert why.startswith("the store is gone")
    assert time.monotonic() - began < 4.0  # the client's own outage bound (1 s), not 10 s
