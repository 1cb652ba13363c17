"""The agent adapters run on the Clock they are given, here the tests' offset default clock."""

from __future__ import annotations

import time

from tpelastic.adapters.clock import OFFSET_ENV, SYSTEM_CLOCK, MonotonicClock
from tpelastic.adapters.ports import Clock


def test_the_default_clock_is_offset_in_the_agent_tests(offset_clock: float) -> None:
    # The offset is what makes a stray time.monotonic() read visible: far from the real one.
    assert offset_clock >= 1e6
    assert abs(SYSTEM_CLOCK.now() - time.monotonic() - offset_clock) < 1.0


def test_the_offset_reaches_processes_the_tests_start(offset_clock: float) -> None:
    import os

    assert float(os.environ[OFFSET_ENV]) == offset_clock


def test_deadline_and_remaining_are_on_the_clock() -> None:
    clock = MonotonicClock(offset=5e6)
    assert isinstance(clock, Clock)
    deadline = clock.deadline(30.0)
    assert deadline > time.monotonic() + 1e6
    assert 29.0 < clock.remaining(deadline) <= 30.0
    assert clock.remaining(clock.now() - 1.0) == 0.0
    assert abs(clock.wall() - time.time()) < 5.0
