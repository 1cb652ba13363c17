"""MultiprocessContext: workers that run a picklable callable, one argument tuple per rank.

Started with the chosen multiprocessing start method (spawn, fork or forkserver); the child side
is ``mp_worker.run_worker``. Return values come back through one pickle file per rank, read after
the worker exited 0, so no queue can deadlock a worker that returns a large object.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
from collections.abc import Callable
from typing import Any

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.workers import subreaper
from tpelastic.adapters.workers.context import PContext, WorkerHandle, wait_handles
from tpelastic.adapters.workers.mp_worker import StreamSpec, run_worker
from tpelastic.adapters.workers.subprocess_context import numa_cpus


class _ProcessWorker(WorkerHandle):
    """A multiprocessing worker, waited for through a pidfd where there is one.

    The process sentinel is a pipe whose other end the worker holds, and so does every
    process it forks: a daemon it leaves behind would keep the sentinel from ever firing. A
    pidfd fires when the worker itself exits.
    """

    def __init__(self, local_rank: int, process: Any, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(local_rank, int(process.pid))
        self._clock = clock
        self.process = process
        self._released = False
        try:
            self._fd: int | None = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            self._fd = None

    def wait_handle(self) -> Any:
        return self._fd if self._fd is not None else self.process.sentinel

    def reap(self, timeout: float) -> int | None:
        if self._released:
            return self.exitcode
        deadline = self._clock.deadline(timeout)
        if self._fd is not None:
            wait_handles([self._fd], timeout)
        code = self.process.exitcode  # waitpid (fork, spawn) or the forkserver's report
        if code is None:
            self.process.join(self._clock.remaining(deadline))
            code = self.process.exitcode
        return None if code is None else int(code)

    def release(self) -> None:
        if self._released or self.process.exitcode is None:
            return
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.process.close()
        self._released = True


def _multiprocessing_helpers() -> set[int]:
    """The pids of multiprocessing's forkserver and resource tracker, where they run."""
    found = set()
    for module, holder, attribute in (
        ("multiprocessing.forkserver", "_forkserver", "_forkserver_pid"),
        ("multiprocessing.resource_tracker", "_resource_tracker", "_pid"),
    ):
        loaded = sys.modules.get(module)
        pid = getattr(getattr(loaded, holder, None), attribute, None)
        if isinstance(pid, int):
            found.add(pid)
    return found


class MultiprocessContext(PContext):
    """Workers that run ``entrypoint(*args[local_rank])`` in their own process (torch's
    constructor).

    Args:
        name: the role name used in console prefixes.
        entrypoint: a picklable callable (any callable with ``fork``).
        args: per local rank, the argument tuple.
        envs: per local rank, the extra environment.
        start_method: ``spawn``, ``fork`` or ``forkserver``.
        logs_specs: where output goes (see :class:`PContext`).
        log_line_prefixes: per local rank, the prefix of its teed lines.
        numa_options: bind each worker to its NUMA node's CPUs (see ``numa.py``); None is off.
        duplicate_stdout_filters, duplicate_stderr_filters: see :class:`PContext`.
    """

    def __init__(
        self,
        name: str,
        entrypoint: Callable[..., Any],
        args: dict[int, tuple[Any, ...]],
        envs: dict[int, dict[str, str]],
        start_method: str,
        logs_specs: Any,
        log_line_prefixes: dict[int, str] | None = None,
        numa_options: Any = None,
        duplicate_stdout_filters: list[str] | None = None,
        duplicate_stderr_filters: list[str] | None = None,
    ) -> None:
        cpus = numa_cpus(numa_options, len(envs))
        super().__init__(
            name,
            entrypoint,
            args,
            envs,
            logs_specs,
            log_line_prefixes,
            duplicate_stdout_filters,
            duplicate_stderr_filters,
        )
        self.numa_cpus = cpus
        self.start_method = start_method
        self._mp: Any = multiprocessing.get_context(start_method)
        self._values: dict[int, Any] = {}  # return values read so far (each file read once)

    def _start_one(self, local_rank: int) -> WorkerHandle:
        files = self.files[local_rank]
        out, out_read = self._stream(files.stdout, files.tee_stdout)
        err, err_read = self._stream(files.stderr, files.tee_stderr)
        cpus = self.numa_cpus.get(local_rank)
        process = self._mp.Process(
            target=run_worker,
            name=f"{self.name}{local_rank}",
            args=(
                self.entrypoint,
                tuple(self.args[local_rank]),
                self.worker_env(local_rank),
                out,
                err,
                files.return_file,
                os.getpid(),
                self.start_method != "forkserver",
                sorted(cpus) if cpus else None,
                self.cgroup_procs(),
            ),
        )
        try:
            process.start()
        finally:
            for spec in (out, err):
                if spec is not None and spec[0] == "pipe":
                    spec[1].close()  # the child has its copy; EOF must follow the child's exit
        self._pump(local_rank, out_read, files.stdout, "stdout")
        self._pump(local_rank, err_read, files.stderr, "stderr")
        return _ProcessWorker(local_rank, process, self._clock)

    def _stream(self, path: str, tee: bool) -> tuple[StreamSpec, int | None]:
        if not path:
            return None, None
        if not tee:
            return ("file", path), None
        reader, writer = self._mp.Pipe(duplex=False)
        read_fd = os.dup(reader.fileno())  # raw bytes, not Connection messages
        reader.close()
        return ("pipe", writer), read_fd

    def adopted(self) -> list[int]:
        # The workers set their environment after they start: the mark is not in
        # /proc/<pid>/environ. Children born since the start that are not ours are adopted.
        own = {w.pid for w in self._workers.values()} | self._children_before
        if self._watchdog is not None:
            own.add(self._watchdog.pid)
        own |= _multiprocessing_helpers()
        found = set(super().adopted())
        found |= {pid for pid in subreaper.children() if pid not in own}
        return sorted(found)

    def _return_value(self, local_rank: int) -> Any:
        if local_rank in self._values:
            return self._values[local_rank]
        self._values[local_rank] = self._load_return_value(local_rank)
        return self._values[local_rank]

    def _load_return_value(self, local_rank: int) -> Any:
        try:
            with open(self.files[local_rank].return_file, "rb") as src:
                return pickle.load(src)
        except (OSError, EOFError, pickle.UnpicklingError):
            return None  # the callable ended through sys.exit(0): nothing was returned


__all__ = ["MultiprocessContext"]
