"""The restart budget by example: its helpers, and every row of its table at least once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core import restart_budget as rb
from tpelastic.core.restart_budget import BudgetPhase as BP
from tpelastic.core.values import Rejected

CFG = rb.BudgetConfig(max_restarts=2)
AVAILABLE = rb.BudgetState(phase=BP.AVAILABLE, restart_count=1)
PENDING = rb.BudgetState(phase=BP.AVAILABLE, restart_count=1, failure_pending=True)
EXHAUSTED = rb.BudgetState(phase=BP.EXHAUSTED, restart_count=2)

# (name, state, event, expected phase, expected effect types)
EXAMPLES = [
    ("membership round", AVAILABLE, rb.RoundAgreed(now=1, restart_count=1), BP.AVAILABLE, []),
    ("last restart", PENDING, rb.RoundAgreed(now=1, restart_count=2), BP.EXHAUSTED, []),
    ("late membership round", EXHAUSTED, rb.RoundAgreed(now=1, restart_count=2), BP.EXHAUSTED, []),
    (
        "failure, budget left",
        AVAILABLE,
        rb.FailureReported(now=1),
        BP.AVAILABLE,
        [rb.RequestRestart],
    ),
    ("failure, no budget", EXHAUSTED, rb.FailureReported(now=1), BP.EXHAUSTED, [rb.FailJob]),
    ("join", AVAILABLE, rb.MembershipChanged(now=1), BP.AVAILABLE, [rb.RequestRerendezvous]),
    ("leave", EXHAUSTED, rb.MembershipChanged(now=1), BP.EXHAUSTED, [rb.RequestRerendezvous]),
]


@pytest.mark.parametrize(
    ("name", "state", "event", "phase", "effects"), EXAMPLES, ids=[e[0] for e in EXAMPLES]
)
def test_example(
    name: str, state: rb.BudgetState, event: rb.BudgetEventT, phase: BP, effects: list[type]
) -> None:
    result = rb.step(state, event, CFG)
    assert result.state.phase is phase
    assert [type(e) for e in result.effects] == effects


def test_every_row_has_an_example() -> None:
    used = {rb.TABLE.select(state, event, CFG) for _, state, event, _, _ in EXAMPLES}
    assert used == set(rb.TABLE.rows)


def test_effects_carry_the_facts() -> None:
    asked = rb.step(AVAILABLE, rb.FailureReported(now=1), CFG)
    assert asked.effects == (rb.RequestRestart(restart_count=1),)
    assert asked.state.failure_pending
    agreed = rb.step(asked.state, rb.RoundAgreed(now=2, restart_count=2), CFG).state
    assert (agreed.restart_count, agreed.failure_pending) == (2, False)
    failed = rb.step(EXHAUSTED, rb.FailureReported(now=1), CFG)
    assert failed.effects == (rb.FailJob(reason="budget exhausted", restart_count=2),)


@pytest.mark.parametrize(
    ("state", "count"),
    [
        (AVAILABLE, 0),  # counts never go backwards
        (AVAILABLE, 3),  # past max_restarts
        (PENDING, 1),  # a round after our own failure report must have spent a unit
        (EXHAUSTED, 3),
    ],
)
def test_inconsistent_rounds_are_rejected(state: rb.BudgetState, count: int) -> None:
    result = rb.step(state, rb.RoundAgreed(now=1, restart_count=count), CFG)
    assert result.state == state
    assert result.effects == (
        Rejected(
            machine="restart_budget",
            phase=state.phase.name,
            event="RoundAgreed",
            reason="no guard holds",
        ),
    )


def test_helpers() -> None:
    assert rb.next_restart_count(0, False) == 0
    assert rb.next_restart_count(3, True) == 4
    assert rb.can_restart(0, 1) and not rb.can_restart(1, 1) and not rb.can_restart(0, 0)
    assert rb.attempts_allowed(0) == 1 and rb.attempts_allowed(3) == 4
    assert rb.initial_state(rb.BudgetConfig(max_restarts=0)).phase is BP.EXHAUSTED
    assert rb.initial_state(CFG) == rb.BudgetState()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rb.next_restart_count(-1, True), "restart_count must be >= 0, got -1"),
        (lambda: rb.can_restart(0, -2), "got 0, -2"),
        (lambda: rb.attempts_allowed(-1), "max_restarts must be >= 0, got -1"),
        (lambda: rb.BudgetConfig(max_restarts=-1), "max_restarts"),
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


@given(
    max_restarts=st.integers(0, 4),
    events=st.lists(
        st.sampled_from(["join", "leave", "round"]),
        max_size=20,
    ),
)
def test_B4_membership_changes_spend_nothing(max_restarts: int, events: list[str]) -> None:
    """A membership change re-forms the world without spending budget."""
    cfg = rb.BudgetConfig(max_restarts=max_restarts)
    state = rb.initial_state(cfg)
    for kind in events:
        if kind == "round":
            event: rb.BudgetEventT = rb.RoundAgreed(now=0, restart_count=state.restart_count)
        else:
            event = rb.MembershipChanged(now=0, reason=kind)
        result = rb.step(state, event, cfg)
        assert result.state == state  # count, phase and pending report all stay as they were
        if isinstance(event, rb.MembershipChanged):
            assert result.effects == (rb.RequestRerendezvous(reason=kind),)
        else:
            assert result.effects == ()
        state = result.state
