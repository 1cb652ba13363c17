"""Per-node liveness by etcd lease, with real agent processes on a real etcd (issue 8).

Each agent writes its heartbeat key under its own lease (TTL = keep-alive expiry, here
0.5 s x 4 = 2 s). A SIGKILLed agent stops renewing it; etcd deletes the key when the lease
expires, and its ring predecessor, seeing the key gone (no counter is timed), opens the next
round: the survivors form it within the TTL plus a margin. A graceful leave revokes the lease,
so the key is gone at once.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest
from test_rendezvous_dynamic_agents import Cluster, _agree, _etcd_agents

from tpelastic.core.rendezvous.keys import RunKeys

INTERVAL, ATTEMPTS = 0.5, 4
TTL = INTERVAL * ATTEMPTS
CONF = {"keep_alive_interval": INTERVAL, "keep_alive_max_attempt": ATTEMPTS}
# Lease expiry is checked by etcd's leader every 0.5 s; the predecessor looks every 0.25 s; then
# a round of joins. Generous, for two shared cores: the point is "about the TTL", not "fast".
MARGIN = 3.0


def _heartbeat(store: Any, run_id: str, node: str) -> bytes | None:
    return store.get(RunKeys(run_id).heartbeat(node))


@pytest.mark.slow
def test_a_killed_node_is_dropped_when_its_lease_expires_and_a_leaver_revokes_its_own() -> None:
    run_id = "lease-liveness"
    with _etcd_agents(run_id) as (agents_of, store):
        assert isinstance(agents_of, Cluster)
        agents = agents_of.start_together(3, 2, 3, **CONF)
        rounds = [a.next("round") for a in agents]
        _agree(rounds, world=3, round_no=0)
        nodes = [r["node"] for r in rounds]
        assert all(_heartbeat(store, run_id, n) == b"alive" for n in nodes)

        killed_at = agents[2].signal(signal.SIGKILL)
        agents[2].exit_code()
        # Until its lease expires the key stays: nobody times anything meanwhile.
        assert _heartbeat(store, run_id, nodes[2]) == b"alive"
        rounds = [a.next("round", timeout=TTL + MARGIN + 10) for a in agents[:2]]
        _agree(rounds, world=2, round_no=1)
        after_kill = max(r["t"] for r in rounds) - killed_at
        print(f"SIGKILL -> new round in {after_kill:.2f} s (lease TTL {TTL:g} s)")
        assert TTL * 0.5 < after_kill < TTL + MARGIN
        assert _heartbeat(store, run_id, nodes[2]) is None

        # A graceful leave: the lease is revoked, so the key is gone as soon as it exits.
        agents[1].signal(signal.SIGTERM)
        assert agents[1].next("left")["ok"] is True
        assert agents[1].exit_code() == 0
        assert _heartbeat(store, run_id, nodes[1]) is None
        assert _heartbeat(store, run_id, nodes[0]) == b"alive"
