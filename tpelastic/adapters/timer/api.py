"""The timer contract: clients ask for deadlines, a server kills workers that miss them.

A worker wraps a block in ``with expires(after=60):``. On entry its client sends "worker <pid>,
scope <s>, deadline <t>"; on exit it sends a release. The server (run by the agent, one per node)
keeps the open deadlines and, once one has passed, kills that worker with a configurable signal;
the agent then sees an ordinary worker failure and restarts within its budget.

Deadlines are instants on the default Clock (``time.monotonic`` and the offset every process of
the job inherits). Client and server run on the same host, where the monotonic clock is
system-wide, so no wall-clock jump can fire or delay a timer.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

from attrs import field, frozen

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock

TIMER_FILE_ENV = "TPELASTIC_TIMER_FILE"
"""If set in a worker, the default client talks to the named-pipe server at this path."""

_log = logging.getLogger(__name__)


def _non_empty(_instance: object, attribute: object, value: str) -> None:
    if not value:
        raise ValueError(f"{getattr(attribute, 'name', 'value')} must not be empty")


@frozen
class TimerRequest:
    """One message from a client: open (or, with ``release``, close) a deadline.

    ``signal``, when given, is what the server sends this worker when the deadline passes
    (else the server's ``kill_signal``).
    """

    worker_id: int
    scope_id: str = field(validator=_non_empty)
    expiration_time: float = 0.0
    release: bool = field(default=False, kw_only=True)
    signal: int | None = field(default=None, kw_only=True)


@frozen(kw_only=True)
class ExpiredTimer:
    """What the server reports for a worker it has acted on."""

    worker_id: int
    scopes: tuple[str, ...]
    signal: int
    killed: bool  # False when the process was already gone


class TimerClient(Protocol):
    """Client side of the timer contract; one per worker process.

    ``acquire`` and ``release`` must return promptly; they raise ``RuntimeError`` naming the
    server when it cannot be reached.
    """

    def acquire(self, scope_id: str, expiration_time: float) -> None: ...

    def release(self, scope_id: str) -> None: ...


class RequestQueue(Protocol):
    """How requests reach a server."""

    def get(self, size: int, timeout: float) -> list[TimerRequest]:
        """Up to ``size`` requests, waiting at most ``timeout`` s for the first; [] if none."""
        ...


ExpiredCallback = Callable[[ExpiredTimer], None]


class TimerServer:
    """Keeps open deadlines per worker and kills workers whose deadline has passed.

    Args:
        request_queue: where requests arrive.
        max_interval: longest wait for requests between expiry checks; a late worker is killed
            at most about this long after its deadline.
        daemon: whether the server's thread is a daemon thread.
        kill_signal: signal sent to a late worker (SIGKILL: a hung process may ignore SIGTERM).
        on_expired: called (on the server thread) after each worker is acted on; the agent uses
            it to record the failure reason. Exceptions from it are logged and swallowed.
    """

    def __init__(
        self,
        request_queue: RequestQueue,
        max_interval: float = 1.0,
        daemon: bool = True,
        *,
        kill_signal: int = signal.SIGKILL if hasattr(signal, "SIGKILL") else signal.SIGTERM,
        on_expired: ExpiredCallback | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        if not max_interval > 0:
            raise ValueError(f"max_interval must be > 0, got {max_interval}")
        self._queue = request_queue
        self.max_interval = max_interval
        self._daemon = daemon
        self._signals: dict[int, int] = {}  # worker -> the signal its client asked for
        self.kill_signal = kill_signal
        self._on_expired = on_expired
        self._timers: dict[tuple[int, str], float] = {}  # (worker, scope) -> deadline
        # Workers whose deadlines other threads asked to drop; only the server's own thread
        # touches _timers, so the request waits here until the next run_once applies it.
        self._forget: set[int] = set()
        self._forget_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register_timers(self, timer_requests: list[TimerRequest]) -> None:
        """Apply acquires and releases in arrival order."""
        for request in timer_requests:
            key = (request.worker_id, request.scope_id)
            if request.release:
                self._timers.pop(key, None)
            else:
                self._timers[key] = request.expiration_time
                if request.signal is not None:
                    self._signals[request.worker_id] = request.signal

    def get_expired_timers(self, deadline: float) -> dict[int, list[str]]:
        """Scopes whose expiration time is at or before ``deadline`` (now), by worker."""
        expired: dict[int, list[str]] = {}
        for (worker, scope), expiration in self._timers.items():
            if expiration <= deadline:
                expired.setdefault(worker, []).append(scope)
        return expired

    def clear_timers(self, worker_ids: set[int]) -> None:
        """Forget every deadline of these workers (done after acting on them)."""
        self._timers = {k: v for k, v in self._timers.items() if k[0] not in worker_ids}
        for pid in worker_ids:
            self._signals.pop(pid, None)

    def forget_workers(self, worker_ids: set[int]) -> None:
        """Drop every deadline of these workers (e.g. the agent stopped them); any thread.

        Applied by the next :meth:`run_once`, before it looks for expired deadlines, so a
        stopped worker's pid (which the OS may reuse) is never signalled for its old deadline.
        """
        with self._forget_lock:
            self._forget |= set(worker_ids)

    def run_once(self, now: float | None = None) -> list[ExpiredTimer]:
        """Drain pending requests (waiting up to ``max_interval``), then act on expired ones."""
        self.register_timers(self._queue.get(size=1024, timeout=self.max_interval))
        with self._forget_lock:
            forget, self._forget = self._forget, set()
        if forget:
            self.clear_timers(forget)
        expired = self.get_expired_timers(self._clock.now() if now is None else now)
        results = [self._reap(worker, tuple(scopes)) for worker, scopes in expired.items()]
        self.clear_timers(set(expired))
        return results

    def _reap(self, worker: int, scopes: tuple[str, ...]) -> ExpiredTimer:
        killed = False
        sig = self._signals.get(worker, self.kill_signal)
        if worker == os.getpid():
            _log.error("timer of the server's own process expired (%s); not killing", scopes)
        else:
            try:
                os.kill(worker, sig)
                killed = True
                _log.warning(
                    "worker pid %d missed its deadline in %s; sent signal %d",
                    worker,
                    ", ".join(scopes),
                    sig,
                )
            except ProcessLookupError:
                pass  # it exited on its own; nothing left to enforce
        result = ExpiredTimer(worker_id=worker, scopes=scopes, signal=sig, killed=killed)
        if self._on_expired is not None:
            try:
                self._on_expired(result)
            except Exception:  # a broken callback must not stop enforcement
                _log.exception("timer on_expired callback failed")
        return result

    def start(self) -> None:
        """Run :meth:`run_once` in a thread (a daemon unless told otherwise) until :meth:`stop`."""
        if self._thread is not None:
            raise RuntimeError("timer server already started")
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name="tpelastic-timer", daemon=self._daemon
        )
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # keep enforcing; the next round may succeed
                _log.exception("timer server round failed")
                self._stop.wait(self.max_interval)

    def stop(self) -> None:
        """Stop the thread (waits at most ``max_interval`` + 5 s); idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.max_interval + 5.0)
            self._thread = None


_default_client: TimerClient | None = None
_default_lock = threading.Lock()


def configure(timer_client: TimerClient | None) -> None:
    """Set (or with None, clear) the process-wide client that :func:`expires` uses by default."""
    global _default_client
    with _default_lock:
        _default_client = timer_client


def get_default_client() -> TimerClient:
    """The configured client, else a named-pipe client for ``$TPELASTIC_TIMER_FILE``.

    Raises:
        RuntimeError: when neither is available.
    """
    global _default_client
    with _default_lock:
        if _default_client is None and os.environ.get(TIMER_FILE_ENV):
            from tpelastic.adapters.timer.file_based import FileTimerClient

            _default_client = FileTimerClient(os.environ[TIMER_FILE_ENV])
        if _default_client is None:
            raise RuntimeError(
                "no timer client: call tpelastic.timer.configure(client), pass client=..., or "
                f"run under an agent that sets {TIMER_FILE_ENV}"
            )
        return _default_client


class expires:
    """Context manager: the block must finish within ``after`` seconds or the worker is killed.

    Args:
        after: seconds allowed (> 0).
        scope: names the deadline; default is the calling file, line and thread.
        client: default is :func:`get_default_client`.

    Raises:
        ValueError: on ``after <= 0``. RuntimeError: when no client is available.
    """

    def __init__(
        self,
        after: float,
        scope: str | None = None,
        client: TimerClient | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        if not after > 0:
            raise ValueError(f"after must be > 0 seconds, got {after}")
        if scope is None:
            caller = sys._getframe(1)
            scope = f"{caller.f_code.co_filename}:{caller.f_lineno}#{threading.get_ident()}"
        self.after = after
        self.scope = scope
        self._client = client

    def __enter__(self) -> expires:
        if self._client is None:
            self._client = get_default_client()
        self._client.acquire(self.scope, self._clock.deadline(self.after))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._client is not None
        self._client.release(self.scope)
