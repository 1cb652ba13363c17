"""How often the driver reads, by phase, from the config (tpelastic/core/agent/reads.py)."""

from __future__ import annotations

import pytest

from tpelastic.core.agent import AgentPhase as P
from tpelastic.core.agent.reads import (
    BARRIER_READ_EVERY,
    HOLD_LOOK_EVERY,
    LOOK_EVERY,
    ReadConfig,
    read_period,
    running_look_period,
)
from tpelastic.core.rendezvous.liveness import LOOK_EVERY_MAX


@pytest.mark.parametrize("monitor", [0.01, 0.1, 1.0, 30.0])
def test_A17_reads_are_due_by_phase_from_the_monitor_interval(monitor: float) -> None:
    config = ReadConfig(monitor_interval=monitor, heartbeat_interval=0.3)
    assert read_period(P.RUNNING, config) == monitor
    assert read_period(P.FENCED, config) == monitor
    assert read_period(P.HOLDING, config) == min(monitor, HOLD_LOOK_EVERY)
    assert read_period(P.EXIT_BARRIER, config) == min(monitor, BARRIER_READ_EVERY)
    for phase in (P.INIT, P.RENDEZVOUS, P.SUCCEEDED, P.FAILED):
        assert read_period(phase, config) is None  # the effect's outcome is the next news
    # Without a watcher the look is one of the periodic reads, at most every LOOK_EVERY.
    assert running_look_period(config, watching=False) == max(monitor, LOOK_EVERY)


def test_A17_a_watched_look_only_times_the_ring_successor() -> None:
    for interval, due in ((0.1, 0.1), (0.3, LOOK_EVERY_MAX), (5.0, LOOK_EVERY_MAX)):
        config = ReadConfig(monitor_interval=10.0, heartbeat_interval=interval)
        assert running_look_period(config, watching=True) == due
    assert running_look_period(ReadConfig(monitor_interval=10.0), watching=True) == LOOK_EVERY_MAX
    fallback = ReadConfig(monitor_interval=0.1, heartbeat_interval=0.1, look_fallback=3600.0)
    assert running_look_period(fallback, watching=True) == 3600.0
    assert running_look_period(fallback, watching=False) == LOOK_EVERY


def test_a_read_config_refuses_a_period_that_is_not_positive() -> None:
    with pytest.raises(ValueError):
        ReadConfig(monitor_interval=0.0)
    with pytest.raises(ValueError):
        ReadConfig(monitor_interval=0.1, heartbeat_interval=-1.0)
