"""Progress heartbeat: real workers write, the watch (fed chosen times) names the stuck rank."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tpelastic.adapters import progress
from tpelastic.adapters.progress import (
    PROGRESS_FILE_ENV,
    ProgressReporter,
    ProgressSample,
    ProgressWatch,
    read_progress,
)
from tpelastic.data import get_socket_with_port


def sample(counter, waiting=False):
    return ProgressSample(counter=counter, waiting=waiting)


def cw(found):
    """Counter and waiting flag of a sample (the step time varies from run to run)."""
    return None if found is None else (found.counter, found.waiting)


def test_watch_names_the_rank_that_stopped_after_the_idle_timeout():
    watch = ProgressWatch([0, 1, 2], now=0.0, idle_timeout=10.0)
    for t in range(1, 10):
        watch.observe_all({0: sample(t), 1: sample(min(t, 3)), 2: sample(t)}, now=float(t))
    # rank 1's last step was seen at t=3
    assert watch.stalled(now=12.9) == []
    [stall] = watch.stalled(now=13.0)
    assert (stall.rank, stall.idle_for, stall.counter, stall.waiting) == (1, 10.0, 3, False)
    assert stall.describe() == "rank 1 made no progress for 10.0 s (last step 3)"
    assert watch.last_progress_age(now=13.0) == {0: 4.0, 1: 10.0, 2: 4.0}


def test_first_step_gets_its_own_timeout_and_an_empty_file_is_not_progress():
    watch = ProgressWatch([0, 1], now=100.0, idle_timeout=5.0, first_step_timeout=60.0)
    watch.observe(0, sample(0), now=150.0)  # file created: worker alive but no step yet
    watch.observe(1, None, now=150.0)  # nothing readable yet
    assert watch.stalled(now=159.9) == []
    assert [(s.rank, s.counter) for s in watch.stalled(now=160.0)] == [(0, 0), (1, None)]
    assert "no step yet" in watch.stalled(now=160.0)[1].describe()


def test_ranks_blocked_in_a_collective_are_listed_after_the_suspect():
    watch = ProgressWatch([0, 1, 2], now=0.0, idle_timeout=1.0)
    watch.observe_all({0: sample(5, True), 1: sample(5), 2: sample(5, True)}, now=0.5)
    assert [(s.rank, s.waiting) for s in watch.stalled(now=2.0)] == [
        (1, False),
        (0, True),
        (2, True),
    ]


def test_watch_refuses_bad_input():
    with pytest.raises(ValueError, match="timeouts must be > 0"):
        ProgressWatch([0], now=0.0, idle_timeout=0.0)
    with pytest.raises(KeyError, match="rank 7 is not watched"):
        ProgressWatch([0], now=0.0, idle_timeout=1.0).observe(7, sample(1), now=1.0)


def test_reporter_file_round_trip_and_unreadable_files(tmp_path):
    path = tmp_path / "p"
    reporter = ProgressReporter(path)
    assert cw(read_progress(path)) == cw(sample(0))
    reporter.step()
    reporter.step(4)
    reporter.set_waiting(True)
    assert cw(read_progress(path)) == cw(sample(5, True))
    reporter.close()
    assert read_progress(tmp_path / "missing") is None
    (tmp_path / "junk").write_bytes(b"hello")
    assert read_progress(tmp_path / "junk") is None


def test_record_carries_step_time_and_the_last_collective(tmp_path):
    path = tmp_path / "p"
    reporter = ProgressReporter(path)
    reporter.step()
    assert read_progress(path).step_seconds is None  # one step: no duration yet
    time.sleep(0.05)
    reporter.step()
    reporter.entered("all_reduce")
    found = read_progress(path)
    assert 0.04 <= found.step_seconds < 30.0
    assert (found.counter, found.waiting, found.collectives, found.collective) == (
        2,
        True,
        1,
        "all_reduce",
    )
    reporter.left()
    reporter.entered("all gather/x" * 5)  # not a plain name: made one, cut to fit
    found = read_progress(path)
    assert (found.collectives, found.collective) == (2, "all_gather_xall_gather_x")
    reporter.left()
    assert read_progress(path).waiting is False
    reporter.close()


def test_step_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(PROGRESS_FILE_ENV, raising=False)
    assert progress.step() is None  # not under an agent: a no-op
    monkeypatch.setenv(PROGRESS_FILE_ENV, str(tmp_path / "a"))
    assert progress.step() == 1
    with progress.waiting():
        assert cw(read_progress(tmp_path / "a")) == cw(sample(1, True))
    assert cw(read_progress(tmp_path / "a")) == cw(sample(1, False))
    monkeypatch.delenv(PROGRESS_FILE_ENV)
    assert progress.step() is None


STEPPER = """
import sys, time
from tpelastic.adapters import progress
for i in range(int(sys.argv[1])):
    progress.step()
    time.sleep(0.005)
time.sleep(60)  # then hang
"""


def start_worker(path, steps):
    env = {**os.environ, PROGRESS_FILE_ENV: str(path)}
    return subprocess.Popen([sys.executable, "-c", STEPPER, str(steps)], env=env)


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_real_workers_the_one_that_stops_is_named(tmp_path):
    paths = {0: tmp_path / "0", 1: tmp_path / "1"}
    procs = [start_worker(paths[0], 10**6), start_worker(paths[1], 5)]
    try:
        wait_for(lambda: (read_progress(paths[1]) or sample(0)).counter == 5)
        wait_for(lambda: (read_progress(paths[0]) or sample(0)).counter > 5)
        watch = ProgressWatch([0, 1], now=0.0, idle_timeout=30.0)
        # Real reads, chosen times: each read is 10 "seconds" after the last.
        for tick in range(1, 5):
            before = read_progress(paths[0])
            wait_for(lambda before=before: read_progress(paths[0]) != before)
            watch.observe_all({r: read_progress(p) for r, p in paths.items()}, now=10.0 * tick)
        assert [(s.rank, s.counter) for s in watch.stalled(now=40.0)] == [(1, 5)]
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)


BARRIER_WORKER = """
import sys, time
import tensorplay.distributed as dist
from tpelastic.adapters import progress
rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank)
for _ in range(3):
    progress.step()
if rank == 0:
    progress.barrier()  # waits for rank 1, which never comes
else:
    time.sleep(60)  # the hung rank
"""


def test_barrier_marks_the_waiting_rank_so_the_hung_one_is_named_first(tmp_path):
    sock = get_socket_with_port("127.0.0.1")
    port = sock.getsockname()[1]
    sock.close()  # the rank-0 store binds it next; a clash would only fail this test loudly
    paths = {r: tmp_path / str(r) for r in (0, 1)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BARRIER_WORKER, str(r), str(port)],
            env={**os.environ, PROGRESS_FILE_ENV: str(paths[r])},
        )
        for r in (0, 1)
    ]
    try:
        wait_for(lambda: cw(read_progress(paths[0])) == cw(sample(3, True)))
        wait_for(lambda: cw(read_progress(paths[1])) == cw(sample(3, False)))
        watch = ProgressWatch([0, 1], now=0.0, idle_timeout=5.0)
        watch.observe_all({r: read_progress(p) for r, p in paths.items()}, now=1.0)
        stalls = watch.stalled(now=6.0)
        assert [(s.rank, s.waiting) for s in stalls] == [(1, False), (0, True)]
        assert "waiting in a collective" in stalls[1].describe()
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
