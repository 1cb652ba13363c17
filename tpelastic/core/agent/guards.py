"""The agent's guards: pure questions about (state, observation, config), one line of prose each."""

from __future__ import annotations

from tpelastic.core.agent import events as ev
from tpelastic.core.agent.states import AgentConfig, AgentState
from tpelastic.core.restart_budget import attempt_count, can_restart, within_budget

FailureEvent = ev.WorkersFailed | ev.WorkerStuck


def _round_shape_ok(state: AgentState, event: ev.RoundCompleted, config: AgentConfig) -> bool:
    return (
        event.round > state.round
        and event.group_rank < event.group_world_size
        and config.min_nodes <= event.group_world_size <= config.max_nodes
    )


def round_fits(state: AgentState, event: ev.RoundCompleted, config: AgentConfig) -> bool:
    """Is the round newer, well formed, and within the restart budget? A round may count fewer
    restarts than this node did: an attempt it opened in a round its peers had already left is
    in no round's count (the node keeps its own, higher count: it never decreases)."""
    in_budget = within_budget(event.restart_count, config.max_restarts)
    return _round_shape_ok(state, event, config) and in_budget


def round_over_budget(state: AgentState, event: ev.RoundCompleted, config: AgentConfig) -> bool:
    """Is the round newer and well formed but its restart count past max_restarts?"""
    over = not within_budget(event.restart_count, config.max_restarts)
    return _round_shape_ok(state, event, config) and over


def round_misfits(state: AgentState, event: ev.RoundCompleted, config: AgentConfig) -> bool:
    """Is the round not newer than ours, its rank outside its world, or its size outside
    min_nodes..max_nodes (no row can run it, and no other round is coming)?"""
    return not _round_shape_ok(state, event, config)


def _rank_known(state: AgentState, event: FailureEvent) -> bool:
    return not isinstance(event, ev.WorkerStuck) or event.local_rank < state.local_world_size


def budget_left(state: AgentState, event: FailureEvent, config: AgentConfig) -> bool:
    """May the job restart once more (restart_count < max_restarts), by re-joining (the
    rendezvous cannot restart a round in place)?"""
    left = can_restart(state.restart_count, config.max_restarts)
    return _rank_known(state, event) and left and not config.restart_in_place


def budget_left_in_place(state: AgentState, event: FailureEvent, config: AgentConfig) -> bool:
    """May the job restart once more (restart_count < max_restarts), in place (the rendezvous
    restarts a round's workers as its next attempt)?"""
    left = can_restart(state.restart_count, config.max_restarts)
    return _rank_known(state, event) and left and config.restart_in_place


def _peer_may_explain(state: AgentState, config: AgentConfig) -> bool:
    return config.collateral_window > 0 and state.group_world_size > 1


def budget_spent(state: AgentState, event: FailureEvent, config: AgentConfig) -> bool:
    """Has the job used every restart it may (restart_count >= max_restarts), with no peer
    whose loss could explain the failure (alone, or no collateral window)?"""
    left = can_restart(state.restart_count, config.max_restarts)
    return _rank_known(state, event) and not left and not _peer_may_explain(state, config)


def budget_spent_peers_left(state: AgentState, event: FailureEvent, config: AgentConfig) -> bool:
    """Has the job used every restart it may, while a peer's loss could still explain the
    failure (the world has peers and a collateral window)?"""
    left = can_restart(state.restart_count, config.max_restarts)
    return _rank_known(state, event) and not left and _peer_may_explain(state, config)


def hold_over(state: AgentState, event: ev.TimePassed, config: AgentConfig) -> bool:
    """Has the held failure's collateral window passed with no peer lost?"""
    return state.held_until is not None and event.now >= state.held_until


def hold_on(state: AgentState, event: ev.TimePassed, config: AgentConfig) -> bool:
    """Is the held failure's collateral window still open?"""
    return not hold_over(state, event, config)


def all_arrived(state: AgentState, event: ev.ExitBarrierRead, config: AgentConfig) -> bool:
    """Has every node of the round reached the exit barrier?"""
    return event.arrived >= state.group_world_size


def barrier_over(state: AgentState, event: ev.ExitBarrierRead, config: AgentConfig) -> bool:
    """Not every node arrived, and the exit barrier's timeout has passed?"""
    over = state.barrier_until is None or event.now >= state.barrier_until
    return not all_arrived(state, event, config) and over


def barrier_on(state: AgentState, event: ev.ExitBarrierRead, config: AgentConfig) -> bool:
    """Not every node arrived, and the exit barrier's timeout is still ahead?"""
    over = state.barrier_until is None or event.now >= state.barrier_until
    return not all_arrived(state, event, config) and not over


def room_for_waiting(state: AgentState, event: ev.NodesWaiting, config: AgentConfig) -> bool:
    """Are nodes waiting and is the world below max_nodes?"""
    return event.count > 0 and state.group_world_size < config.max_nodes


def no_room_for_waiting(state: AgentState, event: ev.NodesWaiting, config: AgentConfig) -> bool:
    """Is nobody waiting, or is the world already at max_nodes?"""
    return not room_for_waiting(state, event, config)


def newer_round(state: AgentState, event: ev.NextRoundOpened, config: AgentConfig) -> bool:
    """Is the opened round newer than the one this node is in?"""
    return event.round > state.round


def count_at_attempt(state: AgentState, attempt: int) -> int:
    """The job-wide restart count of ``attempt`` of this node's round: the round's + attempt
    (the agent's view of ``core.rendezvous.attempts.attempt_restart_count``: it knows its own
    count and attempt, not the round's result)."""
    return attempt_count(state.restart_count, state.attempt, attempt)


def _newer_attempt(state: AgentState, event: ev.AttemptOpened) -> bool:
    return event.round == state.round and event.attempt > state.attempt


def own_attempt_current(state: AgentState, event: ev.OwnAttemptOpened, config: AgentConfig) -> bool:
    """Is the attempt whose open landed still the one this node runs (no newer attempt and no
    other round since it asked for it)?"""
    return event.round == state.round and event.attempt == state.attempt


def attempt_fits(state: AgentState, event: ev.AttemptOpened, config: AgentConfig) -> bool:
    """Is it a newer attempt of this node's round, its restart count within max_restarts?"""
    in_budget = within_budget(count_at_attempt(state, event.attempt), config.max_restarts)
    return _newer_attempt(state, event) and in_budget


def attempt_over_budget(state: AgentState, event: ev.AttemptOpened, config: AgentConfig) -> bool:
    """Is it a newer attempt of this node's round whose restart count is past max_restarts?"""
    over = not within_budget(count_at_attempt(state, event.attempt), config.max_restarts)
    return _newer_attempt(state, event) and over


def closed_succeeded(state: AgentState, event: ev.RendezvousClosed, config: AgentConfig) -> bool:
    """Was the rendezvous closed because the job succeeded?"""
    return event.outcome == "succeeded"


def closed_failed(state: AgentState, event: ev.RendezvousClosed, config: AgentConfig) -> bool:
    """Was the rendezvous closed because the job failed?"""
    return event.outcome == "failed"


def state_corrupt(state: AgentState, event: ev.RendezvousFailed, config: AgentConfig) -> bool:
    """Did the rendezvous fail because the run's shared state is corrupt?"""
    return event.kind == "corrupt"
