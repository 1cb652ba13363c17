"""Pumps only put what they saw in the loop's inbox; the inbox wait is bounded and wakes on a put.

The worker pump is driven here by a real wait that returns once a flag is set, standing in for
a worker group's wait (the e2e tests run it over real workers).
"""

from __future__ import annotations

import threading
import time

from tpelastic.adapters.agent.pumps import (
    Inbox,
    JoinEnded,
    JoinPump,
    RoundChanged,
    WorkerPumps,
    WorkersEnded,
    WorkerWaitFailed,
)
from tpelastic.adapters.workers.api import RunProcsResult


def _ended_when(flag: threading.Event, result: RunProcsResult):  # type: ignore[no-untyped-def]
    def wait(seconds: float) -> RunProcsResult | None:
        return result if flag.wait(seconds) else None

    return wait


def test_the_inbox_wait_is_bounded_and_a_put_ends_it_at_once() -> None:
    inbox = Inbox()
    started = time.monotonic()
    assert inbox.pop_within(0.2) is None
    assert 0.15 <= time.monotonic() - started < 5.0
    threading.Timer(0.1, inbox.put, args=("seen",)).start()
    started = time.monotonic()
    assert inbox.pop_within(30.0) == "seen"
    assert time.monotonic() - started < 5.0  # woken by the put, not the bound


def test_a_pump_puts_the_end_of_its_workers_once_with_its_serial() -> None:
    inbox, flag = Inbox(), threading.Event()
    result = RunProcsResult()
    pumps = WorkerPumps(inbox, lambda: _ended_when(flag, result))
    pumps.start("r0")
    assert inbox.pop_within(0.1) is None
    flag.set()
    got = inbox.pop_within(10.0)
    assert got == WorkersEnded(serial=1, result=result)
    pumps.join(5.0)
    assert inbox.pop_within(0.1) is None


def test_a_stopped_pump_puts_nothing_and_the_next_start_has_a_new_serial() -> None:
    inbox, first, second = Inbox(), threading.Event(), threading.Event()
    waits = iter([first, second])
    result = RunProcsResult()
    pumps = WorkerPumps(inbox, lambda: _ended_when(next(waits), result))
    pumps.start("r0")
    pumps.stop()
    first.set()  # the stopped start's workers end: nobody is told
    pumps.start("r1")
    second.set()
    assert inbox.pop_within(10.0) == WorkersEnded(serial=2, result=result)
    pumps.join(5.0)
    assert not inbox


def test_a_failing_wait_reaches_the_inbox() -> None:
    inbox = Inbox()

    def broken(seconds: float) -> RunProcsResult | None:
        raise RuntimeError("no workers to wait for")

    WorkerPumps(inbox, lambda: broken).start("r0")
    got = inbox.pop_within(10.0)
    assert isinstance(got, WorkerWaitFailed) and got.serial == 1
    assert "no workers" in str(got.error)


def test_only_outcomes_of_effects_are_counted() -> None:
    """The loop ends a step at an effect that put its outcome here: pumped items, which come
    at any time from other threads, must not count."""
    inbox = Inbox()
    inbox.put(WorkersEnded(serial=1, result=RunProcsResult()))
    inbox.put(RoundChanged(watcher=None))  # type: ignore[arg-type]
    assert inbox and inbox.outcomes == 0
    inbox.put("RendezvousFailed")
    inbox.pop()
    assert inbox.outcomes == 1  # counted when put, not while held


def test_an_end_reported_before_the_stop_is_not_the_current_starts() -> None:
    """The workers' end was queued, then the loop stopped them (an attempt opened) and waits
    for the attempt's endpoint before the next start: that end must read as stale, or the
    loop takes it for the new attempt's workers succeeding before they ever started."""
    inbox = Inbox()
    done = threading.Event()
    done.set()
    pumps = WorkerPumps(inbox, lambda: _ended_when(done, RunProcsResult(return_values={0: 1})))
    pumps.start("r0")
    ended = inbox.pop_within(10.0)
    assert isinstance(ended, WorkersEnded) and ended.serial == pumps.serial
    pumps.stop()
    assert ended.serial != pumps.serial
    pumps.start("r0a1")
    assert ended.serial != pumps.serial


def test_a_join_is_pending_until_the_loop_takes_its_end() -> None:
    inbox, release = Inbox(), threading.Event()
    joins = JoinPump(inbox, now=time.monotonic)
    joins.start(lambda: "joined" if release.wait(10.0) else "timed out")
    assert joins.pending and inbox.pop_within(0.1) is None
    release.set()
    got = inbox.pop_within(10.0)
    assert isinstance(got, JoinEnded) and got.outcome == "joined"
    assert joins.pending  # put, but not taken yet: the loop still knows a join is out
    assert joins.ended(got) and not joins.pending
    joins.join(5.0)


def test_a_failed_join_puts_its_error_and_an_older_joins_end_is_not_current() -> None:
    inbox = Inbox()
    joins = JoinPump(inbox, now=time.monotonic)

    def fail() -> None:
        raise RuntimeError("store gone")

    joins.start(fail)
    first = inbox.pop_within(10.0)
    joins.start(lambda: "second")
    second = inbox.pop_within(10.0)
    assert isinstance(first, JoinEnded) and isinstance(first.outcome, RuntimeError)
    assert not joins.ended(first)  # the second join is the current one
    assert isinstance(second, JoinEnded) and joins.ended(second)
    joins.join(5.0)


def test_joining_the_join_threads_skips_one_a_stop_signal_kept_from_starting() -> None:
    """A stop signal can raise out of ``Thread.start``; the teardown's join must not then fail
    with "cannot join thread before it is started" (a traceback and exit 1 instead of 143)."""
    inbox = Inbox()
    pump = JoinPump(inbox, now=time.monotonic)
    pump.start(lambda: "round 0")
    assert isinstance(inbox.pop_within(10.0), JoinEnded)
    pump._threads.append(threading.Thread(target=lambda: None))  # as an interrupted start
    pump.join(1.0)
