"""Retrying a join that lost its store: the join_retry table over random lost joins."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core.rendezvous import join_retry as jr
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.records import NodeInfo
from tpelastic.core.rendezvous.state import (
    JoinPhase,
    JoinState,
    retry_request,
    worth_retrying,
)
from tpelastic.core.values import Rejected

CFG = jr.JoinRetryConfig(delay=1.0)


def lost(phase: JoinPhase, deadline: float) -> JoinState:
    return JoinState(
        phase=phase,
        keys=RunKeys("job"),
        node=NodeInfo(node="a", addr="h"),
        round_no=2,
        slot=1,
        deadline=deadline,
        from_round=1,
    )


@given(
    losses=st.lists(
        st.tuples(st.sampled_from(list(JoinPhase)), st.floats(0.0, 3.0), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    deadline=st.floats(0.0, 12.0),
    held=st.booleans(),
)
def test_J1_a_lost_join_is_retried_exactly_while_it_is_worth_retrying(
    losses: list[tuple[JoinPhase, float, bool]], deadline: float, held: bool
) -> None:
    state, now, retried = jr.RetryState(), 0.0, False
    for phase, gap, waited_out in losses:
        now += gap
        join = lost(phase, deadline)
        stepped = jr.step(state, jr.JoinLost(now=now, state=join, waited_out=waited_out), CFG)
        (effect,) = stepped.effects
        assert not isinstance(effect, Rejected)
        worth = worth_retrying(join, retried=retried, next_try=now + 1.0, waited_out=waited_out)
        if not worth:
            assert isinstance(effect, jr.GiveUp)
            assert stepped.state.phase is jr.RetryPhase.GAVE_UP
            return
        assert effect == jr.RetryAt(at=now + CFG.delay)
        now = effect.at
        again = jr.step(stepped.state, jr.RetryDue(now=now, heartbeats_held=held), CFG)
        (rejoin,) = again.effects
        assert isinstance(rejoin, jr.Rejoin)
        assert rejoin.request == retry_request(join, now=now, heartbeats_held=held)
        assert rejoin.request.deadline == deadline  # a retry never extends the join's deadline
        state, retried = again.state, True


def test_a_join_lost_before_arriving_is_reported_at_once_unless_a_retry() -> None:
    first = jr.JoinLost(now=0.0, state=lost(JoinPhase.LOCATING, 10.0))
    assert jr.step(jr.RetryState(), first, CFG).effects == (jr.GiveUp(),)
    retrying = jr.RetryState(retried=True)
    assert jr.step(retrying, first, CFG).effects == (jr.RetryAt(at=1.0),)
