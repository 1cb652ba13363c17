"""Multiprocessing workers (callables) with every start method, with real processes."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from tpelastic.adapters.workers.api import Std
from tpelastic.multiprocessing import start_processes


def square_and_report(x: int) -> dict[str, object]:
    print(f"computing {x}")
    return {"value": x * x, "rank": os.environ["RANK"], "pid": os.getpid()}


def fail_or_sleep(x: int) -> int:
    if x == 1:
        raise ZeroDivisionError("rank one cannot divide")
    if x == 2:
        time.sleep(60)
    return x


def exit_quietly() -> None:
    sys.exit(0)


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_return_values_per_rank_with_each_start_method(method, tmp_path, capfd):
    envs = {r: {"RANK": str(r + 4), "LOCAL_RANK": str(r)} for r in range(2)}
    ctx = start_processes(
        "sq",
        square_and_report,
        {0: (3,), 1: (5,)},
        envs,
        log_dir=str(tmp_path),
        start_method=method,
        tee=Std.OUT,
    )
    try:
        result = ctx.wait(timeout=30, period=0.05)
    finally:
        ctx.close()
    assert result is not None and not result.is_failed()
    assert result.return_values[0]["value"] == 9 and result.return_values[1]["value"] == 25
    assert result.return_values[1]["rank"] == "5"
    assert {v["pid"] for v in result.return_values.values()} == set(ctx.pids().values())
    out = capfd.readouterr().out
    assert "[sq0|rank4]:computing 3" in out and "[sq1|rank5]:computing 5" in out


def test_an_exception_becomes_an_error_file_and_a_failure(tmp_path):
    envs = {r: {"RANK": str(r)} for r in range(3)}
    ctx = start_processes(
        "f",
        fail_or_sleep,
        {0: (0,), 1: (1,), 2: (2,)},
        envs,
        log_dir=str(tmp_path),
        redirects=Std.ERR,
    )
    try:
        result = ctx.wait(timeout=30, period=0.05)
        assert result is not None and set(result.failures) == {1}
        assert ctx.wait(timeout=0) is not None  # still failed; rank 2 still runs until close
    finally:
        ctx.close(timeout=2)
    failure = result.failures[1]
    assert failure.exitcode == 1 and failure.rank == 1
    assert failure.error_file_data["exception_type"] == "ZeroDivisionError"
    assert failure.message == "ZeroDivisionError: rank one cannot divide"
    assert "fail_or_sleep" in failure.traceback
    assert "ZeroDivisionError" in open(result.stderrs[1]).read()


def test_a_signal_from_outside_is_reported_by_name(tmp_path):
    ctx = start_processes("k", fail_or_sleep, {0: (2,)}, {0: {}}, log_dir=str(tmp_path))
    try:
        time.sleep(0.3)
        os.kill(ctx.pids()[0], signal.SIGKILL)
        result = ctx.wait(timeout=10, period=0.05)
    finally:
        ctx.close()
    assert result is not None and result.failures[0].signal_name() == "SIGKILL"


def test_sys_exit_zero_counts_as_success_with_no_value(tmp_path):
    ctx = start_processes("q", exit_quietly, {0: ()}, {0: {}}, log_dir=str(tmp_path))
    try:
        result = ctx.wait(timeout=30, period=0.05)
    finally:
        ctx.close()
    assert result is not None and result.return_values == {0: None} and not result.failures


def return_unpicklable() -> object:
    return lambda: None


def test_a_return_value_that_cannot_be_pickled_fails_the_worker_clearly(tmp_path):
    ctx = start_processes("u", return_unpicklable, {0: ()}, {0: {}}, log_dir=str(tmp_path))
    try:
        result = ctx.wait(timeout=30, period=0.05)
    finally:
        ctx.close()
    assert result is not None and result.failures[0].exitcode == 1
    assert "pickle" in result.failures[0].message.lower()
