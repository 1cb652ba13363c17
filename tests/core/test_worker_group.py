"""The worker group machine by example: every row of its table is used at least once here."""

from __future__ import annotations

import pytest
from attrs import evolve

from tpelastic.core import worker as w
from tpelastic.core import worker_group as wg
from tpelastic.core.table import InvalidTransition
from tpelastic.core.values import Emit, Rejected
from tpelastic.core.worker import WorkerState as WS


def group(*phases: WS) -> wg.WorkerGroup:
    """A group of len(phases) workers in these phases (running ones have pids)."""
    fresh = wg.make_group(
        role="trainer",
        local_world_size=len(phases),
        round=2,
        restart_count=1,
        group_rank=1,
        group_world_size=2,
    )
    workers = tuple(
        evolve(x, phase=p, pid=None if p is WS.INIT else 100 + x.local_rank)
        for x, p in zip(fresh.workers, phases, strict=True)
    )
    return evolve(fresh, workers=workers, phase=wg.fold_phase(workers))


def on(rank: int, event: w.WorkerEventT) -> wg.WorkerEvent:
    return wg.WorkerEvent(local_rank=rank, event=event)


START = w.WorkerStarted(now=1.0, pid=501)
OK = w.WorkerExited(now=5.0, exitcode=0)
BAD = w.WorkerExited(now=5.0, exitcode=1)
STALL = w.ProgressStalled(now=4.0)
RESUME = w.ProgressResumed(now=4.5)
LOST = w.WorkerLost(now=4.0)
# N: new (INIT), K: unknown
H, N, U, K, F, S = WS.HEALTHY, WS.INIT, WS.UNHEALTHY, WS.UNKNOWN, WS.FAILED, WS.SUCCEEDED

# (name, state, event, expected group phase)
EXAMPLES = [
    ("group started", group(N, N), wg.GroupStarted(now=1.0, pids=(10, 11)), H),
    ("one of two started", group(N, N), on(0, START), N),
    ("last one started", group(H, N), on(1, START), H),
    ("stall while another starts", group(H, N), on(0, STALL), U),
    ("lost while another starts", group(H, N), on(0, LOST), K),
    ("died before start", group(N, N), on(0, BAD), F),
    ("start already started: passed on", group(H, N), on(0, START), N),
    ("one of two succeeded", group(H, H), on(0, OK), H),
    ("stall", group(H, H), on(1, STALL), U),
    ("lost", group(H, H), on(1, LOST), K),
    ("failure", group(H, H), on(1, BAD), F),
    ("last one succeeded", group(S, H), on(1, OK), S),
    ("resume in healthy: passed on", group(H, H), on(0, RESUME), H),
    ("still stalled", group(U, U), on(0, RESUME), U),
    ("recovered", group(U, H), on(0, RESUME), H),
    ("stalled and lost", group(U, H), on(1, LOST), K),
    ("stalled one fails", group(U, H), on(0, BAD), F),
    ("stalled one finishes last", group(U, S), on(0, OK), S),
    ("stalled one starts: passed on", group(U, H), on(0, START), U),
    ("lost one settles", group(K, K), on(0, OK), K),
    ("lost one was fine", group(K, H), on(0, OK), H),
    ("lost, other stalls", group(K, H), on(1, STALL), K),
    ("lost, other was stalled", group(K, U), on(0, OK), U),
    ("lost one failed", group(K, H), on(0, BAD), F),
    ("lost one succeeded last", group(K, S), on(0, OK), S),
    ("lost, stall a lost one: passed on", group(K, H), on(0, STALL), K),
    ("another failure", group(F, H), on(1, BAD), F),
    ("exit after failure: passed on", group(F, H), on(0, BAD), F),
    ("stop fresh", group(N, N), wg.GroupStopped(now=9.0, reason="x"), WS.STOPPED),
    ("stop running", group(H, S), wg.GroupStopped(now=9.0, reason="x"), WS.STOPPED),
    ("stop stalled", group(U, H), wg.GroupStopped(now=9.0, reason="x"), WS.STOPPED),
    ("stop lost", group(K, H), wg.GroupStopped(now=9.0, reason="x"), WS.STOPPED),
    ("stop after failure", group(F, H), wg.GroupStopped(now=9.0, reason="x"), F),
]


@pytest.mark.parametrize(
    ("name", "state", "event", "phase"), EXAMPLES, ids=[e[0] for e in EXAMPLES]
)
def test_example(name: str, state: wg.WorkerGroup, event: wg.GroupEventT, phase: WS) -> None:
    result = wg.step(state, event)
    assert result.state.phase is phase
    if "passed on" in name:
        assert result.state == state
        assert len(result.effects) == 1 and isinstance(result.effects[0], Rejected)
        assert result.effects[0].machine == "worker_group"
        assert result.effects[0].reason.startswith(f"worker {event.local_rank} rejects ")


def test_every_row_has_an_example() -> None:
    used = {wg.TABLE.select(state, event, None) for _, state, event, _ in EXAMPLES}
    assert used == set(wg.TABLE.rows)


def test_failures_are_reported_earliest_first() -> None:
    g = group(H, H, H)
    first = wg.step(g, on(2, w.WorkerExited(now=7.0, exitcode=1)))
    assert [type(e) for e in first.effects] == [Emit, wg.GroupFailed]
    # a failure observed later but that happened earlier becomes the root cause
    second = wg.step(first.state, on(0, w.WorkerExited(now=3.0, exitcode=-9, signal="SIGKILL")))
    (report,) = [e for e in second.effects if isinstance(e, wg.GroupFailed)]
    assert [f.local_rank for f in report.failures] == [0, 2]
    assert report.failures[0].reason == "exitcode -9 (SIGKILL)"
    assert report.failures[1].global_rank == 5  # node 1 of 2, three workers each


def test_success_and_stop_effects() -> None:
    done = wg.step(group(S, H), on(1, OK))
    assert done.effects[-1] == wg.GroupSucceeded(role="trainer", round=2)
    stopped = wg.step(group(S, H), wg.GroupStopped(now=9.0, reason="scale_up"))
    assert [x.phase for x in stopped.state.workers] == [S, WS.STOPPED]
    assert stopped.state.stop_reason == "scale_up"


@pytest.mark.parametrize(
    ("state", "event", "reason"),
    [
        (group(H, H), on(2, OK), "no worker with local rank 2"),
        (group(H, H), on(0, w.WorkerStopped(now=1.0)), "a group is stopped as a whole"),
    ],
)
def test_group_level_rejections(state: wg.WorkerGroup, event: wg.WorkerEvent, reason: str) -> None:
    result = wg.step(state, event)
    assert result.state == state
    (rejected,) = result.effects
    assert isinstance(rejected, Rejected) and rejected.reason.startswith(reason)


def test_started_needs_one_pid_per_fresh_worker() -> None:
    for state, pids in ((group(N, N), (1,)), (group(N, N), (1, 0)), (group(H, N), (1, 2))):
        result = wg.step(state, wg.GroupStarted(now=1.0, pids=pids))
        assert result.state == state and isinstance(result.effects[0], Rejected)


def test_terminal_groups_reject() -> None:
    for state in (group(S, S), wg.step(group(H, H), wg.GroupStopped(now=1, reason="x")).state):
        result = wg.step(state, wg.GroupStopped(now=2.0, reason="again"))
        assert result.effects[0].reason.endswith("is terminal")  # type: ignore[attr-defined]


def test_phase_must_be_the_fold() -> None:
    g = group(H, H)
    with pytest.raises(ValueError, match="phase FAILED disagrees with its workers"):
        evolve(g, phase=WS.FAILED)
    with pytest.raises(ValueError, match="workers must have local_world_size=2 entries, got 1"):
        evolve(g, workers=g.workers[:1])
    with pytest.raises(ValueError, match="group_rank must be in"):
        wg.make_group(
            role="r", local_world_size=1, round=0, restart_count=0, group_rank=2, group_world_size=2
        )


def test_missing_row_for_a_fold_is_a_bug_not_a_rejection() -> None:
    # A state the fold forbids cannot be built, so call the fallback action directly.
    with pytest.raises(InvalidTransition, match="no row from HEALTHY"):
        wg.pass_on_rejection(group(H, H), on(0, STALL), None)
