"""The process's clocks behind the :class:`~tpelastic.adapters.ports.Clock` port.

This is the only module of the adapters, the CLI and the shipped harness that reads the time
(``tests/adapters/test_clock_reads.py`` checks it): everything else is given a ``Clock``.
"""

from __future__ import annotations

import os
import time

OFFSET_ENV = "TPELASTIC_CLOCK_OFFSET"
"""Seconds added to the default clock's monotonic readings, in this process and (inherited
through the environment) in the processes it starts. Tests set a large random one so that a
stray direct read of ``time.monotonic`` elsewhere gives a wrong deadline and shows."""


class MonotonicClock:
    """``time.monotonic`` plus ``offset`` seconds; wall time for people as the system has it."""

    def __init__(self, offset: float = 0.0) -> None:
        self._offset = float(offset)

    @property
    def offset(self) -> float:
        return self._offset

    def now(self) -> float:
        return time.monotonic() + self._offset

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def deadline(self, seconds: float) -> float:
        return self.now() + seconds

    def remaining(self, deadline: float) -> float:
        return max(0.0, deadline - self.now())

    def wall(self) -> float:
        return time.time()

    def __repr__(self) -> str:
        return f"MonotonicClock(offset={self._offset:g})"


def _offset_from_env() -> float:
    try:
        return float(os.environ.get(OFFSET_ENV) or 0.0)
    except ValueError:
        return 0.0


SYSTEM_CLOCK = MonotonicClock(_offset_from_env())
"""The clock every adapter uses unless it is given another."""

__all__ = ["OFFSET_ENV", "SYSTEM_CLOCK", "MonotonicClock"]
