"""The rendezvous join's actions: each returns the next state's data and the effects in order.

``ACTIONS`` maps the names the rows of :mod:`tpelastic.core.rendezvous.join` use to them. An
action reads the typed event its row was chosen for (the replies were decoded once, before the
step: :mod:`tpelastic.core.rendezvous.join_decode`). All pure.
"""

from __future__ import annotations

from tpelastic.core.copying import evolve
from tpelastic.core.rendezvous import reading, reform, resuming
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.ops import (
    Add,
    Get,
    JoinFailed,
    JoinSucceeded,
    Set,
    SetIfAbsent,
    StoreOps,
    StoreWait,
    WaitEnded,
)
from tpelastic.core.rendezvous.records import (
    NodeInfo,
    RoundResult,
    encode_node,
    encode_reason,
    encode_result,
)
from tpelastic.core.rendezvous.replies import (
    ArrivedRoundRead,
    Confirmed,
    Located,
    NoResults,
    ReformChecked,
    RepliesUnreadable,
    ResultRead,
    RoundDecided,
    RoundForming,
    RoundTaken,
    RunClosed,
    SlotsRead,
    SlotTaken,
    StatusRead,
    Written,
)
from tpelastic.core.rendezvous.state import OPENING_REASONS, JoinRequested, JoinState
from tpelastic.core.table import Action
from tpelastic.core.values import Emit

Effects = tuple[object, ...]
Result = tuple[JoinState, Effects]


def _fresh(event: JoinRequested, config: RendezvousConfig) -> JoinState:
    return JoinState(
        keys=RunKeys(event.run_id),
        node=NodeInfo(node=event.node, addr=event.addr, prev_attempt=event.attempt),
        reason=event.reason,
        from_round=event.from_round,
        deadline=event.now + config.join_timeout if event.deadline is None else event.deadline,
        heartbeats_held=event.heartbeats_held,
    )


def _locate_ops(state: JoinState) -> Effects:
    return (StoreOps((Get(state.keys.closed()), Get(state.keys.published_rounds()))),)


def _locate(state: JoinState, event: JoinRequested, config: RendezvousConfig) -> Result:
    new = evolve(_fresh(event, config), may_resume=True)
    return new, _locate_ops(new)


def _check_reform(state: JoinState, event: JoinRequested, config: RendezvousConfig) -> Result:
    held = event.held
    if held is not None and held.round_no != event.from_round:
        held = None
    new = evolve(_fresh(event, config), may_resume=True, previous=held)
    return new, (StoreOps(reform.check_ops(new)),)


def _locate_after_check(state: JoinState, event: ReformChecked, config: RendezvousConfig) -> Result:
    return state, _locate_ops(state)


def _read_reformed(state: JoinState, event: RoundDecided, config: RendezvousConfig) -> Result:
    return _read_result(evolve(state, round_no=(state.from_round or 0) + 1), event, config)


def _confirm(state: JoinState, event: ReformChecked, config: RendezvousConfig) -> Result:
    new = reform.confirming(state, event)
    return new, (StoreOps(reform.confirm_ops(new)),)


def _publish_reformed(state: JoinState, event: Confirmed, config: RendezvousConfig) -> Result:
    return _offer(state, reform.confirmed_round(state))


def _publish_void(state: JoinState, event: StatusRead, config: RendezvousConfig) -> Result:
    note = Emit(name="rendezvous.round_void", fields=(("round", state.round_no),))
    watching = reform.watching(reading.after_status(state, event, config), event, config)
    new, effects = _offer(watching, reform.void_round(state, event, config))
    return new, (note, *effects)


def _offer(state: JoinState, draft: RoundResult) -> Result:
    key = state.keys.result(state.round_no)
    offered = evolve(state, draft=draft, unwritten_since=None)
    return offered, (StoreOps((SetIfAbsent(key, encode_result(draft)),)),)


def _recheck(state: JoinState, event: JoinRequested, config: RendezvousConfig) -> Result:
    round_no = event.arrived_round or 0
    new = evolve(_fresh(event, config), round_no=round_no, arrived_slot=event.arrived_slot)
    return new, (StoreOps(resuming.resume_ops(new, round_no)),)


def _recheck_previous(state: JoinState, event: RoundForming, config: RendezvousConfig) -> Result:
    round_no = state.round_no - 1  # the probe found this node in the round before the forming one
    new = evolve(state, round_no=round_no, arrived_slot=None, may_resume=False)
    return new, (StoreOps(resuming.resume_ops(new, round_no)),)


def _resume(state: JoinState, event: ArrivedRoundRead, config: RendezvousConfig) -> Result:
    result = event.current
    assert result is not None
    rank = result.rank_of(state.node.node)
    assert rank is not None
    new = evolve(state, result=result, may_resume=False)
    note = Emit(name="rendezvous.join_resumed", fields=(("round", result.round_no), ("rank", rank)))
    return new, (note, JoinSucceeded(result=result, rank=rank))


def _reclaim(state: JoinState, event: ArrivedRoundRead, config: RendezvousConfig) -> Result:
    slot = state.arrived_slot
    assert slot is not None
    new, _ = _arrive_at(evolve(state, may_resume=False), state.round_no, event.previous)
    return _register_slot(evolve(new, arrived_slot=None), slot)


def _relocating(from_round: str, reason: str | None) -> Action:
    """Join as usual from the round named by ``from_round`` (``none``: as a newcomer; ``own``:
    the round it says it comes from; ``arrived``: the round it arrived in), for ``reason``
    (None: its own)."""

    def action(state: JoinState, event: ArrivedRoundRead, config: RendezvousConfig) -> Result:
        base = {"none": None, "own": state.from_round, "arrived": state.round_no}[from_round]
        new = resuming.relocated(state, base, reason or state.reason)
        return new, _locate_ops(new)

    return action


def _probe(state: JoinState, event: Located, config: RendezvousConfig) -> Result:
    return _probe_round(state, event.round_no)


def _probe_round(state: JoinState, round_no: int) -> Result:
    return evolve(state, round_no=round_no), (StoreOps(reading.probe_ops(state, round_no)),)


def _probe_next(state: JoinState, event: RoundTaken, config: RendezvousConfig) -> Result:
    return _probe_round(state, state.round_no + 1)


def _probe_back(state: JoinState, event: NoResults, config: RendezvousConfig) -> Result:
    return _probe_round(state, reading.scan_from(state))


def _locate_as_newcomer(state: JoinState, event: NoResults, config: RendezvousConfig) -> Result:
    new = reading.as_newcomer(state)
    note = Emit(name="rendezvous.round_forgotten", fields=(("round", state.round_no - 1),))
    return new, (note, *_locate_ops(new))


def _arrive(state: JoinState, event: RoundForming, config: RendezvousConfig) -> Result:
    return _arrive_at(state, state.round_no, event.previous)


def _arrive_at(state: JoinState, round_no: int, previous: RoundResult | None) -> Result:
    new = evolve(
        state,
        round_no=round_no,
        previous=previous,
        slot=None,
        arrivals=0,
        min_reached_at=None,
        pending=None,
        declared_dead=(),
        liveness=LivenessTracker(),
        draft=None,
        proposal=None,
        void_at=None,
        reading_digest=False,
    )
    return new, (StoreOps((Add(new.keys.arrivals(round_no), 1),)),)


def _register(state: JoinState, event: SlotTaken, config: RendezvousConfig) -> Result:
    return _register_slot(state, event.slot)


def _register_slot(state: JoinState, slot: int) -> Result:
    # Every write here is idempotent, so a retried join may register its slot again.
    info = reading.draft_node(state)
    keys, r = state.keys, state.round_no
    ops: list[object] = [Set(keys.slot(r, slot), encode_node(info))]
    member = info.prev_rank is not None
    if member:
        ops.append(Set(keys.member_arrived(r, info.prev_rank or 0), b"1"))
    # Only a member coming straight from the previous round may end that round's world.
    if member and state.reason in OPENING_REASONS and state.from_round == r - 1:
        if state.reason == "failure":
            ops.append(Add(keys.failures(r), 1))
        ops.append(SetIfAbsent(keys.opened(r), encode_reason(state.reason)))
    new = evolve(state, slot=slot, node=info)
    return new, (StoreOps(tuple(ops)),)  # type: ignore[arg-type]


def _follow(state: JoinState, event: Written | Confirmed, config: RendezvousConfig) -> Result:
    until = event.now + config.takeover_delay
    new = evolve(state, follow_until=until)
    # A survivor that confirmed a proposal waits for its few-byte formed record instead.
    key = state.keys.formed if state.proposal is not None else state.keys.result
    wait = StoreWait((key(state.round_no),), min(until, state.deadline))
    return new, (wait,)


def _gather(state: JoinState, event: object, config: RendezvousConfig) -> Result:
    return state, (StoreOps(reading.status_ops(state)),)


def _wait(state: JoinState, event: StatusRead, config: RendezvousConfig) -> Result:
    new = reading.after_status(state, event, config)
    if event.proposal is not None:
        new = reform.watching(new, event, config)
        keys, until = reform.proposal_wait(new, config, event.now)
    else:
        keys, until = reading.next_wait(new, config, event.now)
    return new, (*_dead_notes(state, new), StoreWait(keys, until))


def _dead_notes(old: JoinState, new: JoinState) -> Effects:
    fresh = [n for n in new.declared_dead if n not in old.declared_dead]
    return tuple(
        Emit(name="rendezvous.node_declared_dead", fields=(("node", n), ("round", new.round_no)))
        for n in fresh
    )


def _collect(state: JoinState, event: StatusRead, config: RendezvousConfig) -> Result:
    new = reading.after_status(state, event, config)
    return new, (*_dead_notes(state, new), StoreOps(reading.collect_ops(new)))


def _await_slots(state: JoinState, event: SlotsRead, config: RendezvousConfig) -> Result:
    waiting = state
    if reading.awaits_a_writer(state, event, config):
        since = state.unwritten_since if state.unwritten_since is not None else event.now
        waiting = evolve(state, unwritten_since=since)
    until = min(state.deadline, event.now + config.heartbeat_interval)
    if waiting.unwritten_since is not None:
        until = min(until, waiting.unwritten_since + config.heartbeat_timeout)
    return waiting, (StoreWait(event.missing, until),)


def _publish(state: JoinState, event: SlotsRead, config: RendezvousConfig) -> Result:
    return _offer(state, reading.draft_of(state, event))


def _announce(state: JoinState, event: ResultRead, config: RendezvousConfig) -> Result:
    assert state.draft is not None
    formed = reform.formed_ops(state, state.draft)
    return state, (StoreOps((*formed, Add(state.keys.published_rounds(), 1))),)


def _read_result(state: JoinState, event: object, config: RendezvousConfig) -> Result:
    if state.proposal is not None and isinstance(event, WaitEnded):
        # Woken by the formed record (``_follow``): read it, not the O(N) result.
        new = evolve(state, reading_digest=True)
        return new, (StoreOps((Get(state.keys.formed(state.round_no)),)),)
    new = evolve(state, reading_digest=False) if state.reading_digest else state
    return new, (StoreOps((Get(state.keys.result(state.round_no)),)),)


def _complete_with(state: JoinState, result: RoundResult) -> Result:
    rank = result.rank_of(state.node.node)
    assert rank is not None
    return evolve(state, result=result), (JoinSucceeded(result=result, rank=rank),)


def _complete(state: JoinState, event: ResultRead, config: RendezvousConfig) -> Result:
    return _complete_with(state, event.result)


def _complete_as_closer(state: JoinState, event: object, config: RendezvousConfig) -> Result:
    assert state.draft is not None
    return _complete_with(state, state.draft)


def _move_on_from_draft(state: JoinState, event: object, config: RendezvousConfig) -> Result:
    # The world filled up with the previous round's members: this node waits for the next.
    return _arrive_at(evolve(state, reason="waiting"), state.round_no + 1, state.draft)


def _move_on(state: JoinState, event: ResultRead, config: RendezvousConfig) -> Result:
    return _arrive_at(evolve(state, reason="waiting"), state.round_no + 1, event.result)


def _fail(kind: str) -> Action:
    def action(state: JoinState, event: RunClosed | RepliesUnreadable, config: object) -> Result:
        reason = event.reason or kind
        return evolve(state, failure=reason), (JoinFailed(kind=kind, reason=reason),)

    return action


def _failed(state: JoinState, reason: str) -> Result:
    return evolve(state, failure=reason), (JoinFailed(kind="timeout", reason=reason),)


def _fail_timeout_status(state: JoinState, event: StatusRead, config: RendezvousConfig) -> Result:
    status = reading.after_status(state, event, config)
    return _failed(state, reading.timeout_detail(status, config))


def _fail_timeout_collection(
    state: JoinState, event: SlotsRead, config: RendezvousConfig
) -> Result:
    return _failed(state, reading.too_few_detail(state, event, config))


def _time_out(state: JoinState, event: WaitEnded, config: RendezvousConfig) -> Result:
    reason = f"round {state.round_no}: no result within the join timeout ({config.join_timeout:g}s)"
    return _failed(state, reason)


ACTIONS: dict[str, Action] = {
    "locate": _locate,
    "check_reform": _check_reform,
    "locate_after_check": _locate_after_check,
    "read_reformed": _read_reformed,
    "confirm": _confirm,
    "publish_reformed": _publish_reformed,
    "publish_void": _publish_void,
    "recheck": _recheck,
    "recheck_previous": _recheck_previous,
    "resume": _resume,
    "reclaim": _reclaim,
    "relocate": _relocating("own", None),
    "relocate_as_newcomer": _relocating("none", None),
    "rejoin_after_its_world": _relocating("arrived", "rejoin"),
    "reform_around_it": _relocating("arrived", "membership"),
    "probe": _probe,
    "probe_next": _probe_next,
    "probe_back": _probe_back,
    "locate_as_newcomer": _locate_as_newcomer,
    "arrive": _arrive,
    "register": _register,
    "follow": _follow,
    "gather": _gather,
    "wait": _wait,
    "collect": _collect,
    "await_slots": _await_slots,
    "publish": _publish,
    "announce": _announce,
    "read_result": _read_result,
    "complete": _complete,
    "complete_as_closer": _complete_as_closer,
    "move_on_from_draft": _move_on_from_draft,
    "move_on": _move_on,
    "fail_closed": _fail("closed"),
    "fail_corrupt": _fail("corrupt"),
    "fail_timeout_status": _fail_timeout_status,
    "fail_timeout_collection": _fail_timeout_collection,
    "time_out": _time_out,
}
