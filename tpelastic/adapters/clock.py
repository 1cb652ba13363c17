"""The process's monotonic clock behind the :class:`~tpelastic.adapters.ports.Clock` port."""

from __future__ import annotations

import time


class MonotonicClock:
    """``time.monotonic`` plus ``offset`` seconds; tests give an offset so a stray direct read of
    ``time.monotonic`` elsewhere disagrees with this clock and shows."""

    def __init__(self, offset: float = 0.0) -> None:
        self._offset = float(offset)

    def now(self) -> float:
        return time.monotonic() + self._offset

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def __repr__(self) -> str:
        return f"MonotonicClock(offset={self._offset:g})"


SYSTEM_CLOCK = MonotonicClock()
"""The clock every adapter uses unless it is given another."""

__all__ = ["SYSTEM_CLOCK", "MonotonicClock"]
