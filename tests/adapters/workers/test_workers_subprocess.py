"""Subprocess workers, with real processes: results, failures, root cause, logs and tee."""

from __future__ import annotations

import os
import signal
import sys
import time

from conftest import read_pids, script

from tpelastic.adapters.workers.api import ChildFailedError, Std
from tpelastic.multiprocessing import start_processes


def _envs(n: int, **extra: str) -> dict[int, dict[str, str]]:
    return {r: {"LOCAL_RANK": str(r), **extra} for r in range(n)}


def _wait(ctx, timeout: float = 15.0):
    result = ctx.wait(timeout=timeout, period=0.05)
    assert result is not None, "workers did not finish in time"
    return result


def _wait_for_failures(ctx, ranks: set[int], timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = ctx.wait(timeout=0.5, period=0.05)
        if result is not None and set(result.failures) >= ranks:
            return result
    raise AssertionError(f"ranks {ranks} did not all fail in time")


def test_all_succeed_and_pids_are_reported(tmp_path):
    ctx = start_processes(
        "ok", sys.executable, (script("exit_with.py"), "0"), _envs(2), log_dir=str(tmp_path)
    )
    try:
        result = _wait(ctx)
        assert not result.is_failed() and set(result.return_values) == {0, 1}
        assert set(ctx.pids()) == {0, 1} and all(p > 0 for p in ctx.pids().values())
    finally:
        ctx.close()


def test_wait_returns_none_while_running_and_reacts_fast_to_an_exit(tmp_path):
    stamp = tmp_path / "stamp"
    code = (
        "import sys, time; time.sleep(0.5); "
        f"open({str(stamp)!r}, 'w').write(repr(time.time())); sys.exit(4)"
    )
    ctx = start_processes("w", sys.executable, ("-c", code), _envs(1), log_dir=str(tmp_path))
    try:
        assert ctx.wait(timeout=0) is None
        result = _wait(ctx)
        noticed = time.time()
        assert result.failures[0].exitcode == 4
        # From the worker's last act to wait() returning: the agent's restart latency budget.
        assert noticed - float(stamp.read_text()) < 0.1
    finally:
        ctx.close()


def test_each_failure_kind_is_reported_with_rank_code_and_root_cause(tmp_path, pid_dir):
    # Rank 2 raises first, rank 1 exits 3 after that, then we SIGKILL rank 3; rank 0 succeeds.
    behaviour = "0=ok,1=exit3@after2,2=raise@0.1,3=sleep"
    envs = _envs(4, BEHAVIOUR=behaviour, PID_DIR=pid_dir)
    for rank in range(4):
        envs[rank]["RANK"] = str(10 + rank)
    ctx = start_processes(
        "trainer",
        sys.executable,
        ("-u", script("per_rank.py")),
        envs,
        log_dir=str(tmp_path),
        redirects=Std.ALL,
    )
    try:
        victim = read_pids(pid_dir, "3")[0]
        _wait_for_failures(ctx, {1, 2})
        os.kill(victim, signal.SIGKILL)
        result = _wait_for_failures(ctx, {1, 2, 3})
    finally:
        ctx.close()
    failures = result.failures
    assert set(failures) == {1, 2, 3} and result.return_values == {0: None}
    assert failures[1].exitcode == 3 and failures[1].error_file_data is None
    assert failures[3].exitcode == -signal.SIGKILL and failures[3].signal_name() == "SIGKILL"
    assert failures[3].pid == victim
    data = failures[2].error_file_data
    assert data and data["schema_version"] == 1 and data["exception_type"] == "ValueError"
    assert data["message"] == "rank 2 broke" and data["rank"] == 12
    assert failures[2].rank == 12 and failures[2].exitcode == 1
    err = ChildFailedError("per_rank.py", failures)
    assert err.get_first_failure()[0] == 2  # the earliest, although rank 3 failed last
    assert "rank 2 broke" in str(err).split("Other failures:")[0]


def test_redirect_writes_files_per_rank_and_nothing_to_console(tmp_path, capfd):
    ctx = start_processes(
        "r",
        sys.executable,
        (script("exit_with.py"), "0"),
        _envs(2),
        log_dir=str(tmp_path),
        redirects="0:1,1:3",
    )
    try:
        result = _wait(ctx)
    finally:
        ctx.close()
    assert open(result.stdouts[0]).read() == "out of 0\n"
    assert result.stderrs[0] == ""  # rank 0 redirects stdout only
    assert open(result.stdouts[1]).read() == "out of 1\n"
    assert open(result.stderrs[1]).read() == "err of 1\n"
    out, err = capfd.readouterr()
    assert "out of" not in out and "err of 1" not in err and "err of 0" in err


def test_tee_prefixes_every_line_in_order_and_keeps_the_file_exact(tmp_path, capfd):
    count = 3000
    envs = _envs(2)
    envs[1]["RANK"] = "7"
    ctx = start_processes(
        "trainer",
        sys.executable,
        (script("lines.py"), str(count)),
        envs,
        log_dir=str(tmp_path),
        tee=Std.OUT,
    )
    try:
        result = _wait(ctx)
    finally:
        ctx.close()
    out, _ = capfd.readouterr()
    expected = [f"line {i}" for i in range(count)]
    rank0 = [
        ln.removeprefix("[trainer0]:") for ln in out.splitlines() if ln.startswith("[trainer0]:")
    ]
    rank1 = [
        ln.removeprefix("[trainer1|rank7]:")
        for ln in out.splitlines()
        if ln.startswith("[trainer1|rank7]:")
    ]
    assert rank0 == expected and rank1 == expected
    assert len(out.splitlines()) == 2 * count  # no line lost, none cut by another
    assert open(result.stdouts[0]).read().splitlines() == expected


def test_tee_flushes_a_last_line_without_newline(tmp_path, capfd):
    code = "import sys; sys.stdout.write('a\\nb')"
    ctx = start_processes(
        "t", sys.executable, ("-c", code), _envs(1), log_dir=str(tmp_path), tee=Std.ALL
    )
    try:
        result = _wait(ctx)
    finally:
        ctx.close()
    assert capfd.readouterr().out == "[t0]:a\n[t0]:b\n"
    assert open(result.stdouts[0]).read() == "a\nb"


def test_tee_lag_is_small(tmp_path, capfd):
    code = "import time; print('tick', flush=True); time.sleep(5)"
    ctx = start_processes(
        "lag", sys.executable, ("-c", code), _envs(1), log_dir=str(tmp_path), tee=Std.OUT
    )
    try:
        deadline = time.monotonic() + 3
        seen = ""
        while "tick" not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
            seen += capfd.readouterr().out
        assert "[lag0]:tick" in seen
        assert ctx.wait(timeout=0) is None  # printed while still running: not held back
    finally:
        ctx.close(timeout=1)


def test_attempt_folders_never_overwrite_earlier_attempts(tmp_path):
    dirs = []
    for attempt in (0, 1, 1, None):
        ctx = start_processes(
            "a",
            sys.executable,
            (script("exit_with.py"), "0"),
            _envs(1),
            log_dir=str(tmp_path),
            redirects=Std.OUT,
            attempt=attempt,
        )
        try:
            _wait(ctx)
        finally:
            ctx.close()
        dirs.append(os.path.basename(ctx.attempt_dir))
    assert dirs == ["attempt_0", "attempt_1", "attempt_1.1", "attempt_2"]
    for name in dirs:
        assert (tmp_path / name / "0" / "stdout.log").read_text() == "out of 0\n"


def test_run_wide_attempt_ids_and_error_file_env(tmp_path):
    code = (
        "import os; e = os.environ; print(e['TPELASTIC_ERROR_FILE'], e['TORCHELASTIC_ERROR_FILE'])"
    )
    ctx = start_processes(
        "e",
        sys.executable,
        ("-c", code),
        _envs(1),
        log_dir=str(tmp_path),
        redirects=Std.OUT,
        attempt="r3",
    )
    try:
        result = _wait(ctx)
    finally:
        ctx.close()
    expected = str(tmp_path / "attempt_r3" / "0" / "error.json")
    assert open(result.stdouts[0]).read().split() == [expected, expected]


def test_per_rank_command_args_and_context_manager(tmp_path):
    args = {0: (script("exit_with.py"), "0"), 1: (script("exit_with.py"), "5")}
    with start_processes("p", sys.executable, args, _envs(2), log_dir=str(tmp_path)) as ctx:
        result = _wait(ctx)
        pids = list(ctx.pids().values())
    assert list(result.failures) == [1] and result.failures[1].exitcode == 5
    assert all(not os.path.exists(f"/proc/{pid}") for pid in pids)


def test_exit_detection_without_pidfd(tmp_path, monkeypatch):
    # pidfds exist on this kernel; removing the function is the only way to exercise the
    # fallback (a waiting thread and a pipe) that kernels before 5.3 and other systems use.
    monkeypatch.delattr(os, "pidfd_open")
    stamp = tmp_path / "stamp"
    code = f"import sys, time; open({str(stamp)!r}, 'w').write(repr(time.time())); sys.exit(6)"
    with start_processes("n", sys.executable, ("-c", code), _envs(1), log_dir=str(tmp_path)) as ctx:
        result = _wait(ctx)
    assert result.failures[0].exitcode == 6
    assert result.failures[0].timestamp - float(stamp.read_text()) < 0.1
