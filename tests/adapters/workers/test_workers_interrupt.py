"""PContext.interrupt (the agent's round watcher wakes the loop out of its wait for the workers),
with real worker processes: a blocked wait returns None at once, an interrupt before a wait ends
that wait, one interrupt ends one wait only, and a finished group still returns its result."""

from __future__ import annotations

import sys
import threading
import time

from tpelastic.multiprocessing import start_processes

SLEEP = ("-c", "import time; time.sleep(60)")


def _envs(n: int) -> dict[int, dict[str, str]]:
    return {r: {"LOCAL_RANK": str(r)} for r in range(n)}


def test_an_interrupt_ends_a_blocked_wait_and_only_that_one(tmp_path) -> None:
    ctx = start_processes("i", sys.executable, SLEEP, _envs(2), log_dir=str(tmp_path))
    try:
        threading.Timer(0.3, ctx.interrupt).start()
        started = time.monotonic()
        assert ctx.wait(timeout=60, period=60) is None
        assert time.monotonic() - started < 30  # woken, not timed out
        started = time.monotonic()
        assert ctx.wait(timeout=0.5, period=0.1) is None  # the interrupt was taken once
        assert time.monotonic() - started >= 0.45
        ctx.interrupt()  # before a wait: that wait returns at once
        started = time.monotonic()
        assert ctx.wait(timeout=60, period=60) is None
        assert time.monotonic() - started < 30
    finally:
        ctx.close()


def test_a_finished_group_returns_its_result_despite_an_interrupt(tmp_path) -> None:
    ctx = start_processes("f", sys.executable, ("-c", "pass"), _envs(2), log_dir=str(tmp_path))
    try:
        deadline = time.monotonic() + 30
        result = None
        while result is None and time.monotonic() < deadline:
            ctx.interrupt()
            result = ctx.wait(timeout=1.0, period=0.1)
            if result is None:
                time.sleep(0.05)
        assert result is not None and not result.is_failed()
    finally:
        ctx.close()
