"""The child side of a multiprocessing worker: set up, run the callable, report.

``run_worker`` is the target of every multiprocessing worker. Before calling the user's function
it leaves the agent's process group (so the agent can stop the worker's whole group), arms the
parent-death signal, sets the environment and points fd 1 and 2 at their files or pipes. An
exception is written to the error file and ends the worker with exit code 1; a return value is
pickled to the rank's return file, which the agent reads once the worker exited 0.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Callable
from typing import Any

from tpelastic.adapters.workers.errorfile import write_error_file
from tpelastic.adapters.workers.shim import enter_cgroup, set_parent_death_signal

StreamSpec = tuple[str, Any] | None  # None: inherit; ("file", path); ("pipe", Connection)


def _point(fd: int, spec: StreamSpec) -> None:
    if spec is None:
        return
    kind, target = spec
    if kind == "file":
        new = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(new, fd)
        os.close(new)
    else:
        os.dup2(target.fileno(), fd)
        target.close()


def _arm_death_signal(agent_pid: int, parent_is_agent: bool) -> None:
    set_parent_death_signal()
    # The agent may already be gone, in which case no death signal will ever come.
    if parent_is_agent and os.getppid() != agent_pid:
        os._exit(1)
    try:
        os.kill(agent_pid, 0)
    except ProcessLookupError:
        os._exit(1)


def run_worker(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    env: dict[str, str],
    stdout: StreamSpec,
    stderr: StreamSpec,
    return_file: str,
    agent_pid: int,
    parent_is_agent: bool,
    cpus: list[int] | None = None,
    cgroup_procs: str | None = None,
) -> None:
    """Run ``fn(*args)`` as a worker; exits 1 (after writing the error file) if it raises.

    ``cpus`` is the worker's NUMA binding (None: none), applied before any of the user's code
    runs; a forkserver child does not inherit the agent's choice, so the child sets it.
    ``cgroup_procs`` is the group's cgroup (None: none), entered before anything else."""
    enter_cgroup(cgroup_procs)
    try:
        os.setsid()
    except OSError:
        pass  # already a group leader: nothing to leave
    if cpus:
        os.sched_setaffinity(0, cpus)
    _arm_death_signal(agent_pid, parent_is_agent)
    os.environ.clear()
    os.environ.update(env)
    sys.stdout.flush()
    sys.stderr.flush()
    _point(1, stdout)
    _point(2, stderr)
    # Rebind the Python streams to fds 1 and 2: after fork they may be some other object (a
    # test runner's capture), and line buffering keeps teed output timely.
    if stdout is not None:
        sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")
    if stderr is not None:
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    try:
        value = fn(*args)
        _save_return_value(value, return_file)
    except Exception as exc:
        write_error_file(exc)
        traceback.print_exc()
        sys.stderr.flush()
        sys.exit(1)
    sys.stdout.flush()


def _save_return_value(value: Any, return_file: str) -> None:
    """Pickle ``value`` atomically; a value that cannot be pickled fails the worker."""
    tmp = f"{return_file}.tmp"
    with open(tmp, "wb") as out:
        pickle.dump(value, out)
    os.replace(tmp, return_file)


__all__ = ["run_worker"]
