"""The rendezvous join's guards: each one named yes/no question about the state and a typed
event (the replies decoded by :mod:`tpelastic.core.rendezvous.join_decode`, the end of a wait,
the request). ``GUARDS`` maps the names the rows of :mod:`tpelastic.core.rendezvous.join` use
to them. All pure, and cheap: the reading was done once, before the step.
"""

from __future__ import annotations

from tpelastic.core.rendezvous import reading, reform, resuming
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.ops import WaitEnded
from tpelastic.core.rendezvous.replies import (
    ArrivedRoundRead,
    Confirmed,
    NoResults,
    ReformChecked,
    ResultRead,
    RoundForming,
    SlotsRead,
    StatusRead,
)
from tpelastic.core.rendezvous.state import JoinRequested, JoinState
from tpelastic.core.table import Guard


def _wait_present(state: JoinState, event: WaitEnded, config: RendezvousConfig) -> bool:
    """The awaited keys exist."""
    return event.present


def _deadline_passed(state: JoinState, event: WaitEnded, config: RendezvousConfig) -> bool:
    """The wait ended empty-handed and the join deadline has passed."""
    return not event.present and event.now >= state.deadline


def _retrying(state: JoinState, event: JoinRequested, config: RendezvousConfig) -> bool:
    """The join retries one that lost the store after arriving in a round."""
    return event.arrived_round is not None


def _from_a_round(state: JoinState, event: JoinRequested, config: RendezvousConfig) -> bool:
    """A member of a round joins the next one, which another member opened."""
    return (
        event.from_round is not None
        and event.arrived_round is None
        and event.reason in reform.CONFIRMING_REASONS
    )


def _own_round_forgotten(state: JoinState, event: NoResults, config: RendezvousConfig) -> bool:
    """The round with no result before the probed one is this node's own: the store forgot it."""
    return reading.own_round_forgotten(state)


def _probe_finds_member(state: JoinState, event: RoundForming, config: RendezvousConfig) -> bool:
    """This node, which may resume, is in the round before the forming one."""
    return resuming.finds_member(state, event.previous)


def _still_member(state: JoinState, event: ArrivedRoundRead, config: RendezvousConfig) -> bool:
    """Its round completed with it, that world still trains, and its heartbeats held."""
    return (
        resuming.in_its_round(state, event)
        and resuming.world_stands(state, event)
        and state.heartbeats_held
    )


def _slot_held(state: JoinState, event: ArrivedRoundRead, config: RendezvousConfig) -> bool:
    """Its round is still forming, and it knows the slot it took there."""
    return not event.forgotten and event.current is None and state.arrived_slot is not None


def _store_forgot(state: JoinState, event: ArrivedRoundRead, config: RendezvousConfig) -> bool:
    """The store holds no result of its round nor of the one before (it started again empty)."""
    return event.forgotten


def _world_ended(state: JoinState, event: ArrivedRoundRead, config: RendezvousConfig) -> bool:
    """Its round completed with it, but that world is over (the next round opened, or void)."""
    return resuming.in_its_round(state, event) and not resuming.world_stands(state, event)


def _maybe_found_dead(state: JoinState, event: ArrivedRoundRead, config: RendezvousConfig) -> bool:
    """Its world still trains, but its heartbeats may have failed: a peer may have found it
    dead."""
    return (
        resuming.in_its_round(state, event)
        and resuming.world_stands(state, event)
        and not state.heartbeats_held
    )


def _proposal_names_me(state: JoinState, event: ReformChecked, config: RendezvousConfig) -> bool:
    """The proposal of the next round names this node among its survivors, and can complete."""
    return reform.names_me(state, event, config)


def _first_to_confirm(state: JoinState, event: Confirmed, config: RendezvousConfig) -> bool:
    """Its add was the first of several."""
    return reform.first_to_confirm(state, event)


def _last_to_confirm(state: JoinState, event: Confirmed, config: RendezvousConfig) -> bool:
    """Its add completed the count."""
    return reform.last_to_confirm(state, event)


def _closer_slot(state: JoinState, event: object, config: RendezvousConfig) -> bool:
    """This node took slot 0, so it closes the round."""
    return state.is_closer


def _proposal_stalled(state: JoinState, event: StatusRead, config: RendezvousConfig) -> bool:
    """The round was proposed, and a named survivor can no longer confirm or the takeover
    delay is over."""
    return reform.proposal_stalled(state, event, config)


def _may_close(state: JoinState, event: StatusRead, config: RendezvousConfig) -> bool:
    """The round may complete (every previous member accounted for, min_nodes, full or the last
    call over), and no proposal of it is still being confirmed within the join deadline."""
    if reform.proposal_stalled(state, event, config):
        return False
    watching = event.proposal is not None and event.now < state.deadline
    return not watching and reading.may_complete(state, event, config)


def _join_window_over(state: JoinState, event: StatusRead, config: RendezvousConfig) -> bool:
    """The join deadline passed and the round still may not complete."""
    if event.now < state.deadline or reform.proposal_stalled(state, event, config):
        return False
    return not reading.may_complete(state, event, config)


def _slots_unwritten(state: JoinState, event: SlotsRead, config: RendezvousConfig) -> bool:
    """A counted arrival has not written its slot yet, and it is worth waiting for."""
    too_few = len(event.chosen) < config.min_nodes
    return reading.awaits_a_writer(state, event, config) or (too_few and event.now < state.deadline)


def _collection_timed_out(state: JoinState, event: SlotsRead, config: RendezvousConfig) -> bool:
    """Too few registered, and the join deadline passed."""
    return len(event.chosen) < config.min_nodes and event.now >= state.deadline


def _won_publish(state: JoinState, event: ResultRead, config: RendezvousConfig) -> bool:
    """The stored result is exactly the one this node offered."""
    return event.won


def _result_mine(state: JoinState, event: ResultRead, config: RendezvousConfig) -> bool:
    """Another's result (or the one read) has this node training in it."""
    return not event.won and reading.is_mine(state, event.result)


def _in_draft(state: JoinState, event: object, config: RendezvousConfig) -> bool:
    """The result this closer published includes this node, and is not void."""
    draft = state.draft
    return draft is not None and reading.is_mine(state, draft)


GUARDS: dict[str, Guard] = {
    "retrying": _retrying,
    "from_a_round": _from_a_round,
    "own_round_forgotten": _own_round_forgotten,
    "probe_finds_member": _probe_finds_member,
    "still_member": _still_member,
    "slot_held": _slot_held,
    "store_forgot": _store_forgot,
    "world_ended": _world_ended,
    "maybe_found_dead": _maybe_found_dead,
    "proposal_names_me": _proposal_names_me,
    "first_to_confirm": _first_to_confirm,
    "last_to_confirm": _last_to_confirm,
    "closer_slot": _closer_slot,
    "proposal_stalled": _proposal_stalled,
    "may_close": _may_close,
    "join_window_over": _join_window_over,
    "slots_unwritten": _slots_unwritten,
    "collection_timed_out": _collection_timed_out,
    "won_publish": _won_publish,
    "result_mine": _result_mine,
    "in_draft": _in_draft,
    "keys_present": _wait_present,
    "deadline_passed": _deadline_passed,
}

__all__ = ["GUARDS"]
