"""Virtual time for the simulator: a heap of actions ordered by (instant, scheduling order).

Two actions due at the same instant run in the order they were scheduled, so a run depends only
on its inputs: the same scenario and seed give the same trace.

A scheduled action can be cancelled (a wait that ended before its deadline): cancelled entries
are skipped when they come up and swept out of the heap once they are the majority, so a large
run does not carry one dead timer per node per round.
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
    # Sequence numbers of cancelled actions still in the heap.
    _cancelled: set[int] = field(factory=set, alias="_cancelled")
    processed: int = 0
    running: bool = False

    def schedule(self, at: float, action: Callable[[], None]) -> int:
        """Run ``action`` at virtual instant ``at`` (never earlier than now).

        Returns:
            A handle for :meth:`cancel`.
        """
        self._seq += 1
        heapq.heappush(self._heap, (at if at > self.now else self.now, self._seq, action))
        return self._seq

    def cancel(self, handle: int) -> None:
        """Drop a scheduled action that has not run yet (a handle already run is ignored)."""
        if handle > 0:
            self._cancelled.add(handle)
            if len(self._cancelled) * 2 > len(self._heap) + 64:
                self._sweep()

    def _sweep(self) -> None:
        gone = self._cancelled
        self._heap = [entry for entry in self._heap if entry[1] not in gone]
        heapq.heapify(self._heap)
        gone.clear()

    def next_at(self) -> float | None:
        while self._heap and self._heap[0][1] in self._cancelled:
            self._cancelled.discard(heapq.heappop(self._heap)[1])
        return self._heap[0][0] if self._heap else None

    def run_until(self, end: float, limit_per_instant: int) -> None:
        """Run every action due at or before ``end``, then set the clock to ``end``.

        Raises:
            SimulationStuck: more than ``limit_per_instant`` actions ran without time moving,
                which only a loop in the simulated machines can cause.
        """
        at_once = 0
        heap, cancelled, pop = self._heap, self._cancelled, heapq.heappop
        self.running = True
        try:
            while heap and heap[0][0] <= end:
                at, seq, action = pop(heap)
                if cancelled and seq in cancelled:
                    cancelled.discard(seq)
                    continue
                if at > self.now:
                    self.now, at_once = at, 0
                at_once += 1
                if at_once > limit_per_instant:
                    raise SimulationStuck(
                        f"actions keep running at t={self.now} without time moving"
                    )
                self.processed += 1
                action()
                if heap is not self._heap:  # swept while the action ran
                    heap = self._heap
        finally:
            self.running = False
        self.now = max(self.now, end)
