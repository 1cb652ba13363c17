"""The restart budget's arithmetic, and the budget rules the agent table keeps with it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core import agent as ag
from tpelastic.core import restart_budget as rb
from tpelastic.core.agent import AgentPhase as P
from tpelastic.core.group_values import WorkerFailure


def test_helpers() -> None:
    assert rb.next_restart_count(0, False) == 0
    assert rb.next_restart_count(3, True) == 4
    assert rb.round_restart_count(2, 3, True) == 6
    assert rb.can_restart(0, 1) and not rb.can_restart(1, 1) and not rb.can_restart(0, 0)
    assert rb.within_budget(1, 1) and not rb.within_budget(2, 1)
    assert rb.attempt_count(5, 2, 4) == 7
    assert rb.attempts_allowed(0) == 1 and rb.attempts_allowed(3) == 4


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rb.next_restart_count(-1, True), "restart_count must be >= 0, got -1"),
        (lambda: rb.round_restart_count(0, -1, True), "attempts must be >= 0, got -1"),
        (lambda: rb.can_restart(0, -2), "max_restarts must be >= 0, got -2"),
        (lambda: rb.attempts_allowed(-1), "max_restarts must be >= 0, got -1"),
    ],
)
def test_bad_input_is_one_clear_error(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


@given(
    prev=st.integers(0, 100),
    reports=st.lists(st.booleans(), max_size=8),
)
def test_B3_a_round_spends_at_most_one_unit(prev: int, reports: list[bool]) -> None:
    """However many nodes report a failure for one round, its count rises by at most one."""
    after = rb.next_restart_count(prev, any(reports))
    assert after - prev == (1 if any(reports) else 0)


CONFIG = ag.AgentConfig(
    max_restarts=2, min_nodes=1, max_nodes=3, restart_in_place=True, collateral_window=2.0
)


def _running(restart_count: int, attempt: int) -> ag.AgentState:
    return ag.AgentState(
        phase=P.RUNNING,
        round=3,
        group_rank=0,
        group_world_size=2,
        restart_count=restart_count,
        attempt=attempt,
    )


membership_changes = st.one_of(
    st.builds(ag.NodesWaiting, now=st.floats(0, 50), count=st.integers(1, 2)),
    st.builds(
        ag.NextRoundOpened,
        now=st.floats(0, 50),
        round=st.just(4),
        reason=st.sampled_from(["membership", "scale_up", "failure"]),
    ),
    st.builds(ag.KeepAliveLapsed, now=st.floats(0, 50), reason=st.just("paused")),
)


@given(count=st.integers(0, 2), attempt=st.integers(0, 2), change=membership_changes)
def test_B4_membership_changes_spend_nothing(
    count: int, attempt: int, change: ag.AgentEventT
) -> None:
    """A membership change (nodes waiting, a peer's new round, a lapsed keep-alive) never
    raises the agent's count and re-joins without reporting a failure; with no attempt
    started within the collateral window it reports every attempt it ran."""
    state = _running(max(count, attempt), attempt)
    result = ag.step(state, change, CONFIG)
    assert result.state.restart_count == state.restart_count
    joins = [e for e in result.effects if isinstance(e, ag.JoinRendezvous)]
    assert all(j == ag.JoinRendezvous(failure=False) for j in joins), result.effects


@given(
    attempts=st.lists(st.floats(0.01, 5), min_size=1, max_size=4),
    lost_after=st.floats(0, 5),
    window=st.floats(0.5, 3),
    reason=st.sampled_from(["membership", "scale_up", "failure"]),
)
def test_B7_attempts_a_peers_loss_caused_are_not_charged(
    attempts: list[float], lost_after: float, window: float, reason: str
) -> None:
    """In-place restarts at random gaps, then the round superseded: the join reports as spent
    the attempts that started more than collateral_window before a peer's loss
    (``membership``), every attempt for any other reason; the next round's count, computed by
    its closer from what the join reports, then leaves the refunded ones out and still fits
    the agent."""
    config = ag.AgentConfig(
        max_restarts=len(attempts),
        min_nodes=1,
        max_nodes=3,
        restart_in_place=True,
        collateral_window=window,
    )
    state, now, started = _running(0, 0), 0.0, []
    for gap in attempts:
        now += gap
        failed = ag.WorkersFailed(now=now, failures=(_failure(now),))
        state = ag.step(state, failed, config).state
        started.append(now)
    lost = now + lost_after
    superseded = ag.NextRoundOpened(now=lost, round=4, reason=reason)
    result = ag.step(state, superseded, config)
    (join,) = [e for e in result.effects if isinstance(e, ag.JoinRendezvous)]
    caused = [at for at in started if lost - at <= window] if reason == "membership" else []
    spent = len(started) - len(caused)
    assert join.failure is False
    assert join.charged_attempt == (spent if caused else None)
    reported = len(started) if join.charged_attempt is None else join.charged_attempt
    next_count = rb.round_restart_count(0, reported, failure_reported=False)
    assert next_count == spent
    completed = ag.RoundCompleted(
        now=lost + 1, round=4, group_rank=0, group_world_size=1, restart_count=next_count
    )
    after = ag.step(result.state, completed, config).state
    assert after.phase is P.RUNNING and after.restart_count == spent


def _failure(now: float) -> WorkerFailure:
    return WorkerFailure(
        local_rank=0, global_rank=0, exitcode=1, signal=None, at=now, reason="peer closed"
    )
