"""A worker process that overruns its deadline is killed: queue and named-pipe transports."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from tpelastic.timer import (
    TIMER_FILE_ENV,
    FileTimerClient,
    FileTimerServer,
    LocalTimerClient,
    LocalTimerServer,
    expires,
)


def _worker(queue, after, work):
    with expires(after=after, client=LocalTimerClient(queue)):
        time.sleep(work)


@pytest.fixture
def spawn():
    return multiprocessing.get_context("spawn")


def test_queue_timer_kills_the_late_worker_only(spawn):
    queue = spawn.Queue()
    reports = []
    server = LocalTimerServer(queue, max_interval=0.05, on_expired=reports.append)
    server.start()
    late = spawn.Process(target=_worker, args=(queue, 0.5, 60))
    punctual = spawn.Process(target=_worker, args=(queue, 30, 0.1))
    try:
        late.start()
        punctual.start()
        late.join(timeout=30)
        punctual.join(timeout=30)
        assert late.exitcode == -signal.SIGKILL
        assert punctual.exitcode == 0
        server.stop()  # the report is made just after the kill: let that round finish
        assert [r.worker_id for r in reports] == [late.pid]
    finally:
        server.stop()
        for p in (late, punctual):
            if p.is_alive():
                p.kill()
                p.join(timeout=10)


WORKER = """
import sys, time
from tpelastic.timer import expires
with expires(after=float(sys.argv[1]), scope="train-step"):
    time.sleep(float(sys.argv[2]))
"""


def _run(path, after, work):
    env = {**os.environ, TIMER_FILE_ENV: str(path)}
    return subprocess.Popen([sys.executable, "-c", WORKER, str(after), str(work)], env=env)


def test_named_pipe_timer_kills_a_late_subprocess_with_the_configured_signal(tmp_path):
    path = tmp_path / "timer.fifo"
    reports = []
    server = FileTimerServer(
        path, max_interval=0.05, kill_signal=signal.SIGTERM, on_expired=reports.append
    )
    server.start()
    late, punctual = _run(path, 0.5, 60), _run(path, 30, 0.1)
    try:
        assert late.wait(timeout=30) == -signal.SIGTERM
        assert punctual.wait(timeout=30) == 0
        server.stop()  # the report is made just after the kill: let that round finish
        assert [(r.worker_id, r.scopes) for r in reports] == [(late.pid, ("train-step",))]
    finally:
        server.stop()
        for p in (late, punctual):
            p.kill()
            p.wait(timeout=10)
    assert not path.exists()  # stop removes the pipe


def test_named_pipe_client_without_server_is_a_clear_error(tmp_path):
    path = tmp_path / "nobody.fifo"
    with pytest.raises(RuntimeError, match="no timer server is listening at"):
        FileTimerClient(path).acquire("s", 1.0)
    os.mkfifo(path)  # a pipe with no reader is the same situation, and must not hang
    with pytest.raises(RuntimeError, match="no timer server is listening at"):
        FileTimerClient(path).acquire("s", 1.0)


def test_named_pipe_server_refuses_to_replace_a_regular_file(tmp_path):
    path = tmp_path / "precious.txt"
    path.write_text("keep me")
    with pytest.raises(FileExistsError, match="is not a named pipe"):
        FileTimerServer(path)
    assert path.read_text() == "keep me"


def test_named_pipe_skips_malformed_lines_and_too_long_scopes(tmp_path):
    path = tmp_path / "t.fifo"
    server = FileTimerServer(path, max_interval=0.05)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"not json\n")
        os.close(fd)
        FileTimerClient(path).acquire("ok", 5.0)
        assert server._queue.get(10, timeout=1.0)[0].scope_id == "ok"
        with pytest.raises(ValueError, match="timer scope too long"):
            FileTimerClient(path).acquire("x" * 5000, 5.0)
    finally:
        server.stop()


def test_named_pipe_server_reports_its_last_pass_and_which_processes_run(tmp_path):
    server = FileTimerServer(tmp_path / "t.fifo", max_interval=0.05)
    try:
        before = int(time.time())
        assert before <= server.get_last_progress_time() <= int(time.time())  # no pass yet
        time.sleep(1.1)
        server.run_once()
        passed = server.get_last_progress_time()
        time.sleep(1.1)
        assert passed == server.get_last_progress_time() > before  # the pass, not the clock
    finally:
        server.stop()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert FileTimerServer.is_process_running(os.getpid())
    assert not FileTimerServer.is_process_running(gone.pid)
