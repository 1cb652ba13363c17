"""The bounded wait for a peer's answer (rank 0's endpoint of an in-place attempt): every row
by example, and its bounds over random answer and news times."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core.rendezvous import peer_wait as pw
from tpelastic.core.values import Rejected

CFG = pw.PeerWaitConfig(timeout=3.0, look_every=0.5)


def run(answer_at: float | None, news_at: float | None) -> tuple[object, float, int]:
    """Drive one wait: the peer answers at ``answer_at``, a look has news from ``news_at``
    (None: never). Each slice takes until its ``until``. Returns the outcome, the instant it
    came and the number of looks."""
    state, now = pw.PeerWaitState(), 0.0
    event: object = pw.PeerWaitRequested(now=now, what="rank 0's endpoint")
    looks = 0
    for _ in range(1000):
        result = pw.step(state, event, CFG)
        state = result.state
        (effect,) = result.effects
        assert not isinstance(effect, Rejected), effect
        if isinstance(effect, pw.AwaitPeer):
            assert effect.until <= state.deadline and effect.until - now <= CFG.look_every
            if answer_at is not None and answer_at <= effect.until:
                now = max(now, answer_at)
                event = pw.PeerAnswer(now=now)
            else:
                now = effect.until
                event = pw.PeerSilent(now=now)
        elif isinstance(effect, pw.LookDue):
            looks += 1
            event = pw.LookAnswered(now=now, news=news_at is not None and news_at <= now)
        else:
            assert state.phase in pw.TERMINAL
            return effect, now, looks
    raise AssertionError("the wait never ended")


times = st.one_of(st.none(), st.floats(0.0, 5.0))


@given(answer_at=times, news_at=times)
def test_E1_a_wait_ends_by_answer_news_or_timeout_within_its_bound(
    answer_at: float | None, news_at: float | None
) -> None:
    outcome, at, looks = run(answer_at, news_at)
    assert at <= CFG.timeout
    if isinstance(outcome, pw.PeerWaitFailed):
        assert outcome.kind == "timeout" and at == CFG.timeout
        assert answer_at is None or answer_at > CFG.timeout
    elif isinstance(outcome, pw.PeerAnswered):
        assert answer_at is not None and answer_at <= at
    else:
        assert isinstance(outcome, pw.WaitInterrupted) and news_at is not None and news_at <= at
    # One look per silent slice, the last at the deadline: at most timeout / look_every.
    assert looks <= CFG.timeout / CFG.look_every
    if isinstance(outcome, pw.PeerWaitFailed):
        assert looks == CFG.timeout / CFG.look_every


@given(news_at=st.floats(0.0, CFG.timeout))
def test_E2_news_seen_by_a_look_ends_the_wait_at_that_look(news_at: float) -> None:
    outcome, at, looks = run(None, news_at)
    assert isinstance(outcome, pw.WaitInterrupted)
    assert at - news_at < CFG.look_every + 1e-9  # the first look after the news
    assert looks >= 1


def test_an_answer_before_any_look_needs_no_look() -> None:
    outcome, at, looks = run(0.2, 0.0)
    assert isinstance(outcome, pw.PeerAnswered) and looks == 0 and at == 0.2


def test_a_second_request_on_an_ended_wait_is_rejected() -> None:
    state = pw.PeerWaitState(phase=pw.WaitPhase.ANSWERED)
    result = pw.step(state, pw.PeerWaitRequested(now=0.0, what="x"), CFG)
    assert [type(e) for e in result.effects] == [Rejected]
