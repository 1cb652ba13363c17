"""The agent machine by example: every row of its table is used at least once here."""

from __future__ import annotations

import pytest
from attrs import evolve

from tpelastic.core import agent as ag
from tpelastic.core.agent import AgentPhase as P
from tpelastic.core.values import Emit, Rejected
from tpelastic.core.worker_group import WorkerFailure

CFG = ag.AgentConfig(max_restarts=2, min_nodes=1, max_nodes=3, local_world_size=2)
FRESH = ag.initial_state(CFG)
JOINING = evolve(FRESH, phase=P.RENDEZVOUS)
RUNNING = evolve(FRESH, phase=P.RUNNING, round=4, group_rank=1, group_world_size=2, restart_count=1)
LAST_TRY = evolve(RUNNING, restart_count=2)
FULL = evolve(RUNNING, group_world_size=3)
BARRIER_UNTIL = 306.0  # entered at 6.0, with the default 300 s timeout
BARRIER = evolve(RUNNING, phase=P.EXIT_BARRIER, barrier_until=BARRIER_UNTIL)
FENCED = evolve(RUNNING, phase=P.FENCED)
FAIL = WorkerFailure(local_rank=1, global_rank=3, exitcode=1, signal=None, at=7.0, reason="exit 1")


def round_(n: int = 5, rank: int = 0, size: int = 2, count: int = 1) -> ag.RoundCompleted:
    return ag.RoundCompleted(
        now=1.0, round=n, group_rank=rank, group_world_size=size, restart_count=count
    )


STUCK = ag.WorkerStuck(now=8.0, local_rank=0, idle_for=30.0)
CLOSED_OK = ag.RendezvousClosed(now=9.0, outcome="succeeded", reason="done")
CLOSED_BAD = ag.RendezvousClosed(now=9.0, outcome="failed", reason="node b: budget exhausted")
SIGTERM = ag.SignalReceived(now=9.0, signum=15)
J, JF = ag.JoinRendezvous(failure=False), ag.JoinRendezvous(failure=True)

# (name, state, event, expected phase, expected effect types, expected exit code)
EXAMPLES = [
    ("start", FRESH, ag.AgentStarted(now=0.0), P.RENDEZVOUS, [ag.JoinRendezvous], None),
    ("round", JOINING, round_(), P.RUNNING, [ag.StartWorkers], None),
    (
        "round over budget",
        JOINING,
        round_(count=3),
        P.FAILED,
        [ag.LeaveRendezvous, ag.ReportFailure],
        1,
    ),
    *(
        (
            f"round this agent cannot run: {why}",
            state,
            event,
            P.FAILED,
            [ag.LeaveRendezvous, ag.ReportFailure],
            3,
        )
        for why, state, event in (
            ("more nodes than max_nodes", JOINING, round_(size=4)),
            ("not newer", evolve(JOINING, round=5), round_(n=5)),
            ("rank outside the world", JOINING, round_(rank=2, size=2)),
        )
    ),
    (
        "rendezvous timeout",
        JOINING,
        ag.RendezvousFailed(now=1.0, reason="2 < min", kind="timeout"),
        P.FAILED,
        [ag.ReportFailure],
        3,
    ),
    (
        "store lost while running",
        RUNNING,
        ag.RendezvousFailed(now=1.0, reason="refused", kind="connection"),
        P.FAILED,
        [ag.StopWorkers, ag.ReportFailure],
        3,
    ),
    (
        "corrupt state while joining",
        JOINING,
        ag.RendezvousFailed(now=1.0, reason="corrupt rendezvous state at 'k'", kind="corrupt"),
        P.FAILED,
        [ag.CloseRendezvous, ag.ReportFailure],
        3,
    ),
    (
        "corrupt state while running",
        RUNNING,
        ag.RendezvousFailed(now=1.0, reason="corrupt rendezvous state at 'k'", kind="corrupt"),
        P.FAILED,
        [ag.StopWorkers, ag.CloseRendezvous, ag.ReportFailure],
        3,
    ),
    (
        "store lost at the barrier",
        BARRIER,
        ag.RendezvousFailed(now=1.0, reason="refused", kind="connection"),
        P.SUCCEEDED,
        [Emit],
        0,
    ),
    (
        "workers done",
        RUNNING,
        ag.WorkersSucceeded(now=5.0),
        P.EXIT_BARRIER,
        [ag.EnterExitBarrier],
        None,
    ),
    (
        "failure, budget left",
        RUNNING,
        ag.WorkersFailed(now=7.0, failures=(FAIL,)),
        P.RENDEZVOUS,
        [ag.StopWorkers, ag.JoinRendezvous],
        None,
    ),
    (
        "failure after the world ended: no unit",
        evolve(RUNNING, phase=P.RENDEZVOUS),
        ag.WorkersFailed(now=7.0, failures=(FAIL,)),
        P.RENDEZVOUS,
        [Emit],
        None,
    ),
    (
        "success after the world ended",
        evolve(RUNNING, phase=P.RENDEZVOUS),
        ag.WorkersSucceeded(now=7.0),
        P.RENDEZVOUS,
        [],
        None,
    ),
    (
        "failure, budget spent",
        LAST_TRY,
        ag.WorkersFailed(now=7.0, failures=(FAIL,)),
        P.FAILED,
        [ag.StopWorkers, ag.CloseRendezvous, ag.ReportFailure],
        1,
    ),
    ("hang, budget left", RUNNING, STUCK, P.RENDEZVOUS, [ag.StopWorkers, ag.JoinRendezvous], None),
    (
        "hang, budget spent",
        LAST_TRY,
        STUCK,
        P.FAILED,
        [ag.StopWorkers, ag.CloseRendezvous, ag.ReportFailure],
        1,
    ),
    (
        "scale up",
        RUNNING,
        ag.NodesWaiting(now=3.0, count=1),
        P.RENDEZVOUS,
        [ag.StopWorkers, ag.OpenNextRound, ag.JoinRendezvous],
        None,
    ),
    ("world full", FULL, ag.NodesWaiting(now=3.0, count=1), P.RUNNING, [], None),
    (
        "keep-alive lapsed: fenced",
        RUNNING,
        ag.KeepAliveLapsed(now=3.0, reason="paused"),
        P.FENCED,
        [ag.StopWorkers, Emit],
        None,
    ),
    (
        "fenced, a beat landed: re-joins",
        FENCED,
        ag.KeepAliveRestored(now=4.0),
        P.RENDEZVOUS,
        [ag.OpenNextRound, ag.JoinRendezvous],
        None,
    ),
    (
        "fenced past the join timeout",
        FENCED,
        ag.RendezvousFailed(now=30.0, reason="no heartbeat landed", kind="timeout"),
        P.FAILED,
        [ag.ReportFailure],
        3,
    ),
    (
        "corrupt state while fenced",
        FENCED,
        ag.RendezvousFailed(now=1.0, reason="corrupt rendezvous state at 'k'", kind="corrupt"),
        P.FAILED,
        [ag.CloseRendezvous, ag.ReportFailure],
        3,
    ),
    ("closed ok while fenced", FENCED, CLOSED_OK, P.SUCCEEDED, [], 0),
    ("closed failed while fenced", FENCED, CLOSED_BAD, P.FAILED, [ag.ReportFailure], 1),
    (
        "signal while fenced",
        FENCED,
        SIGTERM,
        P.FAILED,
        [ag.LeaveRendezvous, ag.ReportFailure],
        143,
    ),
    (
        "fenced out",
        RUNNING,
        ag.NextRoundOpened(now=3.0, round=5, reason="peer failed"),
        P.RENDEZVOUS,
        [ag.StopWorkers, ag.JoinRendezvous],
        None,
    ),
    (
        "peer failed after we finished",
        BARRIER,
        ag.NextRoundOpened(now=3.0, round=5, reason="peer failed"),
        P.RENDEZVOUS,
        [ag.JoinRendezvous],
        None,
    ),
    (
        "already joining",
        JOINING,
        ag.NextRoundOpened(now=3.0, round=5, reason="peer"),
        P.RENDEZVOUS,
        [],
        None,
    ),
    (
        "barrier passed",
        BARRIER,
        ag.ExitBarrierRead(now=6.0, arrived=BARRIER.group_world_size),
        P.SUCCEEDED,
        [ag.CloseRendezvous],
        0,
    ),
    (
        "barrier timed out",
        BARRIER,
        ag.ExitBarrierRead(now=BARRIER_UNTIL, arrived=BARRIER.group_world_size - 1),
        P.SUCCEEDED,
        [Emit, ag.LeaveRendezvous],
        0,
    ),
    (
        "barrier waits on",
        BARRIER,
        ag.ExitBarrierRead(now=BARRIER_UNTIL - 0.1, arrived=BARRIER.group_world_size - 1),
        P.EXIT_BARRIER,
        [],
        None,
    ),
    ("closed ok while joining", JOINING, CLOSED_OK, P.SUCCEEDED, [], 0),
    ("closed failed while joining", JOINING, CLOSED_BAD, P.FAILED, [ag.ReportFailure], 1),
    ("closed ok while running", RUNNING, CLOSED_OK, P.SUCCEEDED, [ag.StopWorkers], 0),
    (
        "closed failed while running",
        RUNNING,
        CLOSED_BAD,
        P.FAILED,
        [ag.StopWorkers, ag.ReportFailure],
        1,
    ),
    ("closed ok at the barrier", BARRIER, CLOSED_OK, P.SUCCEEDED, [], 0),
    ("closed failed at the barrier", BARRIER, CLOSED_BAD, P.FAILED, [ag.ReportFailure], 1),
    ("signal before start", FRESH, SIGTERM, P.FAILED, [ag.ReportFailure], 143),
    (
        "signal while joining",
        JOINING,
        SIGTERM,
        P.FAILED,
        [ag.LeaveRendezvous, ag.ReportFailure],
        143,
    ),
    (
        "signal while running",
        RUNNING,
        SIGTERM,
        P.FAILED,
        [ag.StopWorkers, ag.LeaveRendezvous, ag.ReportFailure],
        143,
    ),
    (
        "signal at the barrier",
        BARRIER,
        SIGTERM,
        P.FAILED,
        [ag.LeaveRendezvous, ag.ReportFailure],
        143,
    ),
]


# Restarting in place (the dynamic handler): a failure opens the round's next attempt, and a
# member that sees one opened restarts its workers for it.
IN_PLACE = evolve(CFG, restart_in_place=True)
AT_ATTEMPT_1 = evolve(RUNNING, attempt=1, restart_count=2)  # round 4's count is 1


def opened(round_no: int = 4, attempt: int = 1) -> ag.AttemptOpened:
    return ag.AttemptOpened(now=3.0, round=round_no, attempt=attempt, reason="exit 1")


def own_open(attempt: int = 1) -> ag.OwnAttemptOpened:
    return ag.OwnAttemptOpened(now=3.5, round=4, attempt=attempt)


IN_PLACE_EXAMPLES = [
    (
        "failure, in place",
        RUNNING,
        ag.WorkersFailed(now=7.0, failures=(FAIL,)),
        P.RUNNING,
        [ag.StopWorkers, ag.OpenAttempt],
        None,
    ),
    (
        "hang, in place",
        RUNNING,
        STUCK,
        P.RUNNING,
        [ag.StopWorkers, ag.OpenAttempt],
        None,
    ),
    (
        "failure in place, budget spent",
        LAST_TRY,
        ag.WorkersFailed(now=7.0, failures=(FAIL,)),
        P.FAILED,
        [ag.StopWorkers, ag.CloseRendezvous, ag.ReportFailure],
        1,
    ),
    ("follow an attempt", RUNNING, opened(), P.RUNNING, [ag.StopWorkers, ag.StartWorkers], None),
    (
        "follow an attempt from the barrier",
        BARRIER,
        opened(),
        P.RUNNING,
        [ag.StopWorkers, ag.StartWorkers],
        None,
    ),
    (
        "attempt over budget",
        AT_ATTEMPT_1,
        opened(attempt=3),
        P.FAILED,
        [ag.StopWorkers, ag.LeaveRendezvous, ag.ReportFailure],
        1,
    ),
    (
        "attempt over budget at the barrier",
        evolve(BARRIER, restart_count=2),
        opened(attempt=2),
        P.FAILED,
        [ag.LeaveRendezvous, ag.ReportFailure],
        1,
    ),
    ("attempt already running", AT_ATTEMPT_1, opened(attempt=1), P.RUNNING, [], None),
    ("attempt of another round", RUNNING, opened(round_no=3), P.RUNNING, [], None),
    ("attempt seen at the barrier, old", BARRIER, opened(round_no=5), P.EXIT_BARRIER, [], None),
    ("attempt seen while joining", JOINING, opened(), P.RENDEZVOUS, [], None),
    ("own open landed", AT_ATTEMPT_1, own_open(), P.RUNNING, [ag.StartWorkers], None),
    ("own open landed, a newer attempt runs", AT_ATTEMPT_1, own_open(2), P.RUNNING, [], None),
    ("own open landed while joining", JOINING, own_open(), P.RENDEZVOUS, [], None),
    ("own open landed while fenced", FENCED, own_open(), P.FENCED, [], None),
    ("own open landed at the barrier", BARRIER, own_open(), P.EXIT_BARRIER, [], None),
    (
        "own open landed while holding",
        evolve(AT_ATTEMPT_1, phase=P.HOLDING),
        own_open(),
        P.HOLDING,
        [],
        None,
    ),
]


# A failure with the budget spent in a world with peers is held for the collateral window: a
# peer's loss reported meanwhile makes it a membership change (specs/agent.md, A13).
HOLD = evolve(IN_PLACE, collateral_window=1.2)
HELD = evolve(LAST_TRY, phase=P.HOLDING, held_until=8.2, last_failure="worker local rank 1")
HOLD_EXAMPLES = [
    (
        "failure, budget spent, peers: held",
        LAST_TRY,
        ag.WorkersFailed(now=7.0, failures=(FAIL,)),
        P.HOLDING,
        [ag.StopWorkers, Emit],
        None,
    ),
    ("hang, budget spent, peers: held", LAST_TRY, STUCK, P.HOLDING, [ag.StopWorkers, Emit], None),
    (
        "failure, budget spent, alone: fails",
        evolve(LAST_TRY, group_world_size=1, group_rank=0),
        ag.WorkersFailed(now=7.0, failures=(FAIL,)),
        P.FAILED,
        [ag.StopWorkers, ag.CloseRendezvous, ag.ReportFailure],
        1,
    ),
    (
        "held, a peer was lost: re-joins",
        HELD,
        ag.NextRoundOpened(now=8.0, round=5, reason="membership"),
        P.RENDEZVOUS,
        [ag.JoinRendezvous],
        None,
    ),
    ("held, window open", HELD, ag.TimePassed(now=8.0), P.HOLDING, [], None),
    (
        "held, window over: fails",
        HELD,
        ag.TimePassed(now=8.2),
        P.FAILED,
        [ag.CloseRendezvous, ag.ReportFailure],
        1,
    ),
    ("held, an attempt seen", HELD, opened(attempt=1), P.HOLDING, [], None),
    ("held, closed", HELD, CLOSED_BAD, P.FAILED, [ag.ReportFailure], 1),
    ("held, closed ok", HELD, CLOSED_OK, P.SUCCEEDED, [], 0),
    ("held, signal", HELD, SIGTERM, P.FAILED, [ag.LeaveRendezvous, ag.ReportFailure], 143),
    (
        "held, corrupt state",
        HELD,
        ag.RendezvousFailed(now=8.0, reason="corrupt rendezvous state at 'k'", kind="corrupt"),
        P.FAILED,
        [ag.CloseRendezvous, ag.ReportFailure],
        3,
    ),
    (
        "held, store lost",
        HELD,
        ag.RendezvousFailed(now=8.0, reason="refused", kind="connection"),
        P.FAILED,
        [ag.ReportFailure],
        3,
    ),
]


# Every example with the config it runs under: (config, name, state, event, expected phase,
# expected effect types, expected exit code).
ALL_EXAMPLES = [
    *((CFG, *e) for e in EXAMPLES),
    *((IN_PLACE, *e) for e in IN_PLACE_EXAMPLES),
    *((HOLD, *e) for e in HOLD_EXAMPLES),
]


@pytest.mark.parametrize(
    ("config", "name", "state", "event", "phase", "effects", "exit_code"),
    ALL_EXAMPLES,
    ids=[
        f"{'in place: ' if c is IN_PLACE else 'hold: ' if c is HOLD else ''}{e[0]}"
        for c, *e in ALL_EXAMPLES
    ],
)
def test_example(
    config: ag.AgentConfig,
    name: str,
    state: ag.AgentState,
    event: ag.AgentEventT,
    phase: P,
    effects: list[type],
    exit_code: int | None,
) -> None:
    result = ag.step(state, event, config)
    assert result.state.phase is phase
    assert [type(e) for e in result.effects] == effects
    assert result.state.exit_code == exit_code


def test_every_row_has_an_example() -> None:
    used = {ag.TABLE.select(state, event, config) for config, _, state, event, *_ in ALL_EXAMPLES}
    assert used == set(ag.TABLE.rows)


def test_a_failure_in_place_opens_the_next_attempt_and_spends_one_unit() -> None:
    result = ag.step(RUNNING, ag.WorkersFailed(now=7.0, failures=(FAIL,)), IN_PLACE)
    reason = "worker local rank 1 failed: exit 1"
    assert result.effects == (
        ag.StopWorkers(reason=reason),
        ag.OpenAttempt(round=4, attempt=1, reason=reason),
    )
    assert (result.state.attempt, result.state.restart_count) == (1, 2)
    assert result.state.last_failure == reason
    # The workers start once the open landed (the membership machine checked the keep-alive).
    landed = ag.step(result.state, ag.OwnAttemptOpened(now=9.0, round=4, attempt=1), IN_PLACE)
    assert landed.effects == (
        ag.StartWorkers(
            round=4,
            group_rank=1,
            group_world_size=2,
            restart_count=2,
            local_world_size=2,
            attempt=1,
        ),
    )
    assert landed.state == result.state


def test_a_followed_attempt_counts_from_the_round_even_after_a_missed_one() -> None:
    # Round 4 started with count 1; this node runs attempt 1 (count 2) and sees attempt 3
    # opened (it missed 2): the count is the round's plus 3 on every node.
    cfg = evolve(IN_PLACE, max_restarts=5)
    result = ag.step(AT_ATTEMPT_1, opened(attempt=3), cfg)
    start = result.effects[-1]
    assert isinstance(start, ag.StartWorkers)
    assert (start.round, start.attempt, start.restart_count) == (4, 3, 4)
    assert (result.state.attempt, result.state.restart_count) == (3, 4)


def test_a_new_round_resets_the_attempt() -> None:
    result = ag.step(evolve(JOINING, round=4, attempt=2, restart_count=2), round_(count=2), CFG)
    assert result.state.attempt == 0
    assert result.effects[0].attempt == 0  # type: ignore[attr-defined]


def test_round_facts_reach_start_workers() -> None:
    result = ag.step(JOINING, round_(n=0, rank=1, size=3, count=0), CFG)
    assert result.effects == (
        ag.StartWorkers(
            round=0, group_rank=1, group_world_size=3, restart_count=0, local_world_size=2
        ),
    )
    assert (result.state.round, result.state.group_rank, result.state.group_world_size) == (0, 1, 3)


def test_failure_reports_name_the_root_cause() -> None:
    later = evolve(FAIL, local_rank=0, global_rank=2, at=9.0)
    result = ag.step(LAST_TRY, ag.WorkersFailed(now=9.0, failures=(FAIL, later)), CFG)
    stop, close, report = result.effects
    assert close == ag.CloseRendezvous(outcome="failed", reason="workers failed, budget exhausted")
    assert isinstance(report, ag.ReportFailure) and report.failures == (FAIL, later)
    assert report.reason == "worker local rank 1 failed: exit 1 (+1 more)"
    assert result.state.last_failure == report.reason
    hang = ag.step(RUNNING, STUCK, CFG)
    assert hang.effects[1] == JF
    assert (
        hang.state.last_failure
        == "worker local rank 0 failed: local rank 0 made no progress for 30s"
    )


def test_scale_up_opens_the_round_after_ours() -> None:
    result = ag.step(RUNNING, ag.NodesWaiting(now=1.0, count=2), CFG)
    assert result.effects[1] == ag.OpenNextRound(reason="scale_up", after_round=4)
    assert result.effects[2] == J


def test_a_round_counting_fewer_restarts_than_the_node_keeps_the_nodes_count() -> None:
    """The node opened an attempt in a round its peers had left: no round counts it, and the
    node, rejecting every later round, would wait for ever. It trains, its count unchanged."""
    result = ag.step(evolve(JOINING, restart_count=2), round_(count=1), CFG)
    assert result.state.phase is P.RUNNING and result.state.restart_count == 2
    (start,) = result.effects
    assert isinstance(start, ag.StartWorkers) and start.restart_count == 2


def test_a_round_the_agent_cannot_run_says_why() -> None:
    result = ag.step(JOINING, round_(n=6, size=4), CFG)
    (leave, report) = result.effects
    assert isinstance(report, ag.ReportFailure) and report.exit_code == 3
    assert report.reason.endswith("its 4 node(s) are outside this agent's --nnodes 1:3")
    assert result.state.last_failure == report.reason


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (RUNNING, ag.NextRoundOpened(now=1.0, round=4, reason="old news")),
        (RUNNING, ag.WorkerStuck(now=1.0, local_rank=2, idle_for=1.0)),  # no such local rank
        (RUNNING, ag.AgentStarted(now=1.0)),
        (evolve(RUNNING, phase=P.SUCCEEDED, exit_code=0), SIGTERM),
    ],
)
def test_rejections_are_clean(state: ag.AgentState, event: ag.AgentEventT) -> None:
    result = ag.step(state, event, CFG)
    assert result.state == state
    assert len(result.effects) == 1 and isinstance(result.effects[0], Rejected)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: ag.AgentConfig(max_restarts=0, min_nodes=3, max_nodes=2),
            "max_nodes must be >= min_nodes=3",
        ),
        (lambda: ag.AgentConfig(max_restarts=-1, min_nodes=1, max_nodes=1), "max_restarts"),
        (lambda: ag.SignalReceived(now=0.0, signum=0), "signum"),
        (lambda: ag.WorkersFailed(now=0.0, failures=()), "failures"),
        (lambda: ag.RendezvousClosed(now=0.0, outcome="maybe"), "outcome"),  # type: ignore[arg-type]
        (lambda: ag.AttemptOpened(now=0.0, round=1, attempt=0, reason=""), "attempt"),
    ],
)
def test_bad_values_name_the_field(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    "state", [JOINING, RUNNING, HELD, FENCED], ids=["joining", "running", "held", "fenced"]
)
def test_A14_corrupt_state_closes_the_run_for_every_node(state: ag.AgentState) -> None:
    why = "joining run 'r' as 'n': corrupt rendezvous state at 'tpelastic/v1/r/closed': garbage"
    step = ag.step(state, ag.RendezvousFailed(now=9.0, reason=why, kind="corrupt"), CFG)
    closes = [e for e in step.effects if isinstance(e, ag.CloseRendezvous)]
    assert closes == [ag.CloseRendezvous(outcome="failed", reason=why)]
    kinds = [type(e) for e in step.effects]
    assert kinds.index(ag.CloseRendezvous) < kinds.index(ag.ReportFailure)
    assert step.state.exit_code == ag.EXIT_RENDEZVOUS_FAILED
    # Any other rendezvous failure is this node's alone: the run stays open for the others.
    for kind in ("timeout", "connection", "closed"):
        other = ag.step(state, ag.RendezvousFailed(now=9.0, reason="x", kind=kind), CFG)
        assert not any(isinstance(e, ag.CloseRendezvous) for e in other.effects), kind


def test_A16_restarting_in_place_never_rejoins_reporting_a_failure() -> None:
    failures = (ag.WorkersFailed(now=7.0, failures=(FAIL,)), STUCK)
    states = (RUNNING, evolve(RUNNING, attempt=1, restart_count=2), LAST_TRY, FULL, BARRIER, HELD)
    for config in (IN_PLACE, HOLD):
        for state in states:
            for event in (*failures, opened(attempt=state.attempt + 1), ag.TimePassed(now=9.0)):
                done = ag.step(state, event, config)
                assert JF not in done.effects, (state.phase, event)
                opens = [e for e in done.effects if isinstance(e, ag.OpenAttempt)]
                if opens:  # the attempt after a failure is this node's next, as its start
                    assert [(o.round, o.attempt) for o in opens] == [(4, state.attempt + 1)]
                    landed = ag.OwnAttemptOpened(now=7.5, round=4, attempt=state.attempt + 1)
                    starts = ag.step(done.state, landed, config).effects
                    assert [s.attempt for s in starts] == [state.attempt + 1]  # type: ignore[attr-defined]
