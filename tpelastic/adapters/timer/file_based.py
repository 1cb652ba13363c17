"""Timers over a named pipe: for subprocess workers, which share no queue with the agent.

The server creates a FIFO at ``path``; each client request is one JSON line written with a single
``write`` of fewer than ``PIPE_BUF`` bytes, which the kernel delivers whole even when many workers
write at once. Line format: ``{"pid": int, "scope": str, "deadline": float, "release": bool}``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import select
import signal
import stat
from collections.abc import Callable

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.timer.api import ExpiredCallback, ExpiredTimer, TimerRequest, TimerServer

_log = logging.getLogger(__name__)
_WRITE_TIMEOUT_S = 5.0


class FileTimerClient:
    """Sends this process's deadlines to a :class:`FileTimerServer` listening on ``file_path``.

    ``signal`` is what the server sends this process when a deadline passes; None (the
    default) leaves it to the server's ``kill_signal`` (SIGKILL unless the agent chose another).

    Raises (from acquire/release):
        RuntimeError: naming the path when no server is listening, or when the pipe stays full
            for 5 s. ValueError: when a request would not fit in one atomic pipe write.
    """

    def __init__(
        self,
        file_path: str | os.PathLike[str],
        signal: int | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self.path = os.fspath(file_path)
        self.signal = signal

    def acquire(self, scope_id: str, expiration_time: float) -> None:
        self._send(TimerRequest(os.getpid(), scope_id, expiration_time, signal=self.signal))

    def release(self, scope_id: str) -> None:
        self._send(TimerRequest(worker_id=os.getpid(), scope_id=scope_id, release=True))

    def _send(self, request: TimerRequest) -> None:
        line = json.dumps(
            {
                "pid": request.worker_id,
                "scope": request.scope_id,
                "deadline": request.expiration_time,
                "release": request.release,
                "signal": request.signal,
            }
        )
        data = (line + "\n").encode("utf-8")
        if len(data) > select.PIPE_BUF:
            raise ValueError(
                f"timer scope too long ({len(data)} bytes a request, max {select.PIPE_BUF})"
            )
        try:
            # Non-blocking open fails at once (ENXIO) when nobody reads, instead of hanging.
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise RuntimeError(
                f"no timer server is listening at {self.path}: {exc.strerror}"
            ) from None
        try:
            deadline = self._clock.deadline(_WRITE_TIMEOUT_S)
            while True:
                try:
                    os.write(fd, data)
                    return
                except BlockingIOError:
                    left = deadline - self._clock.now()
                    if left <= 0:
                        raise RuntimeError(
                            f"timer pipe {self.path} stayed full for {_WRITE_TIMEOUT_S} s"
                        ) from None
                    select.select([], [fd], [], left)
        finally:
            os.close(fd)


class FifoRequestQueue:
    """Reads request lines from a FIFO it creates; :meth:`close` removes the FIFO.

    Raises:
        FileExistsError: when ``path`` exists and is not a FIFO (never overwrite a user's file).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            os.mkfifo(self.path, 0o600)
        except FileExistsError:
            if not stat.S_ISFIFO(os.stat(self.path).st_mode):
                raise FileExistsError(f"{self.path} exists and is not a named pipe") from None
        self._read_fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        # Holding a write end ourselves means the pipe never reports end-of-file between
        # clients, so select() blocks quietly instead of spinning.
        self._keep_fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        self._partial = b""

    def get(self, size: int, timeout: float) -> list[TimerRequest]:
        ready, _, _ = select.select([self._read_fd], [], [], timeout)
        if not ready:
            return []
        chunks = [self._partial]
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        *lines, self._partial = b"".join(chunks).split(b"\n")
        return [r for r in (self._parse(line) for line in lines if line) if r is not None]

    def _parse(self, line: bytes) -> TimerRequest | None:
        try:
            obj = json.loads(line)
            sig = obj.get("signal")
            return TimerRequest(
                int(obj["pid"]),
                str(obj["scope"]),
                float(obj["deadline"]),
                release=bool(obj["release"]),
                signal=None if sig is None else int(sig),
            )
        except (ValueError, KeyError, TypeError) as exc:
            _log.warning("ignoring a malformed timer request on %s: %s", self.path, exc)
            return None

    def close(self) -> None:
        """Close both ends and remove the FIFO; idempotent."""
        for fd in (self._read_fd, self._keep_fd):
            try:
                os.close(fd)
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
        self._read_fd = self._keep_fd = -1
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class FileTimerServer(TimerServer):
    """A :class:`TimerServer` listening on a named pipe at ``path`` (created on construction).

    Give workers the path in ``TPELASTIC_TIMER_FILE`` so their default client finds it.

    Args:
        file_path: where to create the FIFO; its directory must exist.
        run_id: the job's id, for log lines.
        max_interval, daemon, kill_signal, on_expired: as for :class:`TimerServer`.
        log_event: called as ``log_event("timer expired", expired)`` for each worker acted on.

    Raises:
        FileExistsError: when ``path`` is an existing non-FIFO file.
    """

    def __init__(
        self,
        file_path: str | os.PathLike[str],
        run_id: str = "",
        max_interval: float = 1.0,
        daemon: bool = True,
        log_event: Callable[[str, ExpiredTimer], None] | None = None,
        *,
        kill_signal: int = signal.SIGKILL if hasattr(signal, "SIGKILL") else signal.SIGTERM,
        on_expired: ExpiredCallback | None = None,
    ) -> None:
        self._fifo = FifoRequestQueue(file_path)
        self.path = self._fifo.path
        self.run_id = run_id

        def expired(result: ExpiredTimer) -> None:
            if log_event is not None:
                log_event("timer expired", result)
            if on_expired is not None:
                on_expired(result)

        super().__init__(
            self._fifo,
            max_interval,
            daemon,
            kill_signal=kill_signal,
            on_expired=expired if (log_event or on_expired) else None,
        )

        self._last_pass: int | None = None  # wall seconds at the end of the last pass

    def run_once(self, now: float | None = None) -> list[ExpiredTimer]:
        results = super().run_once(now)
        self._last_pass = int(self._clock.wall())
        return results

    def get_last_progress_time(self) -> int:
        """Wall-clock seconds (an int, as torch's) when the server last finished a pass over
        its requests; the current time before its first pass, so a server that has just
        started is not reported stuck."""
        return self._last_pass if self._last_pass is not None else int(self._clock.wall())

    @staticmethod
    def is_process_running(pid: int) -> bool:
        """Whether process ``pid`` exists and may be signalled by us (torch's check)."""
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True

    def clear_timers(self, worker_pids: set[int]) -> None:
        """Forget every deadline of these worker processes (torch's argument name here)."""
        super().clear_timers(worker_pids)

    def stop(self) -> None:
        """Stop the thread, then remove the FIFO; idempotent."""
        super().stop()
        self._fifo.close()
