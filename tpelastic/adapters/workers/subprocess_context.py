"""SubprocessContext: workers that run a command (``python -u train.py ...`` or any binary).

Each worker is started through a short prefix that arms the parent-death signal (see
``deathsig.py``) in a new session, so it leads its own process group and dies with its agent. A
redirected stream goes straight to its file; a teed stream goes through a pipe that a pump copies
to the file and, prefixed, to the console.
"""

from __future__ import annotations

import os
import subprocess
import threading
from typing import IO, TYPE_CHECKING, Any

from tpelastic.adapters.workers import deathsig
from tpelastic.adapters.workers.context import PContext, WorkerHandle

if TYPE_CHECKING:
    from tpelastic.adapters.workers.warm import WarmPlan, WarmPool


class _PopenWorker(WorkerHandle):
    def __init__(self, local_rank: int, popen: subprocess.Popen[bytes]) -> None:
        super().__init__(local_rank, popen.pid)
        self.popen = popen
        self._fd: int | None = _exit_fd(popen)

    def wait_handle(self) -> Any:
        return self._fd

    def reap(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _exit_fd(popen: subprocess.Popen[bytes]) -> int:
    """An fd that becomes readable when ``popen`` exits.

    A pidfd (Linux 5.3+) costs nothing. Elsewhere a small thread waits for the process and then
    writes to a pipe, so the watcher can still block on one set of fds.
    """
    try:
        return os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        read_fd, write_fd = os.pipe()

        def wait_then_signal() -> None:
            popen.wait()
            os.write(write_fd, b"x")
            os.close(write_fd)

        threading.Thread(target=wait_then_signal, name=f"exit-{popen.pid}", daemon=True).start()
        return read_fd


def numa_cpus(numa_options: Any, local_world_size: int) -> dict[int, frozenset[int]]:
    """Each rank's CPUs for ``numa_options`` (None: no binding).

    Raises:
        WorkerStartError: the binding cannot be computed on this machine.
    """
    if numa_options is None:
        return {}
    from tpelastic.adapters.workers.api import WorkerStartError
    from tpelastic.adapters.workers.numa import NumaError, binding

    try:
        return binding(numa_options, local_world_size)
    except NumaError as err:
        raise WorkerStartError(str(err)) from None


class SubprocessContext(PContext):
    """Workers started as commands, each with its own argument tuple (torch's constructor).

    Args:
        name: the role name used in console prefixes.
        entrypoint: the command (a name on PATH or a path).
        args: per local rank, the command's arguments.
        envs: per local rank, the extra environment.
        logs_specs: where output goes (see :class:`PContext`).
        log_line_prefixes: per local rank, the prefix of its teed lines.
        numa_options: bind each worker to its NUMA node's CPUs (see ``numa.py``); None is off.
        duplicate_stdout_filters, duplicate_stderr_filters: see :class:`PContext`.
        warm: the agent's warm interpreters (see ``warm.py``): a worker whose command can run
            in one starts from a ready spare, and new spares are made after the start; None
            starts every worker plainly.
    """

    def __init__(
        self,
        name: str,
        entrypoint: str,
        args: dict[int, tuple[Any, ...]],
        envs: dict[int, dict[str, str]],
        logs_specs: Any,
        log_line_prefixes: dict[int, str] | None = None,
        numa_options: Any = None,
        duplicate_stdout_filters: list[str] | None = None,
        duplicate_stderr_filters: list[str] | None = None,
        *,
        warm: WarmPool | None = None,
    ) -> None:
        cpus = numa_cpus(numa_options, len(envs))
        super().__init__(
            name,
            entrypoint,
            {rank: tuple(str(a) for a in value) for rank, value in args.items()},
            envs,
            logs_specs,
            log_line_prefixes,
            duplicate_stdout_filters,
            duplicate_stderr_filters,
        )
        self.numa_cpus = cpus
        self._warm = warm
        self.warm_ranks: set[int] = set()  # the local ranks started from a warm interpreter

    def _plan(self, local_rank: int) -> WarmPlan | None:
        if self._warm is None:
            return None
        from tpelastic.adapters.workers.warm import WarmPlan, plan_for

        plan = plan_for(self.entrypoint, self.args[local_rank], numa=bool(self.numa_cpus))
        return plan if isinstance(plan, WarmPlan) else None

    def _start_all(self) -> None:
        super()._start_all()
        if self._warm is None:
            return
        cwd = os.getcwd()
        for rank in range(self.nprocs):
            plan = self._plan(rank)
            if plan is not None:
                self._warm.refill(rank, plan, self.worker_env(rank), cwd)

    def _start_one(self, local_rank: int) -> WorkerHandle:
        plan = self._plan(local_rank)
        if plan is not None:
            worker = self._start_warm(local_rank, plan)
            if worker is not None:
                return worker
        return self._start_plain(local_rank)

    def _start_warm(self, local_rank: int, plan: WarmPlan) -> WorkerHandle | None:
        """Hand this rank's ready spare its environment and output; None when there is none."""
        assert self._warm is not None
        env = self.worker_env(local_rank)
        cwd = os.getcwd()
        spare = self._warm.take(local_rank, plan, env, cwd)
        if spare is None:
            return None
        files = self.files[local_rank]
        out, out_pipe = self._stream(files.stdout, files.tee_stdout)
        err, err_pipe = self._stream(files.stderr, files.tee_stderr)
        procs = self.cgroup_procs()
        if procs is not None:
            _enter_cgroup(procs, spare.pid)  # before any of the job's code runs in it
        try:
            given = spare.hand_over(env, cwd, _fd(out, 1), _fd(err, 2))
        finally:
            _close_given(out, err)
        if not given:
            for pipe in (out_pipe, err_pipe):
                if pipe is not None:
                    os.close(pipe)
            spare.discard()
            return None
        self.warm_ranks.add(local_rank)
        self._pump(local_rank, out_pipe, files.stdout, "stdout")
        self._pump(local_rank, err_pipe, files.stderr, "stderr")
        return _PopenWorker(local_rank, spare.popen)

    def _start_plain(self, local_rank: int) -> WorkerHandle:
        files = self.files[local_rank]
        argv = [*deathsig.prefix(os.getpid(), self.cgroup_procs()), self.entrypoint]
        out, out_pipe = self._stream(files.stdout, files.tee_stdout)
        err, err_pipe = self._stream(files.stderr, files.tee_stderr)
        cpus = self.numa_cpus.get(local_rank)
        # This (the launcher) thread's affinity is what the forked worker inherits, so the
        # binding holds from the worker's first instruction; restored for the next worker.
        saved = os.sched_getaffinity(0) if cpus else None
        try:
            if cpus:
                os.sched_setaffinity(0, cpus)
            popen = subprocess.Popen(
                [*argv, *self.args[local_rank]],
                env=self.worker_env(local_rank),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        finally:
            if saved is not None:
                os.sched_setaffinity(0, saved)
            _close_given(out, err)
        self._pump(local_rank, out_pipe, files.stdout, "stdout")
        self._pump(local_rank, err_pipe, files.stderr, "stderr")
        return _PopenWorker(local_rank, popen)

    @staticmethod
    def _stream(path: str, tee: bool) -> tuple[IO[bytes] | int | None, int | None]:
        """What to give Popen for one stream, and the read end of its pipe when teed."""
        if not path:
            return None, None
        if tee:
            read_fd, write_fd = os.pipe()
            return write_fd, read_fd
        return open(path, "ab"), None  # handed to the child, closed right after


def _fd(stream: IO[bytes] | int | None, inherited: int) -> int:
    """The descriptor a worker gets for one stream: the file's, the pipe's, or ours."""
    if stream is None:
        return inherited
    return stream if isinstance(stream, int) else stream.fileno()


def _enter_cgroup(procs: str, pid: int) -> None:
    """Move ``pid`` into the group's cgroup; a refusal leaves it covered by the subreaper, as
    the command prefix does for a plain start."""
    try:
        with open(procs, "w", encoding="ascii") as dst:
            dst.write(str(pid))
    except OSError:
        pass


def _close_given(*streams: IO[bytes] | int | None) -> None:
    """Close our copies of what was handed to a worker (its own copies stay open)."""
    for stream in streams:
        if isinstance(stream, int) and stream > 2:
            os.close(stream)
        elif stream is not None and not isinstance(stream, int):
            stream.close()


__all__ = ["SubprocessContext", "numa_cpus"]
