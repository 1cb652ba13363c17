"""The launcher thread every worker is forked from (``context._Launcher``).

Workers carry a parent-death signal that fires when the *thread* that forked them ends, so all
are started from one long-lived thread; callers hand jobs to it and get the result or the error
back (see docs/processes.md). Real threads; no mocks.
"""

from __future__ import annotations

import threading
import time

import pytest

from tpelastic.adapters.workers.context import _Launcher


def test_a_job_runs_on_one_long_lived_thread_that_is_not_the_caller():
    launcher = _Launcher()
    first = launcher.run(threading.get_ident)
    second = launcher.run(threading.get_ident)
    assert first == second != threading.get_ident()
    assert launcher.run(lambda: 6 * 7) == 42


def test_a_job_s_error_is_raised_in_the_caller_and_the_thread_goes_on():
    launcher = _Launcher()

    def fail() -> None:
        raise OSError("no such program")

    with pytest.raises(OSError, match="no such program"):
        launcher.run(fail)
    assert launcher.run(lambda: "still here") == "still here"


def test_a_job_that_takes_too_long_is_one_clear_timeout():
    launcher = _Launcher()
    release = threading.Event()
    with pytest.raises(TimeoutError, match="more than 0.05 s"):
        launcher.run(lambda: release.wait(10), timeout=0.05)
    release.set()
    assert launcher.run(lambda: "next", timeout=10) == "next"  # the late job did not block it


def test_callers_on_several_threads_each_get_their_own_result():
    launcher = _Launcher()
    results: dict[int, object] = {}

    def call(n: int) -> None:
        results[n] = launcher.run(lambda: (time.sleep(0.01), n * n)[1], timeout=30)

    callers = [threading.Thread(target=call, args=(n,)) for n in range(8)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=30)
    assert results == {n: n * n for n in range(8)}
