"""The worker machine by example: every row of its table is used at least once here."""

from __future__ import annotations

import re

import pytest
from attrs import evolve

from tpelastic.core import worker as w
from tpelastic.core.values import Rejected
from tpelastic.core.worker import WorkerState as WS

FRESH = w.Worker(local_rank=1, global_rank=3, role_rank=3, world_size=4, role_world_size=4)
RUNNING = evolve(FRESH, phase=WS.HEALTHY, pid=4242)
STALLED = evolve(RUNNING, phase=WS.UNHEALTHY, stalled_since=5.0)
LOST = evolve(RUNNING, phase=WS.UNKNOWN)

# (name, state, event, expected phase)
EXAMPLES = [
    ("start", FRESH, w.WorkerStarted(now=1.0, pid=4242), WS.HEALTHY),
    ("dies before start", FRESH, w.WorkerExited(now=1.0, exitcode=127), WS.FAILED),
    ("exits 0", RUNNING, w.WorkerExited(now=9.0, exitcode=0), WS.SUCCEEDED),
    ("exits 1", RUNNING, w.WorkerExited(now=9.0, exitcode=1), WS.FAILED),
    ("stalled exits 0", STALLED, w.WorkerExited(now=9.0, exitcode=0), WS.SUCCEEDED),
    (
        "stalled killed",
        STALLED,
        w.WorkerExited(now=9.0, exitcode=-9, signal="SIGKILL"),
        WS.FAILED,
    ),
    ("lost then exit 0", LOST, w.WorkerExited(now=9.0, exitcode=0), WS.SUCCEEDED),
    ("lost then exit 2", LOST, w.WorkerExited(now=9.0, exitcode=2), WS.FAILED),
    ("hang", RUNNING, w.ProgressStalled(now=6.0), WS.UNHEALTHY),
    ("still hung", STALLED, w.ProgressStalled(now=8.0), WS.UNHEALTHY),
    ("recovers", STALLED, w.ProgressResumed(now=7.0), WS.HEALTHY),
    ("stop fresh", FRESH, w.WorkerStopped(now=2.0), WS.STOPPED),
    ("stop running", RUNNING, w.WorkerStopped(now=2.0), WS.STOPPED),
    ("stop stalled", STALLED, w.WorkerStopped(now=2.0), WS.STOPPED),
    ("stop lost", LOST, w.WorkerStopped(now=2.0), WS.STOPPED),
    ("running vanishes", RUNNING, w.WorkerLost(now=3.0), WS.UNKNOWN),
    ("stalled vanishes", STALLED, w.WorkerLost(now=3.0), WS.UNKNOWN),
]


@pytest.mark.parametrize(
    ("name", "state", "event", "phase"), EXAMPLES, ids=[e[0] for e in EXAMPLES]
)
def test_example(name: str, state: w.Worker, event: w.WorkerEventT, phase: WS) -> None:
    result = w.step(state, event)
    assert result.state.phase is phase
    assert result.effects == ()


def test_every_row_has_an_example() -> None:
    used = {w.TABLE.select(state, event, None) for _, state, event, _ in EXAMPLES}
    assert used == set(w.TABLE.rows)


def test_actions_record_the_facts() -> None:
    started = w.step(FRESH, w.WorkerStarted(now=1.0, pid=77)).state
    assert started.pid == 77
    stalled = w.step(started, w.ProgressStalled(now=4.0)).state
    again = w.step(stalled, w.ProgressStalled(now=8.0)).state
    assert again.stalled_since == 4.0  # the first stall time is kept
    assert w.step(again, w.ProgressResumed(now=9.0)).state.stalled_since is None
    killed = w.step(stalled, w.WorkerExited(now=10.0, exitcode=-9, signal="SIGKILL")).state
    assert (killed.exitcode, killed.signal, killed.ended_at) == (-9, "SIGKILL", 10.0)
    assert w.step(started, w.WorkerStopped(now=3.0)).state.ended_at == 3.0


@pytest.mark.parametrize(
    ("state", "event", "reason"),
    [
        (FRESH, w.WorkerExited(now=1.0, exitcode=0), "no guard holds"),
        (RUNNING, w.ProgressResumed(now=1.0), "ProgressResumed is not expected in HEALTHY"),
        (FRESH, w.WorkerLost(now=1.0), "WorkerLost is not expected in INIT"),
        (evolve(RUNNING, phase=WS.SUCCEEDED), w.WorkerStopped(now=1.0), "SUCCEEDED is terminal"),
    ],
)
def test_rejections_are_clean(state: w.Worker, event: w.WorkerEventT, reason: str) -> None:
    result = w.step(state, event)
    assert result.state == state
    assert result.effects == (
        Rejected(
            machine="worker", phase=state.phase.name, event=type(event).__name__, reason=reason
        ),
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"global_rank": 4}, "global_rank must be in [0, world_size=4), got 4"),
        ({"local_rank": -1}, "local_rank must be >= 0, got -1"),
        ({"role_rank": 9}, "role_rank must be in [0, role_world_size=4), got 9"),
    ],
)
def test_bad_values_name_the_field(fields: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        evolve(FRESH, **fields)


def test_bad_pid_is_refused() -> None:
    with pytest.raises(ValueError, match="pid"):
        w.WorkerStarted(now=0.0, pid=0)
