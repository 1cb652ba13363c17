"""Timers over a multiprocessing queue: for workers started with multiprocessing."""

from __future__ import annotations

import os
import queue
import signal
from typing import Any

from tpelastic.adapters.timer.api import ExpiredCallback, TimerRequest, TimerServer


class LocalTimerClient:
    """Sends this process's deadlines to a :class:`LocalTimerServer` through ``mp_queue``."""

    def __init__(self, mp_queue: Any) -> None:
        self._queue = mp_queue

    def acquire(self, scope_id: str, expiration_time: float) -> None:
        self._queue.put(
            TimerRequest(worker_id=os.getpid(), scope_id=scope_id, expiration_time=expiration_time)
        )

    def release(self, scope_id: str) -> None:
        self._queue.put(TimerRequest(worker_id=os.getpid(), scope_id=scope_id, release=True))


class MultiprocessingRequestQueue:
    """Reads :class:`TimerRequest` values from a ``multiprocessing`` queue."""

    def __init__(self, mp_queue: Any) -> None:
        self._queue = mp_queue

    def get(self, size: int, timeout: float) -> list[TimerRequest]:
        requests: list[TimerRequest] = []
        try:
            requests.append(self._queue.get(block=True, timeout=timeout))
            while len(requests) < size:
                requests.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return [r for r in requests if isinstance(r, TimerRequest)]


class LocalTimerServer(TimerServer):
    """A :class:`TimerServer` reading from a multiprocessing queue its clients share.

    Args:
        mp_queue: a ``multiprocessing`` (or context) ``Queue`` handed to every worker.
        max_interval, daemon, kill_signal, on_expired: as for :class:`TimerServer`.
    """

    def __init__(
        self,
        mp_queue: Any,
        max_interval: float = 1.0,
        daemon: bool = True,
        *,
        kill_signal: int = signal.SIGKILL if hasattr(signal, "SIGKILL") else signal.SIGTERM,
        on_expired: ExpiredCallback | None = None,
    ) -> None:
        super().__init__(
            MultiprocessingRequestQueue(mp_queue),
            max_interval,
            daemon,
            kill_signal=kill_signal,
            on_expired=on_expired,
        )
