"""The departure table by example and by exhaustion (tpelastic/core/agent/departure.py)."""

from __future__ import annotations

import pytest

from tpelastic.core.agent import departure as dp
from tpelastic.core.agent.states import (
    EXIT_OK,
    EXIT_RENDEZVOUS_FAILED,
    EXIT_SIGNAL_BASE,
    EXIT_WORKERS_FAILED,
)
from tpelastic.core.table import Step

CONFIG = dp.departure_config(300.0)
CODES = (EXIT_OK, EXIT_WORKERS_FAILED, EXIT_RENDEZVOUS_FAILED, EXIT_SIGNAL_BASE + 15)


def start(code: int, host: bool, world: int | None, now: float = 0.0) -> Step[dp.DepartureState]:
    event = dp.DepartureStarted(now=now, exit_code=code, hosts_store=host, world=world)
    return dp.step(dp.DepartureState(), event, CONFIG)


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("host", [False, True])
@pytest.mark.parametrize("world", [None, 1, 3])
def test_D1_only_an_end_for_everyone_departs_and_only_the_host_waits(
    code: int, host: bool, world: int | None
) -> None:
    done = start(code, host, world)
    for_everyone = code in (EXIT_OK, EXIT_WORKERS_FAILED) or (
        code == EXIT_RENDEZVOUS_FAILED and host
    )
    says = [e for e in done.effects if isinstance(e, dp.MarkDeparted)]
    assert bool(says) == (for_everyone and world is not None)
    waits = any(isinstance(e, dp.AwaitAlone) for e in done.effects)
    assert waits == (for_everyone and world is None and host)
    if not says and not waits:
        assert done.state.phase is dp.DepartPhase.DEPARTED and not done.effects
    if says:  # the counter's value: a guest is then done, the host reads on while short
        counted = dp.step(done.state, dp.DepartedRead(now=0.01, departed=1), CONFIG)
        assert world is not None
        short = host and world > 1
        assert (counted.state.phase is dp.DepartPhase.WAITING) == short
        assert bool(counted.effects) == short


def test_D2_the_hosts_wait_is_bounded_and_ends_on_all_departed() -> None:
    assert dp.departure_config(300.0).wait == dp.DEPART_WAIT
    assert dp.departure_config(2.0).wait == 2.0  # never longer than the exit barrier waits
    state, now, reads, departed = start(EXIT_OK, True, 3).state, 0.0, 0, 1
    while state.phase is not dp.DepartPhase.DEPARTED:
        result = dp.step(state, dp.DepartedRead(now=now, departed=departed), CONFIG)
        state = result.state
        if result.effects:
            (effect,) = result.effects
            assert isinstance(effect, dp.ReadDeparted)
            assert now < effect.at <= now + CONFIG.poll + 1e-9
            now, reads = effect.at, reads + 1
            departed = 3 if reads == 100 else departed  # the last peer says it is done
    assert reads == 100 and "all 3 nodes departed" in state.reason
    # Nobody else departs: the wait ends at its bound, not later.
    state, now = start(EXIT_OK, True, 3).state, 0.0
    while state.phase is not dp.DepartPhase.DEPARTED:
        result = dp.step(state, dp.DepartedRead(now=now, departed=1), CONFIG)
        state = result.state
        if result.effects:
            (effect,) = result.effects
            now = effect.at
    assert now == pytest.approx(dp.DEPART_WAIT) and "1 of 3" in state.reason
    # With no world, the peers' disconnect ends it, in slices, at most at the bound.
    state = start(EXIT_OK, True, None).state
    (effect,) = start(EXIT_OK, True, None).effects
    assert effect == dp.AwaitAlone(until=dp.ALONE_SLICE)
    more = dp.step(state, dp.PeersRead(now=0.1, alone=False), CONFIG)
    assert more.effects == (dp.AwaitAlone(until=0.2),)
    ended = dp.step(more.state, dp.PeersRead(now=0.15, alone=True), CONFIG)
    assert ended.state.phase is dp.DepartPhase.DEPARTED
    late = dp.step(more.state, dp.PeersRead(now=dp.DEPART_WAIT, alone=False), CONFIG)
    assert late.state.phase is dp.DepartPhase.DEPARTED and not late.effects
    # A stop signal, or a store that is gone, ends any wait at once.
    for waiting in (start(EXIT_OK, True, 3).state, state, more.state):
        for event in (dp.DepartStopped(now=1.0), dp.DepartFailed(now=1.0, reason="refused")):
            over = dp.step(waiting, event, CONFIG)
            assert over.state.phase is dp.DepartPhase.DEPARTED and not over.effects


def test_a_departed_node_rejects_anything_more() -> None:
    gone = start(EXIT_SIGNAL_BASE + 15, True, 3).state
    result = dp.step(gone, dp.DepartedRead(now=1.0, departed=3), CONFIG)
    assert result.state == gone
    assert [type(e).__name__ for e in result.effects] == ["Rejected"]
