"""Pumps: threads that observe one thing and only put what they saw in the loop's inbox.

The run loop pops one observation at a time from its :class:`Inbox` (a wait bounded on its
clock), steps the core and carries out the effects. What happens meanwhile reaches it as an
observation put here by a pump:

* :class:`WorkerExitPump`: a thread held in the workers' wait; when the attempt ends (every
  worker succeeded, or one failed) it puts :class:`WorkersEnded`;
* the round watcher (:mod:`round_watch`): when its held store wait fires, :class:`RoundChanged`;
* signals arrive on the loop's own thread (the handler raises out of the inbox wait);
* the periodic reads (hang watch, keep-alive, the fallback look) are the loop's own timer: the
  inbox wait is bounded by when the next is due.

Pumps decide nothing: the loop turns what they saw into the core's observations.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attrs import frozen

if TYPE_CHECKING:
    from tpelastic.adapters.agent.round_watch import RoundWatcher
    from tpelastic.adapters.workers.api import RunProcsResult

log = logging.getLogger("tpelastic.agent")  # report.log's logger, without importing report

# The longest single wait of a worker pump: a stop is noticed at least this often even when the
# workers' wait is not woken by their close.
_SLICE = 1.0


class Inbox:
    """The loop's observations still to be stepped, in arrival order; safe across threads."""

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._changed = threading.Condition()

    def put(self, observation: Any) -> None:
        with self._changed:
            self._items.append(observation)
            self._changed.notify()

    def __bool__(self) -> bool:
        return bool(self._items)

    def holds_outcome(self) -> bool:
        """Whether an outcome of an effect (anything but what a pump put here) is waiting."""
        with self._changed:
            return any(not isinstance(item, _PUMPED) for item in self._items)

    def pop(self) -> Any:
        """The oldest observation (the caller checked there is one)."""
        with self._changed:
            return self._items.popleft()

    def pop_within(self, timeout: float) -> Any | None:
        """The oldest observation, waiting up to ``timeout`` s for one (None when none came).
        A signal handler that raises on this thread ends the wait with its exception."""
        with self._changed:
            if not self._items and timeout > 0:
                self._changed.wait(timeout)
            return self._items.popleft() if self._items else None

    def clear(self) -> None:
        with self._changed:
            self._items.clear()


@frozen
class WorkersEnded:
    """The workers of start ``serial`` ended: all succeeded, or one failed (``result``)."""

    serial: int
    result: RunProcsResult


@frozen
class WorkerWaitFailed:
    """Waiting for the workers of start ``serial`` raised ``error`` (the pump has ended)."""

    serial: int
    error: BaseException


@frozen
class RoundChanged:
    """``watcher``'s held wait fired: the round may have changed; the loop looks now."""

    watcher: RoundWatcher


_PUMPED = (WorkersEnded, WorkerWaitFailed, RoundChanged)


class WorkerExitPump:
    """One daemon thread per start of workers, held in ``wait(seconds)`` until the start ends.

    Args:
        wait: the workers' wait: None while they run (up to its argument in seconds), else the
            start's result.
        inbox: where :class:`WorkersEnded` (or :class:`WorkerWaitFailed`) goes.
        serial: which start of workers this is (the loop drops what an older start reports).
    """

    def __init__(
        self,
        wait: Callable[[float], RunProcsResult | None],
        inbox: Inbox,
        serial: int,
        *,
        name: str,
    ) -> None:
        self.serial = serial
        self._wait, self._inbox = wait, inbox
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> WorkerExitPump:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Put nothing more in the inbox; the thread ends when its wait returns. Never blocks."""
        self._stop.set()

    def join(self, timeout: float) -> bool:
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                result = self._wait(_SLICE)
            except Exception as error:  # a broken wait must reach the loop, not vanish
                if not self._stop.is_set():
                    self._inbox.put(WorkerWaitFailed(self.serial, error))
                return
            if result is not None:
                if not self._stop.is_set():
                    self._inbox.put(WorkersEnded(self.serial, result))
                return


class WorkerPumps:
    """The agent's worker pumps: one per start of workers, the newest the current one.

    Args:
        inbox: the loop's inbox.
        wait_for: called right after workers start; returns their wait (see
            :class:`WorkerExitPump`).
    """

    def __init__(
        self,
        inbox: Inbox,
        wait_for: Callable[[], Callable[[float], RunProcsResult | None]],
    ) -> None:
        self._inbox, self._wait_for = inbox, wait_for
        self._serial = 0
        self._current: WorkerExitPump | None = None
        self._old: list[WorkerExitPump] = []

    @property
    def serial(self) -> int:
        """The current start's serial (what its pump's observations carry)."""
        return self._serial

    def start(self, attempt: str) -> None:
        """Workers of ``attempt`` (its label names the thread) just started: pump their end."""
        self.stop()
        self._serial += 1
        self._current = WorkerExitPump(
            self._wait_for(), self._inbox, self._serial, name=f"tpelastic-workers-{attempt}"
        ).start()

    def stop(self) -> None:
        pump, self._current = self._current, None
        if pump is not None:
            pump.stop()
            self._old.append(pump)
        self._old = [p for p in self._old if not p.join(0.0)]

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for each stopped pump's thread (each is a daemon)."""
        for pump in self._old:
            pump.join(timeout)
        self._old = [p for p in self._old if not p.join(0.0)]


__all__ = [
    "Inbox",
    "RoundChanged",
    "WorkerExitPump",
    "WorkerPumps",
    "WorkerWaitFailed",
    "WorkersEnded",
]
