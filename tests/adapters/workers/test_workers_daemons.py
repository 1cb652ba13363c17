"""No escaped process: a worker's daemon (double fork, setsid) is stopped with its group, under
every start method. The agent is a child subreaper, so the daemon is re-parented to it."""

from __future__ import annotations

import os
import sys
import time

import pytest
from conftest import alive, read_pids, script

from tpelastic.adapters.workers import subreaper
from tpelastic.multiprocessing import start_processes

sys.path.insert(0, os.path.dirname(script("daemonize.py")))
from daemonize import daemonize


def leave_a_daemon(pid_dir: str, new_session: bool) -> int:
    daemonize(pid_dir, f"daemon{os.environ['LOCAL_RANK']}", new_session)
    return os.getpid()


def _envs(pid_dir: str) -> dict[int, dict[str, str]]:
    return {r: {"LOCAL_RANK": str(r), "PID_DIR": pid_dir} for r in range(2)}


def _check_gone(ctx, pid_dir: str) -> None:
    result = ctx.wait(timeout=60, period=0.05)
    assert result is not None and not result.is_failed(), result
    daemons = [p for r in range(2) for p in read_pids(pid_dir, f"daemon{r}")]
    assert len(alive(daemons)) == 2  # the workers ended; their daemons live on
    if subreaper.become_subreaper():
        assert set(daemons) <= set(ctx.adopted())  # re-parented here
    started = time.monotonic()
    ctx.close(timeout=5)
    assert alive(daemons) == []
    assert time.monotonic() - started < 3  # they obey SIGTERM
    assert ctx.adopted() == []


@pytest.mark.parametrize("new_session", [True, False], ids=["setsid", "same-session"])
def test_a_command_worker_s_daemon_is_stopped_at_close(pid_dir, tmp_path, new_session):
    args = (script("daemonize.py"),) if new_session else (script("daemonize.py"), "keep-session")
    ctx = start_processes("d", sys.executable, args, _envs(pid_dir), log_dir=str(tmp_path))
    _check_gone(ctx, pid_dir)


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_a_callable_worker_s_daemon_is_stopped_at_close(pid_dir, tmp_path, method):
    ctx = start_processes(
        "d",
        leave_a_daemon,
        {0: (pid_dir, True), 1: (pid_dir, True)},
        _envs(pid_dir),
        log_dir=str(tmp_path),
        start_method=method,
    )
    _check_gone(ctx, pid_dir)


def test_a_daemon_of_a_running_worker_is_stopped_with_it(pid_dir, tmp_path):
    ctx = start_processes(
        "d", sys.executable, (script("daemonize.py"), "stay"), _envs(pid_dir), log_dir=str(tmp_path)
    )
    daemons = [p for r in range(2) for p in read_pids(pid_dir, f"daemon{r}")]
    workers = list(ctx.pids().values())
    ctx.close(timeout=5)
    assert alive([*daemons, *workers]) == []
