"""ExitGuard: once a launcher process knows its outcome, it ends within a bound, whatever hangs.

The teardown after a terminal outcome is bounded step by step (leaving the rendezvous, closing
the store, the watcher's and the heartbeat's daemon threads; see specs/exit.md). The guard is the
last line: armed when only that teardown is left, it ends the process with the outcome's exit
status after ``budget`` seconds even if a thread is stuck in a blocking call that no bound
reached. ``disarm`` once the teardown has returned (the caller's own exit follows). For the
``tpelastic run`` command only: a library caller of the agent is never given one.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger("tpelastic.agent")

# From the outcome to the end of the process: the target is 2 s; the teardown's own bounds
# (leave 1 s, the heartbeat's join 0.2 s) fit within this.
EXIT_BUDGET = 1.8


class ExitGuard:
    """Arm once; ``budget`` seconds later the process ends with the armed code unless it already
    has. The waiting thread is a daemon: a process that ends on time never notices it."""

    def __init__(self, budget: float = EXIT_BUDGET) -> None:
        self._budget = float(budget)
        self._armed = threading.Event()
        self._disarmed = threading.Event()
        self._code = 1

    @property
    def armed(self) -> bool:
        return self._armed.is_set()

    def arm(self, exit_code: int) -> None:
        """Start counting down to ``os._exit(exit_code)``. Later calls change nothing."""
        if self._armed.is_set():
            return
        self._armed.set()
        self._code = int(exit_code)
        threading.Thread(target=self._count_down, name="tpelastic-exit-guard", daemon=True).start()

    def disarm(self) -> None:
        """The teardown returned in time: do not end the process. Idempotent."""
        self._disarmed.set()

    def _count_down(self) -> None:
        if self._disarmed.wait(self._budget):
            return
        stuck = [t.name for t in threading.enumerate() if t.is_alive() and not t.daemon]
        log.warning(
            "still running %.1fs after the outcome (threads: %s): exiting now",
            self._budget,
            ", ".join(stuck) or "none but daemons",
        )
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(self._code)


__all__ = ["EXIT_BUDGET", "ExitGuard"]
