"""Virtual time for the simulator: a heap of actions ordered by (instant, scheduling order).

Two actions due at the same instant run in the order they were scheduled, so a run depends only
on its inputs: the same scenario and seed give the same trace.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from attrs import define, field


class SimulationStuck(Exception):
    """The simulated machines stopped making progress in virtual time: a bug, never an input."""


@define
class EventQueue:
    """Pending actions in virtual time. ``now`` only moves forward, in :meth:`run_until`."""

    now: float = 0.0
    _heap: list[tuple[float, int, Callable[[], None]]] = field(factory=list, alias="_heap")
    _seq: int = field(default=0, alias="_seq")
    processed: int = 0
    running: bool = False

    def schedule(self, at: float, action: Callable[[], None]) -> None:
        """Run ``action`` at virtual instant ``at`` (never earlier than now)."""
        self._seq += 1
        heapq.heappush(self._heap, (max(at, self.now), self._seq, action))

    def next_at(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def run_until(self, end: float, limit_per_instant: int) -> None:
        """Run every action due at or before ``end``, then set the clock to ``end``.

        Raises:
            SimulationStuck: more than ``limit_per_instant`` actions ran without time moving,
                which only a loop in the simulated machines can cause.
        """
        at_once = 0
        self.running = True
        try:
            while self._heap and self._heap[0][0] <= end:
                at, _, action = heapq.heappop(self._heap)
                if at > self.now:
                    self.now, at_once = at, 0
                at_once += 1
                if at_once > limit_per_instant:
                    raise SimulationStuck(
                        f"actions keep running at t={self.now} without time moving"
                    )
                self.processed += 1
                action()
        finally:
            self.running = False
        self.now = max(self.now, end)
