"""The hang watch's table (tpelastic/core/progress.py): when a worker counts as stuck."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tpelastic.core import progress as pw
from tpelastic.core.table import Step

CONFIG = pw.progress_config(10.0, 30.0)


def sample(counter: int, waiting: bool = False, collectives: int = 0) -> pw.ProgressSample:
    return pw.ProgressSample(counter=counter, waiting=waiting, collectives=collectives)


def watching(*ranks: int, now: float = 0.0) -> pw.ProgressState:
    started = pw.WatchStarted(now=now, ranks=ranks)
    return pw.step(pw.ProgressState(), started, CONFIG).state


def read(
    state: pw.ProgressState,
    now: float,
    samples: dict[int, pw.ProgressSample] | None = None,
    live: tuple[int, ...] | None = None,
) -> Step[pw.ProgressState]:
    found = tuple((samples or {}).items())
    return pw.step(state, pw.ProgressRead(now=now, samples=found, live=live), CONFIG)


def test_P1_a_rank_is_stuck_once_its_counter_stood_still_for_its_limit() -> None:
    state = read(watching(0, 1), 1.0, {0: sample(1), 1: sample(1)}).state
    state = read(state, 5.0, {0: sample(2), 1: sample(1)}).state  # rank 1 stands still from 1.0
    assert read(state, 10.9, {0: sample(3), 1: sample(1)}).effects == ()
    (stall,) = read(state, 11.0, {0: sample(3), 1: sample(1)}).effects
    assert stall == pw.Stall(rank=1, idle_for=10.0, counter=1, waiting=False)
    # Before its first step a rank has the first-step limit; a fresh file's 0 is no step.
    state = read(watching(0, now=100.0), 120.0, {0: sample(0)}).state
    assert read(state, 129.9).effects == ()
    (first,) = read(state, 130.0).effects
    assert (first.rank, first.counter, first.idle_for) == (0, 0, 30.0)
    # Without a stall timeout (health only), nobody is ever stuck.
    health = pw.progress_config(None)
    idle = pw.step(pw.ProgressState(), pw.WatchStarted(now=0.0, ranks=(0,)), health).state
    assert pw.step(idle, pw.ProgressRead(now=1e9), health).effects == ()


def test_P1_the_first_step_limit_is_at_least_a_minute_unless_told() -> None:
    assert pw.progress_config(5.0).first_step_timeout == pw.FIRST_STEP_DEFAULT
    assert pw.progress_config(120.0).first_step_timeout == 120.0
    assert pw.progress_config(5.0, 7.0).first_step_timeout == 7.0


def test_P2_the_likely_cause_is_reported_and_an_ended_worker_is_never_stuck() -> None:
    state = watching(0, 1, 2)
    both = {0: sample(5, True, 9), 1: sample(5, False, 9), 2: sample(5, True, 4)}
    state = read(state, 0.5, both).state
    (stall,) = read(state, 20.0).effects
    assert stall.rank == 1  # not waiting in a collective: the others wait for it
    (stall,) = read(state, 20.0, live=(0, 2)).effects
    assert stall.rank == 2  # of those waiting, the one that entered the fewest collectives
    assert read(state, 20.0, live=()).effects == ()
    assert [s.rank for s in pw.stalls(state.ranks, 20.0, CONFIG)] == [1, 2, 0]


@settings(max_examples=200, deadline=None)
@given(
    reads=st.lists(
        st.tuples(st.floats(0.0, 5.0), st.integers(0, 3), st.booleans()), min_size=1, max_size=30
    )
)
def test_P1_stuck_exactly_when_idle_for_the_limit_since_the_last_move(
    reads: list[tuple[float, int, bool]],
) -> None:
    state, now, counter, moved_at = watching(0), 0.0, None, 0.0
    for gap, value, readable in reads:
        now += gap
        result = read(state, now, {0: sample(value)} if readable else None)
        if readable and value != counter and not (counter is None and value == 0):
            moved_at = now
        if readable:
            counter = value
        limit = 30.0 if counter in (None, 0) else 10.0
        assert bool(result.effects) == (now - moved_at >= limit)
        state = result.state
