"""The store outage decision (specs/store_outage.md): what a lost connection means, how long."""

from __future__ import annotations

import pytest

from tpelastic.core import store_outage as so

POLICY = so.OutagePolicy(keep_alive_expiry=3.0, read_timeout=60.0)
WHERE = "tcp store 127.0.0.1:29400"


def fail(
    outage: so.Outage | None, kind: so.LossKind, now: float, tries: int = 1
) -> tuple[so.Outage, so.Verdict]:
    return so.on_failure(outage, kind, now, POLICY, where=WHERE, tries=tries)


def test_O2_the_first_failure_is_announced_with_what_and_how_long() -> None:
    outage, verdict = fail(None, "gone", 100.0)
    assert outage == so.Outage(since=100.0, kind="gone", deadline=103.0)
    assert isinstance(verdict, so.Retry) and verdict.announce
    assert WHERE in verdict.line and "refuses connections" in verdict.line
    assert "keep-alive expiry, 3s" in verdict.line
    _, again = fail(outage, "gone", 100.5, tries=2)
    assert isinstance(again, so.Retry) and not again.announce  # announced once per outage


def test_O4_silent_is_waited_out_for_read_timeout_gone_for_the_expiry() -> None:
    silent, verdict = fail(None, "silent", 0.0)
    assert silent.deadline == 60.0 and isinstance(verdict, so.Retry)
    assert "does not answer" in verdict.line and "read_timeout, 60s" in verdict.line
    _, still = fail(silent, "silent", 59.0, tries=2)
    assert isinstance(still, so.Retry)
    _, over = fail(silent, "silent", 60.0, tries=3)
    assert isinstance(over, so.GiveUp) and "did not answer for 60.0s" in over.reason


def test_a_silent_store_that_then_refuses_has_died_the_shorter_bound_applies() -> None:
    silent, _ = fail(None, "silent", 10.0)
    gone, verdict = fail(silent, "gone", 11.0, tries=2)
    assert gone == so.Outage(since=10.0, kind="gone", deadline=13.0)
    assert isinstance(verdict, so.Retry) and not verdict.announce


def test_O2_a_call_without_an_answer_starts_a_silent_outage_announced_once() -> None:
    outage, line = so.on_slow(None, 10.0, POLICY, where=WHERE)
    assert outage == so.Outage(since=10.0, kind="silent", deadline=70.0)
    assert line is not None and WHERE in line and "has not answered for 1s" in line
    assert "read_timeout, 60s" in line
    again, none = so.on_slow(outage, 10.5, POLICY, where=WHERE)
    assert again == outage and none is None
    _, verdict = fail(outage, "silent", 70.0)  # the call itself timed out: nothing more to wait
    assert isinstance(verdict, so.GiveUp)


def test_O3_retries_back_off_doubling_never_past_the_deadline() -> None:
    outage, _ = fail(None, "silent", 0.0)
    delays = []
    for tries in range(1, 10):
        _, verdict = fail(outage, "silent", 1.0, tries=tries)
        assert isinstance(verdict, so.Retry)
        delays.append(verdict.delay)
    assert delays[:4] == [0.05, 0.1, 0.2, 0.4]
    assert max(delays) == so.BACKOFF_MOST and delays == sorted(delays)
    gone, _ = fail(None, "gone", 0.0)
    _, near = fail(gone, "gone", 2.99, tries=9)
    assert isinstance(near, so.Retry) and near.delay == pytest.approx(0.01)


def test_O5_past_the_deadline_every_failure_gives_up_at_once_naming_the_fix() -> None:
    outage, _ = fail(None, "gone", 0.0)
    for now in (3.0, 3.1, 50.0):
        _, verdict = fail(outage, "gone", now, tries=1)  # a new caller: still no waiting
        assert isinstance(verdict, so.GiveUp)
        assert "tpelastic store" in verdict.reason and "etcd" in verdict.reason
        assert "docs/backends.md" in verdict.reason and "\n" not in verdict.reason


def test_a_success_ends_the_outage_and_says_how_long_it_lasted() -> None:
    outage, _ = fail(None, "gone", 5.0)
    assert so.on_success(outage, 6.5) == (None, 1.5)
    assert so.on_success(None, 6.5) == (None, None)
    fresh, verdict = fail(None, "gone", 7.0)  # the next loss is a new outage, announced again
    assert fresh.since == 7.0 and isinstance(verdict, so.Retry) and verdict.announce


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="loss kind"):
        fail(None, "lost", 0.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        so.OutagePolicy(keep_alive_expiry=0.0, read_timeout=1.0)
