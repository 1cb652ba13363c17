"""RoundWatcher: a thread held in the store's wait for a change to the round; it wakes the loop.

The agent's loop looks at the rendezvous (closed? next round opened? nodes waiting?) when a
pass comes round. Without help it must look every fraction of a second to notice a leave or a
join quickly. This thread blocks in ``Membership.wait_for_change`` (one held store request,
answered by the first key written) and, when it returns True, raises a flag and calls its
``on_fire`` hook, which wakes the loop out of its wait for the workers: the loop takes the flag
and looks at once, not at its next pass (``monitor_interval`` later).

It decides nothing: what the look means is the core's decision. One watcher per round, started
when the workers start; ``stop`` only raises a flag, because a thread blocked in the store is
released by the writes that end a round (the next round opened, our own arrival at it, a close)
or by the store being closed when the agent leaves; ``join`` is bounded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock

log = logging.getLogger(__name__)

# The longest single held wait: a stop between writes is noticed at least this often.
SLICE = 5.0
# After a failed or instant wait: a lost store is reported by the loop's own looks.
_PAUSE = 0.5


class RoundWatcher:
    """One daemon thread calling ``wait(SLICE)`` until stopped; a True answer sets the flag.

    Args:
        wait: blocks up to its argument in seconds; True when the round may have changed.
            Exceptions are logged and retried after a pause (the loop's looks report them).
        name: the thread's name.
        slice_: the longest single wait.
        on_fire: called (on the watcher's thread) right after the flag is raised; must not
            block. Exceptions are logged.
        clock: tells a wait that returned at once from one that ran its slice.
    """

    def __init__(
        self,
        wait: Callable[[float], bool],
        *,
        name: str,
        slice_: float = SLICE,
        on_fire: Callable[[], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._wait = wait
        self._clock = clock
        self._on_fire = on_fire
        self._slice = slice_
        self._fired = threading.Event()
        self._taken = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> RoundWatcher:
        """Start the thread; returns self."""
        self._thread.start()
        return self

    def take(self) -> bool:
        """True once after each time the wait fired (the caller then looks, then calls
        :meth:`resume`); never blocks."""
        if not self._fired.is_set():
            return False
        self._fired.clear()
        return True

    def resume(self) -> None:
        """The look after :meth:`take` is done: the thread may wait again (the handler now
        leaves out a key the look has seen). Never blocks."""
        self._taken.set()

    def stop(self) -> None:
        """Ask the thread to end; it ends when its current wait returns. Never blocks."""
        self._stop.set()
        self._taken.set()

    def join(self, timeout: float) -> bool:
        """Wait at most ``timeout`` s for the thread to end; True when it has."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self._clock.now()
            try:
                changed = self._wait(self._slice)
            except Exception as error:  # a lost store: the loop's looks count and report it
                log.debug("round watcher: %s", error)
                self._stop.wait(_PAUSE)
                continue
            if self._stop.is_set():
                return
            if not changed:
                if self._clock.now() - started < self._slice / 2:
                    self._stop.wait(_PAUSE)  # returned early without a change: do not spin
                continue
            self._taken.clear()
            self._fired.set()
            if self._on_fire is not None:
                try:
                    self._on_fire()
                except Exception as error:  # the flag alone still reaches the loop's next pass
                    log.warning("round watcher: waking the agent failed: %s", error)
            # The key that fired stays present until the loop's look has seen it (the handler
            # then leaves it out); waiting again before would return at once, over and over.
            # Bounded: a loop busy elsewhere (a join, the exit barrier) costs one wait per slice.
            self._taken.wait(self._slice)


class RoundWatching:
    """The agent's round watchers: one per attempt of workers, started with them.

    Watches only in runs that can grow or shrink, over a store that holds a wait for any key
    (so the single-node path starts nothing). A stopped watcher's thread may still sit in a
    store wait; it is kept until it ends and :meth:`join` bounds the wait for it.

    Args:
        can_watch: whether to watch now (a run that can change size, over a rendezvous that
            offers a held wait for a change).
        wait: the held wait (``wait(timeout)``, True when the round may have changed).
        on_fire: called on the watcher's thread with the watcher whose wait fired (must not
            block).
        clock: the agent's clock.
    """

    def __init__(
        self,
        *,
        can_watch: Callable[[], bool],
        wait: Callable[[float], bool],
        on_fire: Callable[[RoundWatcher], None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._can_watch, self._wait = can_watch, wait
        self._on_fire, self._clock = on_fire, clock
        self._current: RoundWatcher | None = None
        self._old: list[RoundWatcher] = []

    @property
    def current(self) -> RoundWatcher | None:
        """The running attempt's watcher (None when nothing watches)."""
        return self._current

    def watch(self, attempt: str) -> None:
        """Stop the last watcher and start ``attempt``'s (its label names the thread), when
        watching is possible."""
        self.unwatch()
        self.join(0.0)  # forget the old ones that have ended
        if not self._can_watch():
            return
        watcher = RoundWatcher(
            self._wait,
            name=f"tpelastic-round-watch-{attempt}",
            on_fire=lambda: self._on_fire(watcher),
            clock=self._clock,
        )
        self._current = watcher.start()

    def unwatch(self) -> None:
        watcher, self._current = self._current, None
        if watcher is not None:
            watcher.stop()
            self._old.append(watcher)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for each stopped watcher's thread; keep those still alive."""
        for watcher in self._old:
            if not watcher.join(timeout) and timeout > 0:
                log.warning("a round watcher thread did not end within %.1f s", timeout)
        self._old = [w for w in self._old if w.alive]


__all__ = ["SLICE", "RoundWatcher", "RoundWatching"]
