"""Membership restarts a round in place over real DynamicRendezvousHandlers (our TCPStore,
handlers on threads, one client each): the look reports the next attempt, both members agree on
the attempt's fresh endpoint and count, the workers' environment names the attempt, a member
waiting for rank 0's endpoint is released by what its look sees, and a user-fixed endpoint is
kept (fixed membership: test_agent_fixed_membership.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from attempt_helpers import enter

from tpelastic.adapters.agent.env import worker_envs
from tpelastic.adapters.agent.membership import Joined, Membership
from tpelastic.adapters.stores.tcp_client import connect
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.rendezvous import DynamicRendezvousHandler, P10dRendezvousBackend

FAST = {
    "join_timeout": 15.0,
    "last_call_timeout": 0.3,
    "heartbeat_interval": 0.3,
    "heartbeat_timeout": 5.0,
}


def _membership(port: int, run_id: str, node: str, **kwargs: Any) -> Membership:
    store = P10dRendezvousBackend(connect("127.0.0.1", port, timeout=5.0))
    config = RendezvousConfig(min_nodes=2, max_nodes=2, **FAST)
    handler = DynamicRendezvousHandler(
        run_id, store, config, backend_name="tcp", node_id=node, local_addr="127.0.0.1"
    )
    return Membership(handler, **kwargs)


def _all(calls: list[Callable[[], Any]], timeout: float = 30.0) -> list[Any]:
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result(timeout=timeout) for f in [pool.submit(c) for c in calls]]


def _ranked(server: StoreServer, run_id: str, **kwargs: Any) -> Iterator[list[Membership]]:
    """Two members joined in one round, rank 0 first."""
    pair = [_membership(server.port, run_id, n, **kwargs) for n in ("a", "b")]
    try:
        _all([lambda m=m: m.join(failure=False) for m in pair])  # type: ignore[misc]
        yield sorted(pair, key=lambda m: m.joined.facts.group_rank)  # type: ignore[union-attr]
    finally:
        for m in pair:
            m.leave()


@pytest.fixture
def members(server: StoreServer, request: pytest.FixtureRequest) -> Iterator[list[Membership]]:
    yield from _ranked(server, request.node.name[:40])


def test_both_members_agree_on_the_attempt_and_its_environment(members: list[Membership]) -> None:
    zero, one = members
    assert zero.in_place and one.in_place
    before = zero.joined
    assert before is not None
    zero.open_attempt(1, "worker local rank 0 failed")
    seen = one.look()
    assert seen.next_attempt == (1, "worker local rank 0 failed")
    count = before.facts.restart_count + 1
    got = _all([lambda m=m: enter(m, 1, count) for m in members])  # type: ignore[misc]
    assert all(isinstance(j, Joined) for j in got)
    facts = [j.facts for j in got]
    assert {f.attempt for f in facts} == {1} and {f.restart_count for f in facts} == {count}
    assert {f.round for f in facts} == {before.facts.round}
    assert len({(f.master_addr, f.master_port) for f in facts}) == 1
    assert facts[0].master_port != before.facts.master_port
    env = worker_envs(role="r", local_world_size=1, facts=facts[1], max_restarts=3, run_id="x")
    assert env[0]["TPELASTIC_ATTEMPT"] == "1"
    assert env[0]["TORCHELASTIC_RESTART_COUNT"] == env[0]["TPELASTIC_RESTART_COUNT"] == str(count)
    assert one.look().next_attempt is None  # the look now reads attempt 2


def test_a_member_waiting_for_rank_0_is_released_by_its_look(members: list[Membership]) -> None:
    zero, one = members
    zero.open_attempt(1, "exit 1")  # rank 0 never asks for the attempt's endpoint
    looks: list[float] = []

    def look(now: float) -> str | None:
        looks.append(now)
        return "a newer round" if len(looks) == 2 else None

    started = time.monotonic()
    assert enter(one, 1, 1, look) == "a newer round"
    assert len(looks) == 2 and time.monotonic() - started < 10.0


def test_a_fixed_master_endpoint_is_kept_for_every_attempt(
    server: StoreServer,
) -> None:
    for zero, one in _ranked(server, "fixed", master_addr="127.0.0.1", master_port=29999):
        zero.open_attempt(1, "exit 1")
        got = _all([lambda m=m: enter(m, 1, 1) for m in (zero, one)])  # type: ignore[misc]
        assert {(j.facts.master_addr, j.facts.master_port) for j in got} == {("127.0.0.1", 29999)}


def test_the_exit_barrier_is_per_attempt(members: list[Membership]) -> None:
    from tpelastic.adapters.agent.barrier import arrive, arrived

    zero, one = members
    round_no = zero.joined.facts.round  # type: ignore[union-attr]

    # One finished attempt 0; then zero's worker failed: attempt 1.
    arrive(one, round_no)
    assert arrived(zero, round_no) == 1
    zero.open_attempt(1, "exit 1")
    _all([lambda m=m: enter(m, 1, 1) for m in members])  # type: ignore[misc]
    # One's arrival at attempt 0 does not count for attempt 1.
    assert arrived(zero, round_no) == 0
    arrive(zero, round_no)
    arrive(one, round_no)
    assert arrived(one, round_no) == 2
