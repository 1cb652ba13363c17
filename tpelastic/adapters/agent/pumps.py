"""Pumps: threads that observe one thing and only put what they saw in the loop's inbox.

The run loop pops one observation at a time from its :class:`Inbox` (a wait bounded on its
clock), steps the core and carries out the effects. What happens meanwhile reaches it as an
observation put here by a pump:

* :class:`WorkerExitPump`: a thread held in the workers' wait; when the attempt ends (every
  worker succeeded, or one failed) it puts :class:`WorkersEnded`;
* the round watcher (:mod:`round_watch`): when its held store wait fires, :class:`RoundChanged`;
* :class:`JoinPump`: a thread that carries out one join (the handler's ``next_rendezvous``, which
  blocks until the round completes or the join fails) and puts :class:`JoinEnded`;
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

from tpelastic.core.group_values import GroupStarted

if TYPE_CHECKING:
    from tpelastic.adapters.agent.round_watch import RoundWatcher
    from tpelastic.adapters.workers.api import RunProcsResult

log = logging.getLogger("tpelastic.agent")  # report.log's logger, without importing report

# The longest single wait of a worker pump: a stop is noticed at least this often even when the
# workers' wait is not woken by their close.
_SLICE = 1.0
# The longest single wait of the loop's inbox: a signal handed to another thread of the process
# is run (and raises on the loop's thread) at most this late.
SIGNAL_CHECK = 0.5


class Inbox:
    """The loop's observations still to be stepped, in arrival order; safe across threads."""

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._changed = threading.Condition()
        self._outcomes = 0

    def put(self, observation: Any) -> None:
        with self._changed:
            self._items.append(observation)
            if not isinstance(observation, _PUMPED):
                self._outcomes += 1
            self._changed.notify()

    def __bool__(self) -> bool:
        return bool(self._items)

    @property
    def outcomes(self) -> int:
        """How many outcomes of effects (anything but what a pump put here) were ever put: an
        effect that changed it put its outcome here."""
        return self._outcomes

    def pop(self) -> Any:
        """The oldest observation (the caller checked there is one)."""
        with self._changed:
            return self._items.popleft()

    def pop_within(self, timeout: float) -> Any | None:
        """The oldest observation, waiting up to ``timeout`` s for one (None when none came).

        A signal handler that raises on this thread ends the wait with its exception. The wait
        runs in slices of at most :data:`SIGNAL_CHECK` s: the kernel may hand a process's signal
        to any of its threads, and then Python runs the handler on the main thread only once
        that thread runs Python code again, which a single long wait would put off for all of
        ``timeout`` (the monitor interval, minutes in some jobs).
        """
        with self._changed:
            left = timeout
            while not self._items and left > 0:
                step = min(left, SIGNAL_CHECK)
                self._changed.wait(step)
                left -= step
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


@frozen
class JoinEnded:
    """Join ``serial`` ended (``started``: when it began, on the loop's clock): ``outcome`` is
    what the join returned, or the exception it raised."""

    serial: int
    outcome: Any
    started: float


@frozen
class ControlMessage:
    """A line a worker sent on its control channel (put by the channel's thread)."""

    local_rank: int
    message: dict[str, Any]


# What is not an effect's outcome: pumps' observations, and the start of workers (a fact).
_PUMPED = (WorkersEnded, WorkerWaitFailed, RoundChanged, JoinEnded, GroupStarted, ControlMessage)


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
        """The running start's serial (what its pump's observations carry); 0, which no start
        has, once its workers were stopped: an end they reported before the stop is stale
        even while the next start is still to come (an attempt waiting for its endpoint)."""
        return self._serial if self._current is not None else 0

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


class JoinPump:
    """One daemon thread per join, numbered; the newest join is the current one.

    The loop's thread stays free meanwhile: it waits on the inbox, where a signal reaches it,
    and takes the join's end from there. :attr:`pending` is True from :meth:`start` until the
    loop takes that join's :class:`JoinEnded` (:meth:`ended`), so "no join running and nothing
    in the inbox" is never a race with the thread's last put.
    """

    def __init__(self, inbox: Inbox, *, now: Callable[[], float]) -> None:
        self._inbox, self._now = inbox, now
        self._serial = 0
        self._pending = False
        self._threads: list[threading.Thread] = []

    @property
    def pending(self) -> bool:
        """A join started whose end the loop has not taken yet."""
        return self._pending

    def start(self, join: Callable[[], Any]) -> None:
        """Run ``join()`` on a new thread; put its return value or exception in the inbox."""
        self._serial += 1
        self._pending = True
        serial, started = self._serial, self._now()

        def run() -> None:
            try:
                outcome: Any = join()
            except Exception as error:  # the loop decodes every failure, a bug included
                outcome = error
            self._inbox.put(JoinEnded(serial, outcome, started))

        thread = threading.Thread(target=run, name=f"tpelastic-join-{serial}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()]
        thread.start()  # a stop signal may raise out of it: the thread is then not ours to join
        self._threads.append(thread)

    def ended(self, item: JoinEnded) -> bool:
        """Take ``item``: True when it is the current join's end (False: an older join's)."""
        current = self._pending and item.serial == self._serial
        if current:
            self._pending = False
        return current

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for each join's thread (each is a daemon; closing the store
        ends a join that still runs)."""
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)
        self._threads = [t for t in self._threads if t.is_alive()]


__all__ = [
    "ControlMessage",
    "Inbox",
    "JoinEnded",
    "JoinPump",
    "RoundChanged",
    "WorkerExitPump",
    "WorkerPumps",
    "WorkerWaitFailed",
    "WorkersEnded",
]
