"""Invariants of the worker and worker_group machines over random event sequences.

Each test walks a fresh slot or group through events drawn from every event type (including ones
the table rejects) and checks one numbered invariant of specs/worker.md or specs/worker_group.md
after every step.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from strategies_core import any_worker, fresh_groups, fresh_workers, group_events, worker_events

from tpelastic.core import worker as w
from tpelastic.core import worker_group as wg
from tpelastic.core.values import Rejected
from tpelastic.core.worker import WorkerState as WS

LEGAL_MOVES = {(r.src, r.dst) for r in w.TABLE.rows}
walks = st.lists(worker_events, max_size=25)


def walk(start: w.Worker, events: list[w.WorkerEventT]) -> list[tuple[w.Worker, w.Worker, bool]]:
    """(before, after, rejected) for each event applied in turn."""
    out, state = [], start
    for event in events:
        result = w.step(state, event)
        rejected = any(isinstance(e, Rejected) for e in result.effects)
        out.append((state, result.state, rejected))
        state = result.state
    return out


@given(state=any_worker, event=worker_events)
def test_W1_terminal_slots_never_change(state: w.Worker, event: w.WorkerEventT) -> None:
    """A slot in SUCCEEDED, FAILED or STOPPED never changes again."""
    result = w.step(state, event)
    if state.phase in w.TERMINAL:
        assert result.state == state
        assert isinstance(result.effects[0], Rejected)


@given(start=fresh_workers(), events=walks)
def test_W2_verdict_matches_exit_status(start: w.Worker, events: list[w.WorkerEventT]) -> None:
    """SUCCEEDED means exit code 0 and no signal; FAILED means a non-zero code or a signal."""
    for _, after, _ in walk(start, events):
        if after.phase is WS.SUCCEEDED:
            assert after.exitcode == 0 and after.signal is None
        if after.phase is WS.FAILED:
            assert after.exitcode != 0 or after.signal is not None


@given(start=fresh_workers(), events=walks)
def test_W3_changes_follow_rows(start: w.Worker, events: list[w.WorkerEventT]) -> None:
    """Every phase change is a (from, to) pair of a row, and a rejected event changes nothing."""
    for before, after, rejected in walk(start, events):
        if rejected:
            assert after == before
        else:
            assert (before.phase, after.phase) in LEGAL_MOVES


@given(start=fresh_workers(), events=walks)
def test_W4_pid_is_set_once_by_the_start(start: w.Worker, events: list[w.WorkerEventT]) -> None:
    """A slot's pid is set by its start and never changes: one slot is one process."""
    for before, after, _ in walk(start, events):
        if before.pid is not None:
            assert after.pid == before.pid
        if after.pid is not None and before.pid is None:
            assert before.phase is WS.INIT and after.phase is WS.HEALTHY


@st.composite
def group_walks(draw: st.DrawFn) -> tuple[wg.WorkerGroup, list[wg.GroupEventT]]:
    group = draw(fresh_groups())
    events: list[wg.GroupEventT] = []
    if draw(st.booleans()):
        pids = tuple(range(100, 100 + group.local_world_size))
        events.append(wg.GroupStarted(now=0.0, pids=pids))
    events += draw(st.lists(group_events(group.local_world_size), max_size=30))
    return group, events


def group_steps(
    start: wg.WorkerGroup, events: list[wg.GroupEventT]
) -> list[tuple[wg.WorkerGroup, wg.GroupEventT, wg.WorkerGroup, tuple[object, ...]]]:
    out, state = [], start
    for event in events:
        result = wg.step(state, event)
        out.append((state, event, result.state, result.effects))
        state = result.state
    return out


@given(case=group_walks())
def test_G1_one_failure_fails_the_group_for_good(
    case: tuple[wg.WorkerGroup, list[wg.GroupEventT]],
) -> None:
    """The group is FAILED exactly when a worker is FAILED, and once FAILED it stays FAILED."""
    for before, _, after, _ in group_steps(*case):
        assert (after.phase is WS.FAILED) == any(x.phase is WS.FAILED for x in after.workers)
        if before.phase is WS.FAILED:
            assert after.phase is WS.FAILED


@given(case=group_walks())
def test_G2_success_needs_every_worker(case: tuple[wg.WorkerGroup, list[wg.GroupEventT]]) -> None:
    """The group is SUCCEEDED only when every worker is, and says so once, on entering it."""
    for before, _, after, effects in group_steps(*case):
        if after.phase is WS.SUCCEEDED:
            assert all(x.phase is WS.SUCCEEDED for x in after.workers)
        entered = after.phase is WS.SUCCEEDED and before.phase is not WS.SUCCEEDED
        said = [e for e in effects if isinstance(e, wg.GroupSucceeded)]
        assert len(said) == (1 if entered else 0)


@given(case=group_walks())
def test_G3_failures_reported_earliest_first(
    case: tuple[wg.WorkerGroup, list[wg.GroupEventT]],
) -> None:
    """Each GroupFailed names exactly the failed local ranks, earliest failure first."""
    for before, _, after, effects in group_steps(*case):
        reports = [e for e in effects if isinstance(e, wg.GroupFailed)]
        new_failure = sum(x.phase is WS.FAILED for x in after.workers) > sum(
            x.phase is WS.FAILED for x in before.workers
        )
        assert len(reports) == (1 if new_failure else 0)
        for report in reports:
            failed = {x.local_rank for x in after.workers if x.phase is WS.FAILED}
            assert {f.local_rank for f in report.failures} == failed
            times = [f.at for f in report.failures]
            assert times == sorted(times)


@given(case=group_walks())
def test_G4_stop_leaves_no_live_worker(case: tuple[wg.WorkerGroup, list[wg.GroupEventT]]) -> None:
    """After GroupStopped no worker is INIT, HEALTHY, UNHEALTHY or UNKNOWN, and verdicts stay."""
    for before, event, after, effects in group_steps(*case):
        if not isinstance(event, wg.GroupStopped):
            continue
        if any(isinstance(e, Rejected) for e in effects):
            assert after == before
            continue
        assert all(x.phase not in w.LIVE for x in after.workers)
        for old, new in zip(before.workers, after.workers, strict=True):
            if old.phase in w.TERMINAL:
                assert new == old
