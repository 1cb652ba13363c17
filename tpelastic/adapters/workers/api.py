"""Values of the worker-process adapter: stream choices, failures, results, logs layout.

Everything here is a plain value (or an exception carrying values); nothing starts or stops a
process. The contexts in ``subprocess_context`` and ``multiprocessing_context`` produce these.
"""

from __future__ import annotations

import enum
import signal
import socket
import time
from typing import Any

from attrs import field, frozen

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.core.values import value_eq, value_hash, value_repr


class WorkerStartError(ValueError):
    """Bad input to ``start_processes``, raised before any worker starts; one-line message."""


class Std(enum.IntFlag):
    """Which standard streams of a worker a choice applies to.

    ``NONE`` leaves both streams alone, ``OUT`` and ``ERR`` pick one, ``ALL`` picks both. The
    integer values (0, 1, 2, 3) are what the command line accepts.
    """

    NONE = 0
    OUT = 1
    ERR = 2
    ALL = 3

    @classmethod
    def from_str(cls, text: str) -> Std | dict[int, Std]:
        """Parse ``"3"`` (one value for every rank) or ``"0:1,1:2"`` (per local rank).

        Raises:
            WorkerStartError: the text is neither form, or names a value outside 0..3.
        """
        text = text.strip()
        if ":" not in text:
            return cls._one(text, text)
        per_rank: dict[int, Std] = {}
        for item in text.split(","):
            rank_text, sep, value_text = item.partition(":")
            if not sep or not rank_text.strip().isdigit():
                raise WorkerStartError(f"invalid redirect spec {text!r}: expected 'N' or 'R:N,...'")
            rank = int(rank_text)
            if rank in per_rank:
                raise WorkerStartError(f"invalid redirect spec {text!r}: rank {rank} given twice")
            per_rank[rank] = cls._one(value_text, text)
        return per_rank

    @classmethod
    def _one(cls, value_text: str, whole: str) -> Std:
        value_text = value_text.strip()
        if not value_text.isdigit() or int(value_text) > 3:
            raise WorkerStartError(f"invalid redirect spec {whole!r}: values are 0, 1, 2 or 3")
        return cls(int(value_text))


Redirects = Std
"""Per-stream redirection modes; the same flags as ``Std`` (``Redirects.ALL`` is ``Std.ALL``)."""


def to_map(val_or_map: Std | int | str | dict[int, Std], local_world_size: int) -> dict[int, Std]:
    """Expand one redirect choice into one ``Std`` per local rank ``0..local_world_size-1``.

    Args:
        val_or_map: a ``Std``, its integer, a spec string (``"3"``, ``"0:1,1:2"``) or a
            per-rank dict. Ranks missing from a per-rank spec get ``Std.NONE``; ranks beyond the
            local world are ignored.
        local_world_size: how many local ranks there are.

    Raises:
        WorkerStartError: the spec is malformed.
    """
    if isinstance(val_or_map, str):
        val_or_map = Std.from_str(val_or_map)
    if isinstance(val_or_map, bool) or not isinstance(val_or_map, (int, dict)):
        raise WorkerStartError(
            f"invalid redirect spec {val_or_map!r}: expected Std, int, str or dict"
        )
    if isinstance(val_or_map, int):
        if not 0 <= int(val_or_map) <= 3:
            raise WorkerStartError(f"invalid redirect spec {val_or_map!r}: values are 0, 1, 2 or 3")
        return {rank: Std(int(val_or_map)) for rank in range(local_world_size)}
    # A rank beyond the local world is ignored, as torch's to_map: one spec serves nodes of
    # several sizes.
    return {rank: Std(int(val_or_map.get(rank, Std.NONE))) for rank in range(local_world_size)}


def signal_name(exitcode: int) -> str | None:
    """The name of the signal that ended a process (``exitcode < 0``), else None."""
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"SIG{-exitcode}"


@frozen
class ProcessFailure:
    """One worker that ended badly.

    Attributes:
        local_rank: the worker's local rank.
        pid: its process id.
        exitcode: its exit status; negative means killed by signal ``-exitcode``.
        timestamp: wall-clock seconds when it ended (from its error file when it wrote one, which
            is the most precise time we have; else when the agent saw it exit).
        error_file: where the worker was told to write its error file.
        error_file_data: the parsed error file, or None when the worker wrote none.
        rank: the global rank when known (from the worker's RANK variable).
        role: the name given to ``start_processes``.
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    local_rank: int
    pid: int
    exitcode: int
    error_file: str = ""
    timestamp: float = field(factory=SYSTEM_CLOCK.wall, kw_only=True)
    error_file_data: dict[str, Any] | None = field(default=None, kw_only=True)
    rank: int | None = field(default=None, kw_only=True)
    role: str = field(default="default", kw_only=True)

    def signal_name(self) -> str | None:
        """``"SIGKILL"`` and so on when a signal ended the worker, else None."""
        return signal_name(self.exitcode)

    @property
    def message(self) -> str:
        """A one-line description: the exception message from the error file, or the exit."""
        data = self.error_file_data or {}
        if data.get("message"):
            kind = data.get("exception_type") or "error"
            return f"{kind}: {data['message']}"
        if self.signal_name():
            return f"Signal {-self.exitcode} ({self.signal_name()}) received by PID {self.pid}"
        return f"Process {self.pid} exited with code {self.exitcode}"

    @property
    def traceback(self) -> str | None:
        """The traceback text from the error file, when there is one."""
        data = self.error_file_data or {}
        text = data.get("traceback")
        return str(text) if text else None

    def timestamp_isoformat(self) -> str:
        """``timestamp`` as local ISO-8601 text, for summaries."""
        return time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime(self.timestamp))


@frozen
class RunProcsResult:
    """What a finished (or failed) worker group produced.

    Attributes:
        return_values: per local rank, the callable's return value (callables only; only for
            workers that finished successfully).
        failures: per local rank, how the worker failed.
        stdouts: per local rank, the file that holds its stdout ("" when not redirected).
        stderrs: per local rank, the file that holds its stderr ("" when not redirected).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    return_values: dict[int, Any] = field(factory=dict)
    failures: dict[int, ProcessFailure] = field(factory=dict)
    stdouts: dict[int, str] = field(factory=dict)
    stderrs: dict[int, str] = field(factory=dict)

    def is_failed(self) -> bool:
        """True when at least one worker failed."""
        return bool(self.failures)


def first_failure(failures: dict[int, ProcessFailure]) -> ProcessFailure:
    """The root cause: the failure that happened first in time (ties go to the lowest rank)."""
    return min(failures.values(), key=lambda f: (f.timestamp, f.local_rank))


class ChildFailedError(Exception):
    """One or more workers failed; the summary names the first failure as the root cause.

    Attributes:
        name: the entrypoint or role that failed.
        failures: per local rank (or global rank), the failures.
        host: the host the workers ran on.
    """

    def __init__(
        self, name: str, failures: dict[int, ProcessFailure], host: str | None = None
    ) -> None:
        if not failures:
            raise ValueError("ChildFailedError needs at least one failure")
        self.name = name
        self.failures = dict(failures)
        self.host = host or socket.gethostname()  # not getfqdn: it may wait on DNS
        super().__init__(self.format_msg())

    def get_first_failure(self) -> tuple[int, ProcessFailure]:
        """The (key, failure) of the earliest failure by time: the root cause."""
        root = first_failure(self.failures)
        key = next(k for k, f in self.failures.items() if f is root)
        return key, root

    def format_msg(self, boarder_delim: str = "=", section_delim: str = "-") -> str:
        """A readable summary: the root cause first, with its traceback, then the others.

        As torch's, the summary is framed by a line of ``boarder_delim`` and its parts are
        parted by a line of ``section_delim`` (as wide as the text, at most 60); an empty
        delimiter draws no line.
        """
        _, root = self.get_first_failure()
        body = ["Root cause (first failure by time):", *self._describe(root)]
        if root.traceback:
            body += ["  traceback:", *("    " + ln for ln in root.traceback.rstrip().splitlines())]
        others = sorted((f for f in self.failures.values() if f is not root), key=_by_time)
        rest: list[str] = []
        if others:
            rest.append("Other failures:")
            for failure in others:
                rest += self._describe(failure)
        title = f"{self.name} FAILED"
        width = min(60, max(len(line) for line in [title, *body, *rest]))

        def rule(delim: str) -> list[str]:
            return [(delim * width)[:width]] if delim else []

        lines = [*rule(boarder_delim), title, *rule(section_delim), *body]
        if rest:
            lines += [*rule(section_delim), *rest]
        return "\n".join([*lines, *rule(boarder_delim)])

    def _describe(self, failure: ProcessFailure) -> list[str]:
        code = failure.exitcode
        status = f"{code} ({failure.signal_name()})" if failure.signal_name() else str(code)
        rank = "unknown" if failure.rank is None else str(failure.rank)
        return [
            f"  [{failure.role}{failure.local_rank}] local_rank: {failure.local_rank}"
            f" (rank: {rank})",
            f"    time: {failure.timestamp_isoformat()}  host: {self.host}  pid: {failure.pid}",
            f"    exitcode: {status}",
            f"    error: {failure.message}",
            f"    error_file: {failure.error_file or '<none>'}",
        ]


def _by_time(failure: ProcessFailure) -> tuple[float, int]:
    return (failure.timestamp, failure.local_rank)


__all__ = [
    "ChildFailedError",
    "ProcessFailure",
    "Redirects",
    "RunProcsResult",
    "Std",
    "WorkerStartError",
    "first_failure",
    "signal_name",
    "to_map",
]
