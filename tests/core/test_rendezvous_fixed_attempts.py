"""Fixed membership on the core's attempt protocol: the newest opened attempt is found by a
scan of the opened prefix, and a node that comes into it restarts from there."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core import agent as ag
from tpelastic.core.rendezvous import attempts
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import run_ops
from tpelastic.core.rendezvous.records import RoundResult, StateCorrupt
from tpelastic.core.worker_group import WorkerFailure

KEYS = RunKeys("fixed")
CFG = ag.AgentConfig(
    max_restarts=100, min_nodes=2, max_nodes=2, local_world_size=1, restart_in_place=True
)


def newest(store: dict[str, bytes]) -> int:
    found, more = 0, True
    while more:
        replies = run_ops(attempts.newest_attempt_ops(KEYS, 0, found), store)
        found, more = attempts.newest_attempt(found, replies)
    return found


@given(opened=st.integers(0, 3 * attempts.NEWEST_SCAN + 2))
def test_R20_a_late_node_comes_into_the_newest_attempt_and_fails_on_from_there(
    opened: int,
) -> None:
    store: dict[str, bytes] = {}
    for attempt in range(1, opened + 1):
        run_ops(attempts.open_attempt_ops(KEYS, 0, attempt, "exit 1"), store)
    assert newest(store) == opened
    count = attempts.attempt_restart_count(RoundResult(round_no=0), opened)
    assert count == opened
    state = ag.initial_state(CFG)
    state = ag.step(state, ag.AgentStarted(now=0.0), CFG).state
    came = ag.RoundCompleted(
        now=1.0, round=0, group_rank=1, group_world_size=2, restart_count=count, attempt=opened
    )
    started = ag.step(state, came, CFG)
    (start,) = [e for e in started.effects if isinstance(e, ag.StartWorkers)]
    assert (start.attempt, start.restart_count) == (opened, opened)
    failure = WorkerFailure(local_rank=0, global_rank=1, exitcode=1, signal=None, at=2.0)
    failed = ag.step(started.state, ag.WorkersFailed(now=2.0, failures=(failure,)), CFG)
    (opens,) = [e for e in failed.effects if isinstance(e, ag.OpenAttempt)]
    landed = ag.OwnAttemptOpened(now=2.5, round=0, attempt=opens.attempt)
    (again,) = ag.step(failed.state, landed, CFG).effects
    assert isinstance(again, ag.StartWorkers)
    assert opens.attempt == again.attempt == opened + 1
    assert again.restart_count == opened + 1


def test_a_foreign_attempt_reply_is_corrupt() -> None:
    with pytest.raises(StateCorrupt):
        attempts.newest_attempt(0, [b"x", 3])
