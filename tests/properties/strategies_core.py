"""Hypothesis strategies for the worker, worker_group and agent machines.

States come in two kinds: *constructed* (any values the classes' validators accept) and
*reachable* (a fresh value driven by random events). Event strategies build every event type.
"""

from __future__ import annotations

from attrs import evolve
from hypothesis import strategies as st

from tpelastic.core import agent as ag
from tpelastic.core import worker as w
from tpelastic.core import worker_group as wg

instants = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
signal_names = st.sampled_from([None, "SIGKILL", "SIGTERM", "SIGSEGV"])

# -- worker --------------------------------------------------------------------------------------

worker_events: st.SearchStrategy[w.WorkerEventT] = st.one_of(
    st.builds(w.WorkerStarted, now=instants, pid=st.integers(1, 1 << 22)),
    st.builds(
        w.WorkerExited,
        now=instants,
        exitcode=st.sampled_from([0, 0, 1, 2, -9, 137]),
        signal=signal_names,
    ),
    st.builds(w.ProgressStalled, now=instants),
    st.builds(w.ProgressResumed, now=instants),
    st.builds(w.WorkerStopped, now=instants),
    st.builds(w.WorkerLost, now=instants),
)


@st.composite
def fresh_workers(draw: st.DrawFn, local_rank: int | None = None) -> w.Worker:
    world = draw(st.integers(1, 8))
    rank = draw(st.integers(0, world - 1))
    return w.Worker(
        local_rank=draw(st.integers(0, 7)) if local_rank is None else local_rank,
        global_rank=rank,
        role_rank=rank,
        world_size=world,
        role_world_size=world,
    )


@st.composite
def constructed_workers(draw: st.DrawFn) -> w.Worker:
    base = draw(fresh_workers())
    return evolve(
        base,
        phase=draw(st.sampled_from(list(w.WorkerState))),
        pid=draw(st.none() | st.integers(1, 1 << 22)),
        exitcode=draw(st.none() | st.integers(-15, 255)),
        signal=draw(signal_names),
        stalled_since=draw(st.none() | instants),
        ended_at=draw(st.none() | instants),
    )


@st.composite
def reachable_workers(draw: st.DrawFn) -> w.Worker:
    state = draw(fresh_workers())
    for event in draw(st.lists(worker_events, max_size=8)):
        state = w.step(state, event).state
    return state


any_worker = st.one_of(constructed_workers(), reachable_workers())

# -- worker group --------------------------------------------------------------------------------


def group_events(local_world_size: int) -> st.SearchStrategy[wg.GroupEventT]:
    ranks = st.integers(0, local_world_size)  # one past the end: an unknown rank
    return st.one_of(
        st.builds(wg.WorkerEvent, local_rank=ranks, event=worker_events),
        st.builds(wg.WorkerEvent, local_rank=ranks, event=worker_events),
        st.builds(
            wg.GroupStarted,
            now=instants,
            pids=st.lists(
                st.integers(-1, 1 << 22), min_size=local_world_size, max_size=local_world_size
            ).map(tuple)
            | st.lists(st.integers(1, 99), max_size=4).map(tuple),
        ),
        st.builds(wg.GroupStopped, now=instants, reason=st.sampled_from(["restart", "scale_up"])),
    )


@st.composite
def fresh_groups(draw: st.DrawFn) -> wg.WorkerGroup:
    nodes = draw(st.integers(1, 3))
    return wg.make_group(
        role="trainer",
        local_world_size=draw(st.integers(1, 3)),
        round=draw(st.integers(0, 5)),
        restart_count=draw(st.integers(0, 3)),
        group_rank=draw(st.integers(0, nodes - 1)),
        group_world_size=nodes,
    )


@st.composite
def reachable_groups(draw: st.DrawFn) -> wg.WorkerGroup:
    group = draw(fresh_groups())
    if draw(st.booleans()):
        group = wg.step(
            group, wg.GroupStarted(now=0.0, pids=tuple(range(100, 100 + group.local_world_size)))
        ).state
    for event in draw(st.lists(group_events(group.local_world_size), max_size=12)):
        group = wg.step(group, event).state
    return group


@st.composite
def constructed_groups(draw: st.DrawFn) -> wg.WorkerGroup:
    group = draw(fresh_groups())
    workers = tuple(
        evolve(
            x, phase=draw(st.sampled_from(list(w.WorkerState))), ended_at=draw(st.none() | instants)
        )
        for x in group.workers
    )
    return evolve(group, workers=workers, phase=wg.fold_phase(workers))


any_group = st.one_of(reachable_groups(), constructed_groups())

# -- agent ---------------------------------------------------------------------------------------


@st.composite
def agent_configs(draw: st.DrawFn) -> ag.AgentConfig:
    low = draw(st.integers(1, 3))
    return ag.AgentConfig(
        max_restarts=draw(st.integers(0, 3)),
        min_nodes=low,
        max_nodes=draw(st.integers(low, 4)),
        local_world_size=draw(st.integers(1, 3)),
        restart_in_place=draw(st.booleans()),
    )


agent_states = st.builds(
    ag.AgentState,
    phase=st.sampled_from(list(ag.AgentPhase)),
    round=st.integers(-1, 6),
    group_rank=st.integers(-1, 3),
    group_world_size=st.integers(0, 4),
    restart_count=st.integers(0, 4),
    attempt=st.integers(0, 3),
    local_world_size=st.integers(1, 3),
    last_failure=st.none() | st.just("earlier failure"),
    exit_code=st.none() | st.sampled_from([0, 1, 3, 143]),
)

failures = st.lists(
    st.builds(
        wg.WorkerFailure,
        local_rank=st.integers(0, 3),
        global_rank=st.integers(0, 11),
        exitcode=st.none() | st.integers(-9, 3),
        signal=signal_names,
        at=instants,
        reason=st.just("exitcode 1"),
    ),
    min_size=1,
    max_size=3,
).map(tuple)

agent_events: st.SearchStrategy[ag.AgentEventT] = st.one_of(
    st.builds(ag.AgentStarted, now=instants),
    st.builds(
        ag.RoundCompleted,
        now=instants,
        round=st.integers(0, 7),
        group_rank=st.integers(0, 4),
        group_world_size=st.integers(1, 5),
        restart_count=st.integers(0, 5),
    ),
    st.builds(
        ag.RendezvousFailed,
        now=instants,
        reason=st.just("no quorum"),
        kind=st.sampled_from(["timeout", "closed", "connection"]),
    ),
    st.builds(ag.WorkersSucceeded, now=instants),
    st.builds(ag.WorkersFailed, now=instants, failures=failures),
    st.builds(
        ag.WorkerStuck,
        now=instants,
        local_rank=st.integers(0, 3),
        idle_for=st.floats(0.1, 600),
    ),
    st.builds(ag.NodesWaiting, now=instants, count=st.integers(0, 3)),
    st.builds(ag.NextRoundOpened, now=instants, round=st.integers(0, 7), reason=st.just("peer")),
    st.builds(
        ag.AttemptOpened,
        now=instants,
        round=st.integers(0, 7),
        attempt=st.integers(1, 4),
        reason=st.just("peer failed"),
    ),
    st.builds(ag.KeepAliveLapsed, now=instants, reason=st.just("paused")),
    st.builds(ag.KeepAliveRestored, now=instants),
    st.builds(ag.TimePassed, now=instants),
    st.builds(ag.ExitBarrierRead, now=instants, arrived=st.integers(0, 4)),
    st.builds(
        ag.RendezvousClosed,
        now=instants,
        outcome=st.sampled_from(["succeeded", "failed"]),
        reason=st.just("done"),
    ),
    st.builds(ag.SignalReceived, now=instants, signum=st.sampled_from([1, 2, 9, 15])),
)
