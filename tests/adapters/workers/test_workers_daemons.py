"""No escaped process: a worker's daemon (double fork, setsid) is stopped with its group, under
every start method. The agent is a child subreaper, so the daemon is re-parented to it; where a
cgroup v2 is writable, a daemon that leaves no mark (a cleared environment) is killed with the
group's cgroup."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from tpelastic.adapters.workers import subreaper
from tpelastic.adapters.workers.cgroup import WorkerCgroup
from tpelastic.multiprocessing import start_processes

# Helpers of our own, not conftest's: a spawned worker may import this module, and the name
# ``conftest`` is another folder's there.
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def script(name: str) -> str:
    return os.path.join(SCRIPTS, name)


def read_pids(folder: str, name: str, timeout: float = 10.0) -> list[int]:
    path = os.path.join(folder, name)
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)
    with open(path) as src:
        return [int(p) for p in src.read().split()]


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


@pytest.fixture
def pid_dir(tmp_path):
    folder = tmp_path / "pids"
    folder.mkdir()
    return str(folder)


sys.path.insert(0, SCRIPTS)
from daemonize import leave_a_daemon  # noqa: E402


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


def _cgroup_or_skip() -> None:
    probe = WorkerCgroup.create(f"probe-{os.getpid()}")
    if probe is None:
        pytest.skip("no writable cgroup v2 here: the subreaper alone covers daemons")
    probe.remove()


@pytest.mark.parametrize("method", ["command", "forkserver"])
def test_a_daemon_that_clears_its_environment_is_killed_with_the_cgroup(pid_dir, tmp_path, method):
    _cgroup_or_skip()
    if method == "command":
        args: object = (script("daemonize.py"), "clean-env")
        entry: object = sys.executable
    else:
        args, entry = {0: (pid_dir, True, True), 1: (pid_dir, True, True)}, leave_a_daemon
    ctx = start_processes(
        "c", entry, args, _envs(pid_dir), log_dir=str(tmp_path), start_method="forkserver"
    )
    result = ctx.wait(timeout=60, period=0.05)
    assert result is not None and not result.is_failed(), result
    daemons = [p for r in range(2) for p in read_pids(pid_dir, f"daemon{r}")]
    assert len(alive(daemons)) == 2
    if method == "command":  # no mark in its environment: the subreaper alone would miss it
        assert not set(daemons) & set(ctx.adopted())
    cgroup = os.path.dirname(ctx.cgroup_procs() or "")
    assert set(daemons) <= set(WorkerCgroup(cgroup).pids())
    ctx.close(timeout=5)
    assert alive(daemons) == []
    assert not os.path.exists(cgroup)  # removed with the group


def test_a_gone_agent_s_empty_cgroup_is_removed_by_the_next_one():
    _cgroup_or_skip()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = WorkerCgroup.create(f"{gone.pid}-0-stale")
    assert stale is not None and os.path.isdir(stale.path)
    fresh = WorkerCgroup.create(f"{os.getpid()}-0-fresh")
    assert fresh is not None
    try:
        assert not os.path.exists(stale.path)
    finally:
        fresh.remove()
