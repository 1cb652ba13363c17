"""In-process restart's decisions (core/in_process.py), alone and through the node's step."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core import agent as ag
from tpelastic.core import in_process as ip
from tpelastic.core import node as nd
from tpelastic.core.group_values import GroupStarted
from tpelastic.core.values import Rejected

CONFIG = ip.InProcessConfig(stop_timeout=2.0, start_timeout=10.0)
STOP = ag.StopWorkers(reason="worker local rank 1 failed")
START = ag.StartWorkers(
    round=0, group_rank=0, group_world_size=1, restart_count=1, local_world_size=3, attempt=1
)


def _run(state: ip.InProcessState, *events: object) -> tuple[ip.InProcessState, list[object]]:
    effects: list[object] = []
    for event in events:
        done = ip.step(state, event, CONFIG)
        assert not any(isinstance(e, Rejected) for e in done.effects), done.effects
        state, effects = done.state, effects + list(done.effects)
    return state, effects


def _attached(*ranks: int) -> ip.InProcessState:
    state = ip.InProcessState(local_world_size=3)
    return _run(state, *(ip.WorkerAttached(now=0.0, local_rank=r) for r in ranks))[0]


def test_K1_a_restart_keeps_the_attached_workers_only() -> None:
    ordered = ip.RestartOrdered(now=1.0, stop=STOP, start=START)
    state, effects = _run(_attached(0, 2), ordered)
    assert effects == [ip.PauseWorkers(reason=STOP.reason, keep={0, 2}, respawn={1})]
    assert state.phase is ip.RestartPhase.RESTARTING and state.deadline == 1.0 + 2.0
    # Nobody attached: the agent's orders as they are.
    assert _run(ip.InProcessState(local_world_size=3), ordered)[1] == [STOP, START]
    # A stop alone stops every process, and nothing is kept after it.
    state, effects = _run(_attached(0, 1, 2), ip.StopOrdered(now=1.0, stop=STOP))
    assert effects == [STOP] and state.phase is ip.RestartPhase.OFF and not state.attached
    # A worker whose process exited is not kept.
    gone = ip.WorkersGone(now=0.5, local_ranks=frozenset({2}))
    state, effects = _run(_attached(0, 2), gone, ordered)
    assert effects == [ip.PauseWorkers(reason=STOP.reason, keep={0}, respawn={1, 2})]


def test_K2_the_start_follows_once_every_kept_worker_stopped_or_left() -> None:
    ordered = ip.RestartOrdered(now=1.0, stop=STOP, start=START)
    state, effects = _run(_attached(0, 1, 2), ordered, ip.WorkerPaused(now=1.1, local_rank=0))
    assert effects == [ip.PauseWorkers(reason=STOP.reason, keep={0, 1, 2}, respawn=set())]
    # Rank 1's process ended before it answered: respawned instead of kept.
    state, effects = _run(
        state,
        ip.WorkerDetached(now=1.2, local_rank=1),
        ip.WorkerPaused(now=1.3, local_rank=2),
    )
    assert effects == [ip.ResumeWorkers(start=START, keep={0, 2}, respawn={1})]
    assert state.deadline is None  # the start's bound runs from the workers' start
    state, _ = _run(state, ip.WorkersRunning(now=1.4))
    assert state.deadline == 1.4 + 10.0
    state, effects = _run(
        state, ip.WorkerResumed(now=2.0, local_rank=0), ip.WorkerResumed(now=2.1, local_rank=2)
    )
    assert effects == [] and state.phase is ip.RestartPhase.READY and state.deadline is None


def _fallback(why: str) -> list[object]:
    return [ag.StopWorkers(reason=f"in-process restart failed: {why}; full restart"), START]


def test_K3_no_answer_in_time_or_a_failed_reinit_is_a_full_restart_of_the_same_attempt() -> None:
    ordered = ip.RestartOrdered(now=1.0, stop=STOP, start=START)
    restarting, _ = _run(_attached(0, 1), ordered, ip.WorkerPaused(now=1.1, local_rank=0))
    state, effects = _run(restarting, ip.RestartTimePassed(now=2.9))
    assert effects == [] and state.phase is ip.RestartPhase.RESTARTING
    state, effects = _run(restarting, ip.RestartTimePassed(now=3.0))
    assert effects == _fallback("local rank 1 did not answer 'stopped' within 2s")
    assert state == ip.InProcessState(local_world_size=3)
    started, _ = _run(restarting, ip.WorkerPaused(now=1.5, local_rank=1), ip.WorkersRunning(now=2))
    why = "local rank 0: RuntimeError: no peer"
    failed = ip.WorkerReinitFailed(now=2.5, local_rank=0, reason="RuntimeError: no peer")
    assert _run(started, failed)[1] == _fallback(why)
    late = _run(started, ip.RestartTimePassed(now=12.0))[1]
    assert late == _fallback("local rank 0, 1 did not answer 'started' within 10s")
    gone = ip.WorkersGone(now=3.0, local_ranks=frozenset({1}))
    assert _run(started, gone)[1] == _fallback("local rank 1 exited while restarting in process")
    # A second restart before the kept workers answered the first: every process.
    again = ip.RestartOrdered(now=2.0, stop=STOP, start=START)
    assert _run(restarting, again)[1] == [STOP, START]


channel_events = st.one_of(
    st.builds(ip.WorkerAttached, now=st.floats(0, 50), local_rank=st.integers(0, 2)),
    st.builds(ip.WorkerDetached, now=st.floats(0, 50), local_rank=st.integers(0, 2)),
    st.builds(ip.WorkerPaused, now=st.floats(0, 50), local_rank=st.integers(0, 2)),
    st.builds(ip.WorkerResumed, now=st.floats(0, 50), local_rank=st.integers(0, 2)),
    st.builds(
        ip.WorkerReinitFailed,
        now=st.floats(0, 50),
        local_rank=st.integers(0, 2),
        reason=st.just("x"),
    ),
    st.builds(ip.RestartTimePassed, now=st.floats(0, 50)),
    st.builds(
        ip.RestartOrdered,
        now=st.floats(0, 50),
        stop=st.just(STOP),
        start=st.sampled_from([START, None]),
    ),
    st.builds(ip.StartOrdered, now=st.floats(0, 50), start=st.just(START)),
    st.builds(ip.StopOrdered, now=st.floats(0, 50), stop=st.just(STOP)),
    st.builds(ip.WorkersGone, now=st.floats(0, 50), local_ranks=st.frozensets(st.integers(0, 2))),
    st.builds(ip.WorkersRunning, now=st.floats(0, 50)),
)


@given(st.lists(channel_events, max_size=30))
def test_K3_every_restart_is_bounded_and_every_order_is_whole(events: list[object]) -> None:
    """Any order of answers: the table never rejects; while RESTARTING an answer is always
    due by a deadline (or the start is about to be carried out); kept workers are attached;
    every fallback is the agent's own StartWorkers after a StopWorkers."""
    state = ip.InProcessState(local_world_size=3)
    for event in events:
        done = ip.step(state, event, CONFIG)
        assert not any(isinstance(e, Rejected) for e in done.effects)
        state, effects = done.state, list(done.effects)
        if state.phase is ip.RestartPhase.RESTARTING:
            assert state.kept <= state.attached and state.start in (START, None)
            assert state.unstopped <= state.kept and state.unstarted <= state.kept
            if state.unstopped:
                assert state.stop_deadline is not None
            if state.start_deadline is not None:
                assert state.unstarted
        for i, effect in enumerate(effects):
            if isinstance(effect, ag.StartWorkers) and not isinstance(event, ip.StartOrdered):
                assert i > 0 and isinstance(effects[i - 1], ag.StopWorkers)
            if isinstance(effect, ip.ResumeWorkers):
                assert effect.keep | effect.respawn == {0, 1, 2} and effect.start == START


def test_K4_a_raised_worker_restarts_in_process_through_the_node_step() -> None:
    """Rank 1 raised: the agent restarts in place (one unit), the node pauses instead of
    stopping, and starts the attempt once both kept workers stopped; nothing is respawned."""
    agent = ag.AgentConfig(
        max_restarts=3, min_nodes=1, max_nodes=1, local_world_size=2, restart_in_place=True
    )
    config = nd.NodeConfig(agent=agent, in_process=CONFIG)
    state = nd.initial_node_state(config)
    observations: list[object] = [
        ag.AgentStarted(now=0.0),
        ag.RoundCompleted(now=0.1, round=0, group_rank=0, group_world_size=1, restart_count=0),
        GroupStarted(now=0.2, pids=(10, 11)),
        ip.WorkerAttached(now=0.3, local_rank=0),
        ip.WorkerAttached(now=0.3, local_rank=1),
    ]
    for seen in observations:
        state = nd.node_step(state, seen, config).state
    raised = nd.node_step(state, nd.WorkerRaised(now=1.0, local_rank=1, reason="boom"), config)
    kinds = [type(e) for e in raised.effects]
    assert kinds == [ip.PauseWorkers, ag.OpenAttempt], raised.effects
    assert raised.effects[0] == ip.PauseWorkers(
        reason=raised.effects[0].reason, keep={0, 1}, respawn=set()
    )
    assert raised.state.agent.restart_count == 1 and raised.state.agent.attempt == 1
    state = raised.state
    # The open landed before the kept workers answered: the start is held until they did.
    landed = nd.node_step(state, ag.OwnAttemptOpened(now=1.05, round=0, attempt=1), config)
    assert landed.effects == ()
    state = nd.node_step(landed.state, ip.WorkerPaused(now=1.1, local_rank=0), config).state
    resumed = nd.node_step(state, ip.WorkerPaused(now=1.2, local_rank=1), config)
    (resume,) = resumed.effects
    assert isinstance(resume, ip.ResumeWorkers) and resume.keep == {0, 1} and not resume.respawn
    assert resume.start.attempt == 1 and resume.start.restart_count == 1
    assert resumed.state.agent == landed.state.agent  # the answers decide nothing of the agent
    state = nd.node_step(resumed.state, GroupStarted(now=1.3, pids=(10, 11)), config).state
    assert state.group is not None and state.group.restart_count == 1
    # The kept workers answer: the node is ready for the next restart.
    for lr in (0, 1):
        state = nd.node_step(state, ip.WorkerResumed(now=1.4, local_rank=lr), config).state
    assert state.restart.phase is ip.RestartPhase.READY and state.restart.attached == {0, 1}
