"""RoundWatcher (the agent's thread held in the store's wait): a fired wait is taken once, the
thread does not wait again until it is taken, it does not spin on a wait that returns at once or
fails, and stop + join end it within a bound. The wait here is a plain function over threading
events (what the thread calls is the handler's job, tested over a real store in
tests/adapters/rendezvous/test_rendezvous_wait_for_change.py)."""

from __future__ import annotations

import threading
import time

from tpelastic.adapters.agent.round_watch import RoundWatcher


class _Wait:
    """Blocks until ``change`` is set (then True) or its timeout (False); counts its calls."""

    def __init__(self) -> None:
        self.change = threading.Event()
        self.calls = 0

    def __call__(self, timeout: float) -> bool:
        self.calls += 1
        return self.change.wait(timeout)


def _until(condition: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.01)
    return False


def test_a_fired_wait_is_taken_once_and_waited_again_only_after() -> None:
    wait = _Wait()
    watcher = RoundWatcher(wait, name="t-fired", slice_=5.0).start()
    try:
        assert _until(lambda: wait.calls == 1)
        assert watcher.take() is False  # nothing yet
        wait.change.set()  # the key stays present, as a store key does
        assert _until(watcher.take)
        assert watcher.take() is False  # once per firing
        time.sleep(0.3)
        assert wait.calls == 1  # taken but not looked yet: it does not wait again
        watcher.resume()
        assert _until(lambda: wait.calls >= 2)  # looked: it waits again (and fires again)
        assert _until(watcher.take)
        time.sleep(0.3)
        calls = wait.calls
        time.sleep(0.5)
        assert wait.calls == calls  # not resumed: it does not spin on the present key
    finally:
        watcher.stop()
        assert watcher.join(5.0)


def test_a_wait_that_returns_at_once_or_raises_does_not_spin() -> None:
    quick = {"calls": 0}

    def instant(timeout: float) -> bool:
        quick["calls"] += 1
        if quick["calls"] % 2:
            raise ConnectionError("store lost")
        return False

    watcher = RoundWatcher(instant, name="t-instant", slice_=5.0).start()
    try:
        time.sleep(1.2)
        assert 1 <= quick["calls"] <= 5  # paused 0.5 s after each, not thousands of calls
        assert watcher.take() is False
    finally:
        watcher.stop()
        assert watcher.join(5.0)


def test_stop_ends_the_thread_when_its_wait_returns() -> None:
    wait = _Wait()
    watcher = RoundWatcher(wait, name="t-stop", slice_=30.0).start()
    assert _until(lambda: wait.calls == 1)
    watcher.stop()  # never blocks
    assert watcher.alive  # still in its wait
    assert not watcher.join(0.1)
    wait.change.set()  # what a round's end (or the store's close) does to the held wait
    assert watcher.join(5.0)
    assert watcher.take() is False  # a stopped watcher does not report the change
    assert not any(t.name == "t-stop" for t in threading.enumerate())


def test_a_firing_calls_on_fire_after_the_flag_is_up_and_survives_its_errors() -> None:
    wait = _Wait()
    seen: list[bool] = []

    def on_fire() -> None:
        seen.append(watcher.take())  # the flag is already up when the hook runs
        raise RuntimeError("the agent is gone")  # logged; the watcher carries on

    watcher = RoundWatcher(wait, name="t-hook", slice_=5.0, on_fire=on_fire).start()
    try:
        wait.change.set()
        assert _until(lambda: seen == [True])
        watcher.resume()
        assert _until(lambda: len(seen) == 2)  # fired again: the thread is still alive
    finally:
        watcher.stop()
        assert watcher.join(5.0)
