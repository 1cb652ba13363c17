"""Every decision of the agent (one node, one role) is in this file's table.

The run loop only observes (rendezvous results, worker exits, nodes waiting, signals, timers) and
carries out the effects a step returns, in order; it decides nothing. Guards are in guards.py and
actions in actions.py, all pure. Rules the rows keep:

* StopWorkers always comes before JoinRendezvous, OpenNextRound, OpenAttempt or StartWorkers in
  one step: a node fences its own workers before it takes part in a new world or starts a new
  attempt. Every step that leaves RUNNING stops workers.
* A worker failure (or hang) with budget left spends one unit job-wide. Where the rendezvous can
  restart a round in place (``restart_in_place``), the node opens the round's next attempt and
  starts its workers again for it once the open landed with its keep-alive held
  (``OwnAttemptOpened``); every other member follows on seeing the attempt opened (its
  restart count is the round's plus the attempt on every node). Otherwise the node re-joins
  reporting the failure and the next round's closer spends the unit. With no budget left the job
  fails and the rendezvous is closed for everyone.
* A membership change (nodes waiting, a peer opening the next round) re-joins without a report,
  so it spends nothing. A worker failure with the budget spent in a world with peers is held
  (workers stopped) for the collateral window: a peer's loss reported meanwhile makes it a
  membership change; otherwise the job fails. With budget left it restarts at once, and a
  peer's loss within the window of an in-place attempt's start refunds that attempt: the
  re-join reports it as not spent (``charged_attempt``).
* A lapsed keep-alive fences the node (stop its workers, end the world); it re-joins once a
  heartbeat lands again: fencing is not failing, and it spends no budget.
* A signal leaves the rendezvous gracefully and never closes it for the others.
"""

from __future__ import annotations

from tpelastic.core.agent import actions as act
from tpelastic.core.agent import events as ev
from tpelastic.core.agent import guards as gd
from tpelastic.core.agent.states import AgentConfig, AgentPhase, AgentState
from tpelastic.core.table import Action, Guard, Row, Step, build_table

A = AgentPhase
# Rows are grouped by event, then by source phase: the order the exported table shows them in.
_JOINED = (A.RENDEZVOUS, A.RUNNING, A.HOLDING, A.EXIT_BARRIER, A.FENCED)
_NEVER = "cannot happen while every node follows this table; fail rather than overspend"
ROWS = (
    Row(src=A.INIT, on=ev.AgentStarted, dst=A.RENDEZVOUS, action="join_fresh"),
    Row(
        src=A.RENDEZVOUS,
        on=ev.RoundCompleted,
        dst=A.RUNNING,
        guard="round_fits",
        action="start_workers",
    ),
    Row(
        src=A.RENDEZVOUS,
        on=ev.RoundCompleted,
        dst=A.FAILED,
        guard="round_over_budget",
        action="fail_over_budget",
        note=_NEVER,
    ),
    Row(
        src=A.RENDEZVOUS,
        on=ev.RoundCompleted,
        dst=A.FAILED,
        guard="round_misfits",
        action="fail_misfit_round",
        note="not newer, a rank outside it, or a size outside min..max: no other round comes",
    ),
    *(
        row
        for src in (A.RENDEZVOUS, A.RUNNING, A.HOLDING, A.FENCED)
        for row in (
            Row(
                src=src,
                on=ev.RendezvousFailed,
                dst=A.FAILED,
                guard="state_corrupt",
                action="fail_corrupt_state",
                note="corrupt shared state ends the job for every node, not this one only",
            ),
            Row(src=src, on=ev.RendezvousFailed, dst=A.FAILED, action="fail_rendezvous"),
        )
    ),
    Row(
        src=A.EXIT_BARRIER,
        on=ev.RendezvousFailed,
        dst=A.SUCCEEDED,
        action="succeed_despite_rendezvous",
        note="local workers did succeed; warn",
    ),
    Row(src=A.RUNNING, on=ev.WorkersSucceeded, dst=A.EXIT_BARRIER, action="enter_exit_barrier"),
    Row(
        src=A.RENDEZVOUS,
        on=ev.WorkersFailed,
        dst=A.RENDEZVOUS,
        action="failure_after_world",
        note="the world ended first (the driver steps a fresh look before a failure): "
        "the failure goes with it, no budget unit",
    ),
    Row(
        src=A.RENDEZVOUS,
        on=ev.WorkersSucceeded,
        dst=A.RENDEZVOUS,
        note="the world ended first: the next round runs the workers again",
    ),
    *(
        row
        for on in (ev.WorkersFailed, ev.WorkerStuck)
        for row in (
            Row(
                src=A.RUNNING,
                on=on,
                dst=A.RUNNING,
                guard="budget_left_in_place",
                action="restart_in_place",
                note="opens the round's next attempt: one unit job-wide, every member follows",
            ),
            Row(
                src=A.RUNNING,
                on=on,
                dst=A.RENDEZVOUS,
                guard="budget_left",
                action="restart_after_failure",
                note="the next round spends one unit job-wide",
            ),
            Row(src=A.RUNNING, on=on, dst=A.FAILED, guard="budget_spent", action="fail_job"),
            Row(
                src=A.RUNNING,
                on=on,
                dst=A.HOLDING,
                guard="budget_spent_peers_left",
                action="hold_failure",
                note="a peer's loss within the collateral window would make it a membership change",
            ),
        )
    ),
    Row(
        src=A.RUNNING,
        on=ev.NodesWaiting,
        dst=A.RENDEZVOUS,
        guard="room_for_waiting",
        action="scale_up",
        note="membership change: no budget spent",
    ),
    Row(
        src=A.RUNNING,
        on=ev.NodesWaiting,
        dst=A.RUNNING,
        guard="no_room_for_waiting",
        note="nothing to do: nobody waits, or the world is full",
    ),
    Row(
        src=A.RUNNING, on=ev.NextRoundOpened, dst=A.RENDEZVOUS, guard="newer_round", action="rejoin"
    ),
    Row(
        src=A.EXIT_BARRIER,
        on=ev.NextRoundOpened,
        dst=A.RENDEZVOUS,
        guard="newer_round",
        action="rejoin",
        note="a peer failed after we finished: rejoin",
    ),
    Row(
        src=A.HOLDING,
        on=ev.NextRoundOpened,
        dst=A.RENDEZVOUS,
        guard="newer_round",
        action="rejoin",
        note="a peer was lost: the held failure was collateral, a membership change (no budget)",
    ),
    Row(
        src=A.HOLDING,
        on=ev.TimePassed,
        dst=A.FAILED,
        guard="hold_over",
        action="fail_held",
        note="no peer lost within the window: the failure was the job's own",
    ),
    Row(src=A.HOLDING, on=ev.TimePassed, dst=A.HOLDING, guard="hold_on", note="keep holding"),
    Row(
        src=A.HOLDING,
        on=ev.AttemptOpened,
        dst=A.HOLDING,
        note="no attempt fits a spent budget; the hold decides",
    ),
    Row(
        src=A.RENDEZVOUS,
        on=ev.NextRoundOpened,
        dst=A.RENDEZVOUS,
        note="already joining: the rendezvous follows the newest round",
    ),
    *(
        row
        for src in (A.RUNNING, A.EXIT_BARRIER)
        for row in (
            Row(
                src=src,
                on=ev.AttemptOpened,
                dst=A.RUNNING,
                guard="attempt_fits",
                action="follow_attempt",
                note="a member restarted the round in place: restart with it",
            ),
            Row(
                src=src,
                on=ev.AttemptOpened,
                dst=A.FAILED,
                guard="attempt_over_budget",
                action="fail_attempt_over_budget",
                note=_NEVER,
            ),
            Row(
                src=src,
                on=ev.AttemptOpened,
                dst=src,
                note="another round's attempt, or one this node already runs: nothing to do",
            ),
        )
    ),
    Row(
        src=A.RENDEZVOUS,
        on=ev.AttemptOpened,
        dst=A.RENDEZVOUS,
        note="already joining: the next round carries the attempts into its restart count",
    ),
    Row(
        src=A.RUNNING,
        on=ev.OwnAttemptOpened,
        dst=A.RUNNING,
        guard="own_attempt_current",
        action="start_own_attempt",
        note="this node's open landed with its keep-alive held: start the attempt's workers",
    ),
    *(
        Row(
            src=src,
            on=ev.OwnAttemptOpened,
            dst=src,
            note="the node moved on while its open waited (a newer attempt, a round, a fence)",
        )
        for src in (A.RUNNING, A.RENDEZVOUS, A.HOLDING, A.EXIT_BARRIER, A.FENCED)
    ),
    Row(
        src=A.RUNNING,
        on=ev.KeepAliveLapsed,
        dst=A.FENCED,
        action="fence",
        note="fencing is not failing: stop the workers, end the world (no budget)",
    ),
    Row(
        src=A.FENCED,
        on=ev.KeepAliveRestored,
        dst=A.RENDEZVOUS,
        action="rejoin_after_fence",
        note="a heartbeat landed again: open the next round and re-join",
    ),
    Row(
        src=A.EXIT_BARRIER,
        on=ev.ExitBarrierRead,
        dst=A.SUCCEEDED,
        guard="all_arrived",
        action="close_succeeded",
    ),
    Row(
        src=A.EXIT_BARRIER,
        on=ev.ExitBarrierRead,
        dst=A.SUCCEEDED,
        guard="barrier_over",
        action="succeed_unconfirmed",
        note="local workers did succeed; warn and leave without closing",
    ),
    Row(
        src=A.EXIT_BARRIER,
        on=ev.ExitBarrierRead,
        dst=A.EXIT_BARRIER,
        guard="barrier_on",
        note="wait on: the driver reads the barrier again",
    ),
    *(
        Row(src=src, on=ev.RendezvousClosed, dst=dst, guard=guard, action="follow_close")
        for src in _JOINED
        for dst, guard in ((A.SUCCEEDED, "closed_succeeded"), (A.FAILED, "closed_failed"))
    ),
    *(
        Row(src=src, on=ev.SignalReceived, dst=A.FAILED, action="interrupted")
        for src in (A.INIT, *_JOINED)
    ),
)

GUARDS: dict[str, Guard] = {
    "round_fits": gd.round_fits,
    "round_over_budget": gd.round_over_budget,
    "round_misfits": gd.round_misfits,
    "budget_left": gd.budget_left,
    "budget_left_in_place": gd.budget_left_in_place,
    "budget_spent": gd.budget_spent,
    "budget_spent_peers_left": gd.budget_spent_peers_left,
    "hold_over": gd.hold_over,
    "hold_on": gd.hold_on,
    "all_arrived": gd.all_arrived,
    "barrier_over": gd.barrier_over,
    "barrier_on": gd.barrier_on,
    "room_for_waiting": gd.room_for_waiting,
    "no_room_for_waiting": gd.no_room_for_waiting,
    "newer_round": gd.newer_round,
    "attempt_fits": gd.attempt_fits,
    "own_attempt_current": gd.own_attempt_current,
    "attempt_over_budget": gd.attempt_over_budget,
    "closed_succeeded": gd.closed_succeeded,
    "closed_failed": gd.closed_failed,
    "state_corrupt": gd.state_corrupt,
}
ACTIONS: dict[str, Action] = {
    "join_fresh": act.join_fresh,
    "start_workers": act.start_workers,
    "fail_over_budget": act.fail_over_budget,
    "fail_misfit_round": act.fail_misfit_round,
    "fail_rendezvous": act.fail_rendezvous,
    "fail_corrupt_state": act.fail_corrupt_state,
    "succeed_despite_rendezvous": act.succeed_despite_rendezvous,
    "enter_exit_barrier": act.enter_exit_barrier,
    "failure_after_world": act.failure_after_world,
    "restart_after_failure": act.restart_after_failure,
    "restart_in_place": act.restart_in_place,
    "follow_attempt": act.follow_attempt,
    "start_own_attempt": act.start_own_attempt,
    "fail_attempt_over_budget": act.fail_attempt_over_budget,
    "fail_job": act.fail_job,
    "hold_failure": act.hold_failure,
    "fail_held": act.fail_held,
    "scale_up": act.scale_up,
    "rejoin": act.rejoin,
    "fence": act.fence,
    "rejoin_after_fence": act.rejoin_after_fence,
    "close_succeeded": act.close_succeeded,
    "succeed_unconfirmed": act.succeed_unconfirmed,
    "follow_close": act.follow_close,
    "interrupted": act.interrupted,
}

TABLE = build_table(
    name="agent",
    phases=AgentPhase,
    initial=A.INIT,
    events=ev.AGENT_EVENTS,
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    terminal=frozenset({A.SUCCEEDED, A.FAILED}),
    doc=(
        "Every decision of the agent (one node, one role) is in this table; guards and actions "
        "live in `tpelastic/core/agent/guards.py` and `actions.py`. The run loop only observes "
        "and carries out the effects, in order. StopWorkers always comes before JoinRendezvous, "
        "OpenNextRound, OpenAttempt or StartWorkers in one step: a node fences its own workers "
        "before it takes part in a new world or starts a new attempt. A worker failure or hang "
        "while `restart_count < max_restarts` spends one unit job-wide: with "
        "`restart_in_place` the node opens the round's next attempt, starts its workers for it "
        "once the open landed with its keep-alive held (`OwnAttemptOpened`), and every member "
        "restarts its workers for it (restart count: the round's plus the attempt), otherwise "
        "it re-joins "
        "reporting the failure and the next round spends the unit. Without budget it "
        "fails the job and closes the rendezvous, but in a world with peers it first holds "
        "the failure (HOLDING, workers stopped) for the collateral window: a peer lost "
        "meanwhile makes it a membership change. With budget left the restart is not "
        "delayed; a peer's loss (`NextRoundOpened`, reason `membership`) within the "
        "collateral window of an in-place attempt's start refunds it: the re-join reports "
        "it as not spent (`JoinRendezvous.charged_attempt`). A membership change re-joins "
        "without spending; a worker exit seen after the world ended (the driver steps a fresh "
        "look before every failure; the agent is already re-joining) spends nothing; a lapsed "
        "keep-alive fences the node's workers (FENCED, no budget) and it re-joins once a "
        "heartbeat lands again; a signal leaves gracefully and never closes the rendezvous. "
        "At the exit barrier "
        "the driver reports how many nodes arrived (`ExitBarrierRead`): all of the round closes "
        "the rendezvous as succeeded; short of that past `exit_barrier_timeout` the node "
        "succeeds with a warning and leaves without closing. Exit codes: 0 "
        "succeeded, 1 workers failed with no budget left (or the job failed elsewhere), 3 "
        "rendezvous failed, 128+signum interrupted by that signal."
    ),
)


def step(state: AgentState, event: ev.AgentEventT, config: AgentConfig) -> Step[AgentState]:
    """Decide what the agent does after one observation.

    Returns:
        The next state and the effects to carry out, in order. An observation with no row (or
        whose guards all fail) leaves ``state`` unchanged and returns one ``Rejected`` effect.
    """
    return TABLE.step(state, event, config)
