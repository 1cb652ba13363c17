"""Worker-progress heartbeat: workers count steps into a file, the agent watches the counts.

Worker side: the training loop calls :func:`step` once per step (cheap: one ``pwrite`` of a few
bytes to a file the agent named in ``TPELASTIC_PROGRESS_FILE``; without that variable it does
nothing). Around a collective wait, :func:`waiting` marks the worker as blocked on its peers, so
when everyone stops the agent can tell the rank that hangs from the ranks waiting for it.

Agent side: :func:`read_progress` reads a file, and :class:`ProgressWatch` feeds the counts, with
the agent's own monotonic ``now``, to the core's hang watch (``tpelastic.core.progress``),
which decides "rank r idle for X s". The watch reads no clock and touches no file, so it is
tested with plain numbers.

File format (85 bytes of ASCII, rewritten in place with one ``pwrite``)::

    "%020d %d %015d %020d %-24s\\n" % (counter, waiting, step_us, collectives, collective)

``step_us`` is how long the last step took (microseconds between the last two :func:`step`
calls, 0 before the second), ``collectives`` how many collectives this worker has entered and
``collective`` the name of the last one (``-`` before the first); see
:mod:`tpelastic.adapters.collectives`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from attrs import evolve

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.core import progress
from tpelastic.core.progress import ProgressSample, Stall

PROGRESS_FILE_ENV = "TPELASTIC_PROGRESS_FILE"
_RECORD_LEN = 85
_NAME_LEN = 24


class ProgressReporter:
    """Writes one worker's counter to ``path``; the file is created (or truncated) on open."""

    def __init__(self, path: str | os.PathLike[str], clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self.path = os.fspath(path)
        self.counter = 0
        self.waiting = False
        self.step_us = 0
        self.collectives = 0
        self.collective = "-"
        self._last_step: float | None = None
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._write()

    def _write(self) -> None:
        # One pwrite of a fixed-size record at offset 0: a reader sees the old or the new
        # record, and a torn read (if the OS ever allows one) fails to parse and is skipped.
        record = (
            f"{self.counter:020d} {int(self.waiting)} {min(self.step_us, 10**15 - 1):015d} "
            f"{self.collectives:020d} {self.collective:<{_NAME_LEN}.{_NAME_LEN}}\n"
        )
        os.pwrite(self._fd, record.encode("ascii"), 0)

    def step(self, n: int = 1) -> int:
        """Add ``n`` steps; returns the new counter."""
        # The worker's own monotonic clock: a step's duration never mixes two hosts' clocks.
        now = self._clock.now()
        if self._last_step is not None and n > 0:
            self.step_us = int((now - self._last_step) * 1e6 / n)
        self._last_step = now
        self.counter += n
        self._write()
        return self.counter

    def entered(self, collective: str) -> None:
        """The worker entered collective ``collective`` (counted, and marked as waiting)."""
        self.collectives += 1
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in collective)
        self.collective = name[:_NAME_LEN] or "-"
        self.waiting = True
        self._write()

    def left(self) -> None:
        """The worker's collective returned (or raised): no longer waiting."""
        self.waiting = False
        self._write()

    def set_waiting(self, waiting: bool) -> None:
        self.waiting = waiting
        self._write()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


_reporter: ProgressReporter | None = None
_reporter_path: str | None = None


def _current() -> ProgressReporter | None:
    """This process's reporter, following ``TPELASTIC_PROGRESS_FILE`` (None when unset)."""
    global _reporter, _reporter_path
    path = os.environ.get(PROGRESS_FILE_ENV) or None
    if path != _reporter_path:
        if _reporter is not None:
            _reporter.close()
        _reporter = ProgressReporter(path) if path else None
        _reporter_path = path
    return _reporter


def step(n: int = 1) -> int | None:
    """Tell the agent this worker made progress; call once per training step.

    Returns the counter, or None when not running under an agent that watches progress.

    Raises:
        OSError: if the progress file the agent named cannot be written.
    """
    reporter = _current()
    return None if reporter is None else reporter.step(n)


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """Mark the block as a wait on other ranks (e.g. around ``dist.barrier()``)."""
    reporter = _current()
    if reporter is not None:
        reporter.set_waiting(True)
    try:
        yield
    finally:
        if reporter is not None:
            reporter.set_waiting(False)


def barrier(group: object = None, timeout: float | None = None) -> None:
    """``tensorplay.distributed`` barrier that counts as a wait, then as one step of progress.

    Uses ``monitored_barrier`` when a ``timeout`` is given (the process group then names the
    missing ranks itself, on backends that support it), else ``barrier``.

    Raises:
        whatever the barrier raises (e.g. a timeout naming the ranks that did not arrive).
    """
    import datetime

    import tensorplay.distributed as dist

    with waiting():
        if timeout is not None:
            dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=timeout))
        else:
            dist.barrier(group=group)
    step()


def read_progress(path: str | os.PathLike[str]) -> ProgressSample | None:
    """The sample in ``path``, or None when the file is missing, empty or mid-write."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_RECORD_LEN)
    except OSError:
        return None
    parts = raw.split()
    if len(raw) != _RECORD_LEN or len(parts) != 5 or parts[1] not in (b"0", b"1"):
        return None
    try:
        step_us = int(parts[2])
        name = parts[4].decode("ascii")
        return ProgressSample(
            counter=int(parts[0]),
            waiting=parts[1] == b"1",
            step_seconds=step_us / 1e6 if step_us > 0 else None,
            collectives=int(parts[3]),
            collective="" if name == "-" else name,
        )
    except (ValueError, UnicodeDecodeError):
        return None


class ProgressWatch:
    """Which ranks are stuck, from their counters and the observer's monotonic time: the
    core's hang watch (``tpelastic.core.progress``), stepped with what it is fed.

    A rank is stuck once its counter has not changed for ``idle_timeout`` seconds (or for
    ``first_step_timeout`` before its first step, since startup and loading take longer).

    Args:
        ranks: the ranks to watch.
        now: the observer's monotonic time when watching starts (counts as progress).
        idle_timeout: seconds without a new step that make a rank stuck (> 0).
        first_step_timeout: the same before a rank's first step; default ``idle_timeout``.

    Raises:
        ValueError: on a non-positive timeout.
    """

    def __init__(
        self,
        ranks: list[int] | tuple[int, ...],
        now: float,
        idle_timeout: float,
        first_step_timeout: float | None = None,
    ) -> None:
        first = idle_timeout if first_step_timeout is None else first_step_timeout
        if not idle_timeout > 0 or not first > 0:
            raise ValueError(f"timeouts must be > 0, got {idle_timeout} and {first}")
        self.idle_timeout = idle_timeout
        self.first_step_timeout = first
        # inf: read for the health endpoint only, never stuck.
        never = idle_timeout == float("inf")
        self._config = progress.ProgressConfig(
            idle_timeout=None if never else idle_timeout,
            first_step_timeout=None if never else first,
        )
        started = progress.WatchStarted(now=now, ranks=tuple(ranks))
        self._state = progress.step(progress.ProgressState(), started, self._config).state
        self._watched = frozenset(ranks)

    @classmethod
    def from_config(
        cls, ranks: list[int] | tuple[int, ...], now: float, config: progress.ProgressConfig
    ) -> ProgressWatch:
        """The watch the core's ``config`` describes (``progress.progress_config``)."""
        idle = config.idle_timeout
        if idle is None:
            return cls(ranks, now, idle_timeout=float("inf"))
        return cls(ranks, now, idle_timeout=idle, first_step_timeout=config.first_step_timeout)

    def observe(self, rank: int, sample: ProgressSample | None, now: float) -> None:
        """Feed one read of ``rank``'s progress; None (nothing readable yet) changes nothing.

        Raises:
            KeyError: naming the rank if it is not watched.
        """
        self.observe_all({rank: sample}, now)

    def observe_all(self, samples: Mapping[int, ProgressSample | None], now: float) -> None:
        for rank in samples:
            if rank not in self._watched:
                raise KeyError(f"rank {rank} is not watched")
        found = tuple((r, s) for r, s in samples.items() if s is not None)
        read = progress.ProgressRead(now=now, samples=found)
        self._state = evolve(self._state, ranks=progress.observed(self._state.ranks, read))

    def read(
        self, samples: Mapping[int, ProgressSample | None], now: float, live: tuple[int, ...]
    ) -> Stall | None:
        """Step the watch with one read of every file (``live``: the ranks whose processes
        still run): the core's verdict, the likely cause among the stuck live ranks, or None.

        Raises:
            KeyError: naming a rank that is not watched.
        """
        for rank in samples:
            if rank not in self._watched:
                raise KeyError(f"rank {rank} is not watched")
        read = progress.ProgressRead(
            now=now,
            samples=tuple((r, s) for r, s in samples.items() if s is not None),
            live=live,
        )
        done = progress.step(self._state, read, self._config)
        self._state = done.state
        found = [e for e in done.effects if isinstance(e, Stall)]
        return found[0] if found else None

    def stalled(self, now: float) -> list[Stall]:
        """The stuck ranks, ranks not waiting on a collective first (they are the likely cause)."""
        return list(progress.stalls(self._state.ranks, now, self._config))

    def samples(self) -> dict[int, ProgressSample | None]:
        """The last readable sample of each rank (None before the first)."""
        return {held.rank: held.sample for held in self._state.ranks}

    def last_progress_age(self, now: float) -> dict[int, float]:
        """Seconds since each rank's last progress (for the health endpoint)."""
        return {held.rank: now - held.since for held in self._state.ranks}


__all__ = [
    "PROGRESS_FILE_ENV",
    "ProgressReporter",
    "ProgressSample",
    "ProgressWatch",
    "Stall",
    "barrier",
    "read_progress",
    "step",
    "waiting",
]
