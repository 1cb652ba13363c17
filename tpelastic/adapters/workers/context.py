"""PContext: the base of a running worker group (start, wait, pids, close, send_signal).

A watcher thread blocks on every worker's exit handle (a pidfd for subprocesses, the process
sentinel for multiprocessing workers) and records each exit the moment it happens, with its wall
time, so ``wait`` reacts within milliseconds and the root cause is the failure that really came
first. Subclasses only know how to start one worker and how to reap it.
"""

from __future__ import annotations

import abc
import itertools
import os
import select
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.adapters.workers import subreaper
from tpelastic.adapters.workers.api import ProcessFailure, RunProcsResult
from tpelastic.adapters.workers.logs import rank_files
from tpelastic.adapters.workers.tree import kill_trees  # the stop path imports nothing

if TYPE_CHECKING:
    from tpelastic.adapters.workers.cgroup import WorkerCgroup
    from tpelastic.adapters.workers.tee import LineCopy, StreamPump

# The error file reader (a failure), the watchdog (after the workers) and the tee pumps (teed
# output only) are imported where they are used, not before the first worker starts (issue 5).

_START_TIMEOUT = 120.0
_GROUP_SERIAL = itertools.count()


def wait_handles(handles: list[Any], timeout: float) -> set[Any]:
    """The ``handles`` (fds, or objects with ``fileno()``) readable or closed within ``timeout``.

    Our own small poll rather than ``multiprocessing.connection.wait``: importing that costs the
    agent several milliseconds (pickle, tempfile, sockets) on every launch, for one call.
    """
    by_fd = {(h if isinstance(h, int) else h.fileno()): h for h in handles}
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    events = poller.poll(max(0.0, timeout) * 1000.0)  # EINTR is retried by Python (PEP 475)
    return {by_fd[fd] for fd, _mask in events if fd in by_fd}


def wait_exit(popen: subprocess.Popen[bytes], timeout: float) -> int:
    """Wait for ``popen`` to exit and reap it; return its exit status.

    ``Popen.wait(timeout)`` polls with sleeps that grow to 50 ms, so a child that exits after
    3 ms is noticed after about 7 ms; a pidfd (Linux 5.3+) wakes us the moment it exits.

    Raises:
        subprocess.TimeoutExpired: it is still running after ``timeout`` seconds.
    """
    try:
        fd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):  # not Linux, an old kernel, or already reaped
        return popen.wait(timeout=timeout)
    try:
        wait_handles([fd], timeout)
    finally:
        os.close(fd)
    return popen.wait(timeout=0)  # exited by now, or TimeoutExpired


class _Launcher:
    """One long-lived daemon thread that forks every worker of this agent process.

    Linux sends the parent-death signal when the *thread* that forked a worker ends, not the
    process. Forking from this thread, which lives as long as the agent, lets callers start
    workers from short-lived threads. (Not a ThreadPoolExecutor: its exit hook breaks children
    forked from its threads with the ``fork`` start method.)
    """

    # Jobs are handed over through a deque and a condition rather than ``queue.Queue``, whose
    # import (with heapq) cost every launch 0.7 ms for these two calls.

    def __init__(self) -> None:
        self._jobs: deque[Callable[[], None]] = deque()
        self._pending = threading.Condition()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def run(self, job: Callable[[], Any], timeout: float = _START_TIMEOUT) -> Any:
        """Run ``job`` on the launcher thread and return its result (or raise its error).

        Raises:
            TimeoutError: the job did not finish within ``timeout`` seconds.
        """
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="tp-launch", daemon=True)
                self._thread.start()
        reply: list[tuple[bool, Any]] = []
        done = threading.Event()

        def task() -> None:
            try:
                reply.append((True, job()))
            except BaseException as err:  # handed to the caller, who re-raises it
                reply.append((False, err))
            finally:
                done.set()

        with self._pending:
            self._jobs.append(task)
            self._pending.notify()
        if not done.wait(timeout):
            raise TimeoutError(f"starting a worker took more than {timeout} s")
        ok, value = reply[0]
        if not ok:
            raise value
        return value

    def _loop(self) -> None:
        while True:
            with self._pending:
                while not self._jobs:
                    self._pending.wait()
                task = self._jobs.popleft()
            task()


_LAUNCHER = _Launcher()


def on_launcher_thread(job: Callable[[], Any]) -> Any:
    """Run ``job`` on the thread that forks the workers, and return its result: a process it
    starts gets the parent-death signal of a worker (see :class:`_Launcher`)."""
    return _LAUNCHER.run(job)


def _line_copy(path: str, filters: list[str] | None) -> LineCopy | None:
    """The shared file that teed lines matching ``filters`` are copied to; None for none."""
    if not filters:
        return None
    from tpelastic.adapters.workers.tee import LineCopy

    return LineCopy(path, filters)


class WorkerHandle(abc.ABC):
    """One started worker, as its context sees it."""

    def __init__(self, local_rank: int, pid: int) -> None:
        self.local_rank = local_rank
        self.pid = pid
        self.exitcode: int | None = None
        self.ended_at: float | None = None  # wall time the watcher saw the exit
        self.stopped_by_us = False  # exited after close() began: not a failure

    @abc.abstractmethod
    def wait_handle(self) -> Any:
        """Something ``multiprocessing.connection.wait`` can block on until the worker exits."""

    @abc.abstractmethod
    def reap(self, timeout: float) -> int | None:
        """Collect the exit status if the worker has ended (within ``timeout``), else None."""

    @abc.abstractmethod
    def release(self) -> None:
        """Free any OS handle held for waiting; called once the worker is reaped; idempotent."""


class PContext(abc.ABC):
    """A homogeneous group of local worker processes (torch's constructor).

    Args:
        name: the role name; it prefixes teed lines (``[name0]:``).
        entrypoint: what each worker runs.
        args: per local rank, the worker's arguments.
        envs: per local rank, the extra environment of that worker.
        logs_specs: where output goes; its ``reify(envs)`` makes the attempt folder now.
        log_line_prefixes: per local rank, the prefix of its teed lines (else ``[name0]:``).
        duplicate_stdout_filters, duplicate_stderr_filters: teed lines holding any of these
            strings are also copied to the attempt's ``filtered_stdout.log`` and
            ``filtered_stderr.log``.
        clock: times the waits; wall time stamps each exit (for people and error files).
    """

    def __init__(
        self,
        name: str,
        entrypoint: Any,
        args: dict[int, tuple[Any, ...]],
        envs: dict[int, dict[str, str]],
        logs_specs: Any,
        log_line_prefixes: dict[int, str] | None = None,
        duplicate_stdout_filters: list[str] | None = None,
        duplicate_stderr_filters: list[str] | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        dest = logs_specs.reify(envs)
        self.attempt_dir, self.files = rank_files(dest, len(envs))
        self.name = name
        self.entrypoint = entrypoint
        self.args = args
        self.envs = envs
        self.logs_specs = logs_specs
        self.log_line_prefixes = dict(log_line_prefixes or {})
        self.nprocs = len(envs)
        self._copies = {
            "stdout": _line_copy(dest.filtered_stdout, duplicate_stdout_filters),
            "stderr": _line_copy(dest.filtered_stderr, duplicate_stderr_filters),
        }
        self.numa_cpus: dict[int, frozenset[int]] = {}  # set by a subclass that binds
        self._workers: dict[int, WorkerHandle] = {}
        self._pumps: list[StreamPump] = []
        self._cond = threading.Condition()
        self._closing = False
        self._closed = False
        self._interrupted = False  # set by interrupt(), taken by the next wait()
        self._failures: dict[int, ProcessFailure] = {}
        self._wake_r, self._wake_w = os.pipe()
        self._watcher = threading.Thread(target=self._watch, name=f"watch-{name}", daemon=True)
        self._watchdog: subprocess.Popen[bytes] | None = None
        # Marks this group's processes, so those re-parented to the agent are found at close.
        self._token = f"{os.getpid()}-{next(_GROUP_SERIAL)}-{os.urandom(4).hex()}"
        self._children_before: set[int] = set()
        self._cgroup: WorkerCgroup | None = None

    def cgroup_procs(self) -> str | None:
        """The ``cgroup.procs`` file of this group's cgroup, or None when it has none."""
        return self._cgroup.procs if self._cgroup is not None else None

    def _pump(self, local_rank: int, read_fd: int | None, path: str, stream: str) -> None:
        """Copy one teed stream (the pipe ``read_fd``) to ``path`` and the console."""
        if read_fd is None:
            return
        from tpelastic.adapters.workers.tee import StreamPump, console_fd, line_prefix

        prefix = self.log_line_prefixes.get(local_rank)
        if prefix is None:
            rank = self.envs[local_rank].get("RANK", "")
            prefix = line_prefix(self.name, local_rank, int(rank) if rank.isdigit() else None)
        console = console_fd(sys.stdout if stream == "stdout" else sys.stderr)
        log = open(path, "ab")  # owned and closed by the pump
        pump = StreamPump(read_fd, log, console, prefix, copy=self._copies[stream])
        self._pumps.append(pump.start())

    def __enter__(self) -> PContext:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- starting -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every worker, the watchdog, and the watcher thread.

        If a worker fails to start, the ones already started are stopped and the error raised.
        """
        subreaper.become_subreaper()  # before any worker can leave an orphan behind
        self._children_before = subreaper.children()
        from tpelastic.adapters.workers.cgroup import WorkerCgroup

        self._cgroup = WorkerCgroup.create(self._token, self._clock)
        try:
            # One hand-off to the launcher thread for all of them: each hand-off is a thread
            # wake-up, several milliseconds between two workers' starts on a busy machine.
            _LAUNCHER.run(self._start_all)
            from tpelastic.adapters.workers.watchdog import command as watchdog_command

            # The workers first, so they do not wait for it: the watchdog's cover is for their
            # children, and a worker has none in the moment before the watchdog is up (the
            # worker itself already carries the parent-death signal).
            self._watchdog = subprocess.Popen(
                watchdog_command(os.getpid()),
                stdin=subprocess.PIPE,
                start_new_session=True,
            )
            self._tell_watchdog("".join(f"{w.pid}\n" for w in self._workers.values()))
        except BaseException:
            self.close(death_sig=signal.SIGKILL, timeout=0)
            raise
        self._watcher.start()

    def _start_all(self) -> None:
        # Recorded one by one, so that a failure leaves the started ones for close() to stop.
        for rank in range(self.nprocs):
            self._workers[rank] = self._start_one(rank)

    @abc.abstractmethod
    def _start_one(self, local_rank: int) -> WorkerHandle:
        """Start the worker of ``local_rank`` and return its handle."""

    def _tell_watchdog(self, line: str) -> None:
        if self._watchdog is None or self._watchdog.stdin is None:
            return
        try:
            self._watchdog.stdin.write(line.encode())
            self._watchdog.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the watchdog is gone; the parent-death signal still covers the workers

    def worker_env(self, local_rank: int) -> dict[str, str]:
        """The full environment of a worker: ours, its extras, and the error-file variables."""
        env = {**os.environ, **self.envs[local_rank]}
        path = self.files[local_rank].error_file
        env["TPELASTIC_ERROR_FILE"] = path
        env["TORCHELASTIC_ERROR_FILE"] = path
        env[subreaper.MARKER] = self._token
        return env

    # -- watching -------------------------------------------------------------------------------

    def _watch(self) -> None:
        while True:
            with self._cond:
                live = [w for w in self._workers.values() if w.exitcode is None]
            if not live:
                return
            ready = wait_handles([w.wait_handle() for w in live] + [self._wake_r], timeout=1.0)
            if self._wake_r in ready:
                with self._cond:
                    if self._closing:
                        return
                os.read(self._wake_r, 64)  # a worker was replaced: watch the new set
                continue
            for worker in live:
                if worker.wait_handle() in ready:
                    self._record_exit(worker, worker.reap(timeout=1.0))
                    if worker.exitcode is not None:
                        worker.release()  # only this thread blocks on the handle

    def _record_exit(self, worker: WorkerHandle, code: int | None) -> None:
        if code is None:
            return
        with self._cond:
            if worker.exitcode is None:
                worker.exitcode = code
                worker.ended_at = self._clock.wall()
                worker.stopped_by_us = self._closing
            self._cond.notify_all()

    # -- results --------------------------------------------------------------------------------

    def wait(self, timeout: float = -1, period: float = 1.0) -> RunProcsResult | None:
        """Wait for the group to finish or a worker to fail.

        Args:
            timeout: seconds to wait; 0 polls once, a negative value waits until done.
            period: the longest single sleep; exits wake the wait at once regardless.

        Returns:
            A ``RunProcsResult`` once every worker exited 0 or any worker failed (the others keep
            running: call ``close``), else None when ``timeout`` passed first or
            :meth:`interrupt` was called.
        """
        deadline = None if timeout < 0 else self._clock.deadline(timeout)
        with self._cond:
            while True:
                result = self._result_locked()
                left = None if deadline is None else deadline - self._clock.now()
                if result is not None or (left is not None and left <= 0):
                    return result
                if self._interrupted:
                    self._interrupted = False
                    return None
                self._cond.wait(period if left is None else min(period, left))

    def interrupt(self) -> None:
        """End the current (or the next) :meth:`wait` early, returning None unless the group is
        done: another thread has news for the waiter (the agent's round watcher saw the round
        change). Never blocks for long; safe from any thread."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def _result_locked(self) -> RunProcsResult | None:
        ended = [w for w in self._workers.values() if w.exitcode is not None]
        failed = [w for w in ended if w.exitcode != 0 and not w.stopped_by_us]
        if not failed and (len(ended) < self.nprocs or not self._workers):
            return None
        for worker in failed:
            if worker.local_rank not in self._failures:
                self._failures[worker.local_rank] = self._failure(worker)
        return RunProcsResult(
            return_values={
                w.local_rank: self._return_value(w.local_rank) for w in ended if w.exitcode == 0
            },
            failures=dict(self._failures),
            stdouts={r: f.stdout for r, f in self.files.items()},
            stderrs={r: f.stderr for r, f in self.files.items()},
        )

    def _failure(self, worker: WorkerHandle) -> ProcessFailure:
        path = self.files[worker.local_rank].error_file
        from tpelastic.adapters.workers.errorfile import read_error_file

        data = read_error_file(path)
        stamp = data.get("timestamp") if data else None
        rank = self.envs[worker.local_rank].get("RANK", "")
        return ProcessFailure(
            local_rank=worker.local_rank,
            pid=worker.pid,
            exitcode=int(worker.exitcode if worker.exitcode is not None else -1),
            timestamp=float(stamp) if isinstance(stamp, (int, float)) else worker.ended_at or 0.0,
            error_file=path,
            error_file_data=data,
            rank=int(rank) if rank.isdigit() else None,
            role=self.name,
        )

    def _return_value(self, local_rank: int) -> Any:
        """The worker's return value (callables only); subprocesses return None."""
        return None

    def pids(self) -> dict[int, int]:
        """Per local rank, the worker's pid (also after it exited)."""
        return {rank: w.pid for rank, w in self._workers.items()}

    # -- one worker at a time (in-process restart) ---------------------------------------------

    def stop_one(self, local_rank: int, timeout: float = 5.0) -> None:
        """Stop the worker of ``local_rank`` (its tree and process group), if it still runs;
        the others run on. Its exit is ours: not a failure."""
        with self._cond:
            worker = self._workers.get(local_rank)
            if worker is None or worker.exitcode is not None:
                return
            pid = worker.pid
        kill_trees([pid], [pid], signal.SIGTERM, timeout, clock=self._clock)
        code = worker.reap(timeout=5.0)
        with self._cond:
            if worker.exitcode is None and code is not None:
                worker.exitcode, worker.ended_at = code, self._clock.wall()
            worker.stopped_by_us = True
            self._cond.notify_all()

    def replace(self, local_rank: int, env: dict[str, str]) -> int:
        """Start a new worker for ``local_rank``, whose process ended, with ``env`` as its
        extra environment; the others run on. Returns its pid."""
        with self._cond:
            old = self._workers.get(local_rank)
            if old is not None and old.exitcode is None:
                raise RuntimeError(f"local rank {local_rank} still runs (pid {old.pid})")
            self.envs[local_rank] = dict(env)
            self._failures.pop(local_rank, None)
        worker = _LAUNCHER.run(lambda: self._start_one(local_rank))
        with self._cond:
            self._workers[local_rank] = worker
            self._cond.notify_all()
        if old is not None:
            old.release()
        self._tell_watchdog(f"{worker.pid}\n")
        if self._watcher.is_alive():
            os.write(self._wake_w, b"x")
        else:
            name = self._watcher.name
            self._watcher = threading.Thread(target=self._watch, name=name, daemon=True)
            self._watcher.start()
        return int(worker.pid)

    def set_env(self, local_rank: int, env: dict[str, str]) -> None:
        """The extra environment ``local_rank``'s worker now runs with (told in process)."""
        with self._cond:
            self.envs[local_rank] = dict(env)

    # -- stopping -------------------------------------------------------------------------------

    def send_signal(self, sig: int, to_group: bool = False) -> None:
        """Send ``sig`` to every worker still running.

        Args:
            sig: the signal.
            to_group: False sends to each worker process only (its children are left to it);
                True sends to each worker's whole process group, which reaches the real program
                behind a wrapper script (and also helpers such as data loader processes).
        """
        with self._cond:
            live = [w.pid for w in self._workers.values() if w.exitcode is None]
        for pid in live:
            try:
                if to_group:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                continue

    def close(self, death_sig: int | None = None, timeout: float = 30.0) -> None:
        """Stop every worker and everything it started; safe to call more than once.

        Sends ``death_sig`` (default SIGTERM) to each worker's whole tree and process group,
        waits up to ``timeout`` seconds, then SIGKILLs what is left. Afterwards no process of
        this group remains, the output pumps have drained, and the watchdog has exited.
        """
        with self._cond:
            if self._closed:
                return
            self._closing = True
            live = [w.pid for w in self._workers.values() if w.exitcode is None]
            groups = [w.pid for w in self._workers.values()]
        # With the agent a child subreaper, a worker's daemonized descendants are the agent's
        # children now (see subreaper): stopped with the workers, looked for again after.
        adopted = self.adopted()
        held = self._cgroup.pids() if self._cgroup is not None else []
        roots = sorted({*live, *adopted, *held})
        kill_trees(roots, groups, death_sig or signal.SIGTERM, timeout, clock=self._clock)
        for _ in range(3):
            late = self.adopted()
            if not late:
                break
            adopted += late
            kill_trees(late, (), signal.SIGKILL, 0, clock=self._clock)
        if self._cgroup is not None:
            # What the trees and the marks missed (a cleared environment, a fork during the
            # grace) is still in the cgroup: killed in one write.
            held += self._cgroup.pids()
            self._cgroup.kill_all(timeout=5.0)
            self._cgroup.remove()
        workers = {w.pid for w in self._workers.values()}  # reaped below, by their handles
        subreaper.reap(sorted({*adopted, *held} - workers))
        for worker in list(self._workers.values()):
            self._record_exit(worker, worker.reap(timeout=5.0))
        os.write(self._wake_w, b"x")
        if self._watcher.is_alive():
            self._watcher.join(timeout=5.0)
        for worker in self._workers.values():
            worker.release()
        for pump in self._pumps:
            pump.join(timeout=2.0)
        for copy in self._copies.values():
            if copy is not None:
                copy.close()
        self._stop_watchdog()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._closed = True

    def adopted(self) -> list[int]:
        """The agent's children that are descendants of this group's workers re-parented to
        it (see :mod:`subreaper`), alive or not yet reaped."""
        return subreaper.adopted(self._token)

    def _stop_watchdog(self) -> None:
        if self._watchdog is None:
            return
        self._tell_watchdog("done\n")
        if self._watchdog.stdin is not None:
            self._watchdog.stdin.close()
        try:
            wait_exit(self._watchdog, timeout=5.0)
        except subprocess.TimeoutExpired:
            self._watchdog.kill()
            self._watchdog.wait(timeout=5.0)


__all__ = ["PContext", "WorkerHandle", "on_launcher_thread"]
