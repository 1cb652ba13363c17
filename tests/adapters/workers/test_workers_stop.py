"""Stopping: whole trees, stubborn workers, dead agents, forwarded signals. Real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import alive, read_pids, script, wait_gone

from tpelastic.adapters.workers import shim, watchdog
from tpelastic.multiprocessing import start_processes


def _tree_envs(n: int, pid_dir: str) -> dict[int, dict[str, str]]:
    return {
        r: {"LOCAL_RANK": str(r), "PID_DIR": pid_dir, "PYTHON": sys.executable} for r in range(n)
    }


def test_close_kills_wrapper_scripts_and_grandchildren(pid_dir, tmp_path):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    ctx = start_processes(
        "t", script("wrapper.sh"), (), _tree_envs(2, pid_dir), log_dir=str(tmp_path)
    )
    pids = [p for r in range(2) for p in read_pids(pid_dir, str(r))] + list(ctx.pids().values())
    assert len(alive(pids)) == 6  # 2 x (wrapper, worker, grandchild)
    started = time.monotonic()
    ctx.close(timeout=5)
    assert time.monotonic() - started < 2  # they obey SIGTERM: no need to wait the grace out
    assert alive(pids) == []
    assert ctx.wait(timeout=0) is not None  # done; the stopped workers are not failures
    assert not ctx.wait(timeout=0).failures
    # Nothing of ours is left either: no shim, no watchdog.
    now = {p.pid for p in psutil.Process().children(recursive=True)}
    assert set(alive(list(now))) == set(alive(list(before)))


def test_close_sigkills_workers_that_ignore_sigterm_after_the_grace(pid_dir, tmp_path):
    ctx = start_processes(
        "s",
        sys.executable,
        (script("tree.py"), "ignore-term"),
        _tree_envs(1, pid_dir),
        log_dir=str(tmp_path),
    )
    pids = read_pids(pid_dir, "0")
    started = time.monotonic()
    ctx.close(death_sig=signal.SIGTERM, timeout=0.5)
    took = time.monotonic() - started
    assert alive(pids) == [] and 0.5 <= took < 3
    ctx.close()  # a second close is harmless


def test_close_with_a_custom_death_signal(tmp_path):
    # SIGINT's handler is set explicitly: a shell starts background jobs with SIGINT ignored,
    # and Python then keeps it ignored. The ready file says both handlers are in place.
    ready = tmp_path / "ready"
    code = (
        "import signal, sys, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); open(sys.argv[1], 'w').close(); "
        "time.sleep(60)"
    )
    args = ("-c", code, str(ready))
    ctx = start_processes("d", sys.executable, args, {0: {}}, log_dir=str(tmp_path))
    pid = ctx.pids()[0]
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    ctx.close(death_sig=signal.SIGINT, timeout=5)  # SIGINT is not ignored: quick exit
    assert time.monotonic() - started < 2 and alive([pid]) == []


def test_close_catches_children_in_new_sessions_and_children_born_during_the_grace(
    pid_dir, tmp_path
):
    env = {"LOCAL_RANK": "0", "PID_DIR": pid_dir}
    ctx = start_processes(
        "e", sys.executable, (script("escape.py"),), {0: env}, log_dir=str(tmp_path)
    )
    worker, escaped = read_pids(pid_dir, "0")
    ctx.close(timeout=1.0)  # SIGTERM makes the worker start a child, then SIGKILL after 1 s
    late = read_pids(pid_dir, "late", timeout=1)
    assert alive([worker, escaped, *late]) == []


def _kill_agent_and_check(kind: str, pid_dir: str) -> None:
    agent = subprocess.Popen([sys.executable, script("agent_parent.py"), pid_dir, kind])
    try:
        workers = read_pids(pid_dir, "agent", timeout=20)
        family = [p for r in range(2) for p in read_pids(pid_dir, str(r), timeout=20)]
        watchdogs = [
            c.pid
            for c in psutil.Process(agent.pid).children()
            if c.pid not in workers and "watchdog" in " ".join(c.cmdline())
        ]
        everyone = workers + family + watchdogs
        assert len(alive(everyone)) == len(everyone)
    finally:
        agent.kill()
        agent.wait(timeout=10)
    assert wait_gone(everyone, timeout=5) == []


def test_sigkill_of_the_agent_leaves_no_subprocess_worker_behind(pid_dir):
    _kill_agent_and_check("subprocess", pid_dir)


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_sigkill_of_the_agent_leaves_no_multiprocessing_worker_behind(method, pid_dir):
    _kill_agent_and_check(method, pid_dir)


def test_watchdog_alone_kills_the_groups_when_the_agent_dies(tmp_path):
    """The fallback on its own: no parent-death signal, only the watchdog's end-of-file."""
    helper = (
        "import subprocess, sys, time\n"
        f"w = subprocess.Popen([sys.executable, {watchdog.__file__!r},"
        " str(__import__('os').getpid())], stdin=subprocess.PIPE, start_new_session=True)\n"
        "v = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True)\n"
        "w.stdin.write(f'{v.pid}\\n'.encode()); w.stdin.flush()\n"
        "print(w.pid, v.pid, flush=True); time.sleep(60)\n"
    )
    agent = subprocess.Popen([sys.executable, "-c", helper], stdout=subprocess.PIPE, text=True)
    try:
        dog, victim = (int(p) for p in agent.stdout.readline().split())
        assert alive([dog, victim]) == [dog, victim]
    finally:
        agent.kill()
        agent.wait(timeout=10)
        agent.stdout.close()
    assert wait_gone([victim, dog], timeout=5) == []


def test_shim_alone_arms_the_parent_death_signal():
    """The first line of defence on its own: no watchdog, the child dies with its parent."""
    helper = (
        "import subprocess, sys, time\n"
        f"c = subprocess.Popen([sys.executable, '-I', '-S', {shim.__file__!r},"
        " str(__import__('os').getpid()), '--', sys.executable, '-c',"
        " 'import time; time.sleep(60)'], start_new_session=True)\n"
        "print(c.pid, flush=True); time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", helper], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        time.sleep(0.3)  # let the shim exec the real command
        assert alive([child]) == [child]
        assert "time.sleep(60)" in " ".join(psutil.Process(child).cmdline())  # exec kept the pid
    finally:
        parent.kill()
        parent.wait(timeout=10)
        parent.stdout.close()
    assert wait_gone([child], timeout=2) == []


def test_signal_policy_forwards_usr1_and_stops_on_term(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    agent = subprocess.Popen([sys.executable, script("signal_agent.py"), str(out)])
    try:
        for rank in ("0", "1"):
            deadline = time.monotonic() + 20
            while "ready" not in _read(out / rank) and time.monotonic() < deadline:
                time.sleep(0.02)
        agent.send_signal(signal.SIGUSR1)
        agent.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(
            "SIGUSR2" in _read(out / r) for r in ("0", "1")
        ):
            time.sleep(0.02)
        assert agent.poll() is None  # forwarding does not stop the agent
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=15) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    for rank in ("0", "1"):
        seen = _read(out / rank).split()
        # The two forwarded signals may arrive in either order; both come before the stop.
        assert seen[0] == "ready" and seen[-1] == "SIGTERM" and len(seen) == 4
        assert sorted(seen[1:3]) == ["SIGUSR1", "SIGUSR2"]
    assert _read(out / "agent_stopped") == "SIGTERM"


def _read(path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def test_no_process_is_left_after_close_even_if_a_worker_died_first(pid_dir, tmp_path):
    ctx = start_processes(
        "o", sys.executable, (script("tree.py"),), _tree_envs(1, pid_dir), log_dir=str(tmp_path)
    )
    worker, grandchild = read_pids(pid_dir, "0")
    os.kill(worker, signal.SIGKILL)  # the grandchild is orphaned but still in the group
    assert ctx.wait(timeout=10, period=0.05).failures[0].signal_name() == "SIGKILL"
    assert alive([grandchild]) == [grandchild]
    ctx.close(timeout=2)
    assert alive([grandchild]) == []


def test_send_signal_reaches_the_program_behind_a_wrapper_only_with_to_group(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    wrapper = f"trap '' USR1 USR2; {sys.executable} {script('signal_worker.py')}; true"
    env = {"LOCAL_RANK": "0", "OUT_DIR": str(out)}
    ctx = start_processes("g", "sh", ("-c", wrapper), {0: env}, log_dir=str(tmp_path))
    try:
        deadline = time.monotonic() + 10
        while "ready" not in _read(out / "0") and time.monotonic() < deadline:
            time.sleep(0.02)
        ctx.send_signal(signal.SIGUSR2)  # to the shell only: it ignores it
        ctx.send_signal(signal.SIGUSR1, to_group=True)
        deadline = time.monotonic() + 5
        while "SIGUSR1" not in _read(out / "0") and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        ctx.close(timeout=2)
    assert _read(out / "0").split()[:2] == ["ready", "SIGUSR1"]
    assert "SIGUSR2" not in _read(out / "0")


def test_workers_started_from_a_short_lived_thread_survive_it(tmp_path):
    """The parent-death signal follows the forking thread; that thread must not be the caller's."""
    import threading

    box = {}
    code = "import time; time.sleep(30)"

    def start() -> None:
        box["ctx"] = start_processes(
            "th", sys.executable, ("-c", code), {0: {}}, log_dir=str(tmp_path)
        )

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(timeout=20)
    ctx = box["ctx"]
    try:
        time.sleep(0.5)
        assert ctx.wait(timeout=0) is None  # still running after the starting thread ended
    finally:
        ctx.close(timeout=2)
