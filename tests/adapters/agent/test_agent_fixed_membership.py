"""Fixed membership restarts in place through the core's attempt protocol (our TCPStore, two
members on threads): the look reports the next attempt from the core's keys, both members agree
on its fresh endpoint and count, a late joiner comes into the newest attempt, the close is the
core's versioned record, and a static handler restarts in place too."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from attempt_helpers import enter

from tpelastic.adapters.agent.effect_handlers import RendezvousEffects, RunRecord
from tpelastic.adapters.agent.membership import Joined, Membership
from tpelastic.adapters.agent.observers import Observers
from tpelastic.adapters.agent.pumps import Inbox, JoinEnded, JoinPump
from tpelastic.adapters.agent.spec import WorkerSpec
from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.rendezvous.info import RendezvousInfo
from tpelastic.adapters.stores.tcp_client import connect
from tpelastic.adapters.stores.tcp_server import StoreServer
from tpelastic.core import agent as core
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.records import ClosedRecord, decode_closed
from tpelastic.rendezvous import RendezvousStateError


class FixedHandler:
    """A third-party handler of fixed membership: ranks given, one real store, no rounds."""

    def __init__(self, port: int, run_id: str, rank: int) -> None:
        self._store = connect("127.0.0.1", port, timeout=5.0)
        self._run_id, self._rank = run_id, rank
        self.closed = False

    def get_run_id(self) -> str:
        return self._run_id

    def next_rendezvous(self) -> RendezvousInfo:
        return RendezvousInfo(self._store, self._rank, 2)

    def num_nodes_waiting(self) -> int:
        return 0

    def set_closed(self) -> None:
        self.closed = True

    def shutdown(self) -> bool:
        self._store.close()
        return True


def _all(calls: list[Callable[[], Any]], timeout: float = 30.0) -> list[Any]:
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result(timeout=timeout) for f in [pool.submit(c) for c in calls]]


def _member(server: StoreServer, run_id: str, rank: int) -> Membership:
    return Membership(FixedHandler(server.port, run_id, rank), local_addr="127.0.0.1")


def _pair(server: StoreServer, run_id: str) -> list[Membership]:
    pair = [_member(server, run_id, rank) for rank in (0, 1)]
    _all([lambda m=m: m.join(failure=False) for m in pair])  # type: ignore[misc]
    return pair


def test_fixed_membership_restarts_in_place_on_the_cores_attempt_keys(
    server: StoreServer,
) -> None:
    zero, one = _pair(server, "fixed-a")
    assert zero.in_place and one.in_place
    before = one.joined
    assert before is not None and before.facts.attempt == 0 and before.facts.round == 0
    zero.open_attempt(1, "worker local rank 0 failed")
    raw = connect("127.0.0.1", server.port, timeout=5.0)
    assert raw.get(RunKeys("fixed-a").attempt(0, 1)) is not None  # the core's key, versioned
    assert one.look().next_attempt == (1, "worker local rank 0 failed")
    got = _all([lambda m=m: enter(m, 1, 1) for m in (zero, one)])  # type: ignore[misc]
    assert all(isinstance(j, Joined) for j in got)
    assert {(j.facts.attempt, j.facts.restart_count, j.facts.round) for j in got} == {(1, 1, 0)}
    assert len({(j.facts.master_addr, j.facts.master_port) for j in got}) == 1
    assert got[0].facts.master_port != before.facts.master_port
    assert one.look().next_attempt is None  # the look now reads attempt 2
    for m in (zero, one):
        m.leave()


def test_a_late_joiner_comes_into_the_newest_attempt(server: StoreServer) -> None:
    zero, one = _pair(server, "fixed-b")
    zero.open_attempt(1, "exit 1")
    zero.open_attempt(2, "exit 1")
    _all([lambda m=m: enter(m, 2, 2) for m in (zero, one)])  # type: ignore[misc]
    one.leave()
    again = _member(server, "fixed-b", 1)
    joined = again.join(failure=False)
    assert (joined.facts.attempt, joined.facts.restart_count) == (2, 2)
    assert enter(again, 2, 2) is joined  # already there: no second endpoint
    assert zero.joined is not None
    assert joined.facts.master_port == zero.joined.facts.master_port
    # The attempt after a failure is the agent's to open (OpenAttempt), never a join's.
    failed = _member(server, "fixed-b", 1)
    with pytest.raises(ValueError, match="restarts in place"):
        failed.join(failure=True)
    for m in (zero, again, failed):
        m.leave()


def test_a_late_joiner_starts_its_workers_for_the_newest_attempt(server: StoreServer) -> None:
    zero, one = _pair(server, "fixed-e")
    zero.open_attempt(1, "exit 1")
    _all([lambda m=m: enter(m, 1, 1) for m in (zero, one)])  # type: ignore[misc]
    one.leave()
    late = _member(server, "fixed-e", 1)
    spec = WorkerSpec(
        role="trainer",
        local_world_size=1,
        rdzv_handler=late.handler,
        entrypoint="unused",
        max_restarts=3,
        min_nodes=2,
        max_nodes=2,
    )
    config = core.AgentConfig(max_restarts=3, min_nodes=2, max_nodes=2, restart_in_place=True)
    state = core.AgentState(phase=core.AgentPhase.RENDEZVOUS)
    observers = Observers(spec, config, lambda: "fixed-e", lambda: state)
    inbox = Inbox()
    joins = JoinPump(inbox, now=SYSTEM_CLOCK.now)
    effects = RendezvousEffects(
        spec, late, observers, SYSTEM_CLOCK, inbox, RunRecord(), joins, phase=lambda: state.phase
    )
    joined = late.join(failure=False)
    seen = effects.ended(JoinEnded(serial=1, outcome=joined, started=SYSTEM_CLOCK.now()))
    assert isinstance(seen, core.RoundCompleted)
    assert (seen.attempt, seen.restart_count) == (1, 1)
    (start,) = core.step(state, seen, config).effects
    assert isinstance(start, core.StartWorkers)
    assert (start.attempt, start.restart_count) == (1, 1)  # attempt 1's namespace and count
    for m in (zero, late):
        m.leave()


def test_the_close_is_the_cores_record_and_every_member_reads_it(server: StoreServer) -> None:
    zero, one = _pair(server, "fixed-c")
    zero.close("failed", "budget spent")
    assert one.look().closed == ("failed", "budget spent")
    raw = connect("127.0.0.1", server.port, timeout=5.0)
    stored = raw.get(RunKeys("fixed-c").closed())
    assert stored is not None
    assert decode_closed(stored) == ClosedRecord(outcome="failed", reason="budget spent")
    assert b'"v": 1' in stored
    for m in (zero, one):
        m.leave()


def test_a_foreign_closed_record_is_corrupt_state_named_by_its_key(server: StoreServer) -> None:
    zero, one = _pair(server, "fixed-d")
    key = RunKeys("fixed-d").closed()
    connect("127.0.0.1", server.port, timeout=5.0).set(key, b"1")
    with pytest.raises(RendezvousStateError, match=f"corrupt rendezvous state at {key!r}"):
        one.look()
    for m in (zero, one):
        m.leave()


def test_a_static_handler_restarts_in_place() -> None:
    from tpelastic.adapters.rendezvous.static import StaticTCPRendezvous

    assert Membership(StaticTCPRendezvous.__new__(StaticTCPRendezvous)).in_place


def test_a_member_waits_for_rank_0_in_slices_and_looks_last_at_the_deadline(
    server: StoreServer,
) -> None:
    zero, _ = _pair(server, "fixed-e")
    late = Membership(FixedHandler(server.port, "fixed-e", 1), bootstrap_timeout=1.0)
    late.join(failure=False)
    zero.open_attempt(1, "exit 1")  # rank 0 never publishes attempt 1's endpoint
    looks: list[float] = []

    def look(now: float) -> None:
        looks.append(now)

    failed = enter(late, 1, 1, look)
    assert isinstance(failed, core.RendezvousFailed) and failed.kind == "timeout"
    assert "endpoint of round 0 attempt 1: nothing within 1 s" in failed.reason
    assert len(looks) == 2  # one per 0.5 s slice, the last at the deadline
    for m in (zero, late):
        m.leave()
