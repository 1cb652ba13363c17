"""The rendezvous join's actions: each returns the next state's data and the effects in order.

``ACTIONS`` maps the names the rows of :mod:`tpelastic.core.rendezvous.join` use to them. An
action reads the step's replies through the same once-per-step readers as the guards
(:mod:`tpelastic.core.rendezvous.join_guards`), so a step reads its replies once. All pure.
"""

from __future__ import annotations

from tpelastic.core.copying import evolve
from tpelastic.core.rendezvous import join_guards as gd
from tpelastic.core.rendezvous import reading, reform, resuming
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.ops import (
    Add,
    Get,
    JoinFailed,
    JoinSucceeded,
    OpsDone,
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
from tpelastic.core.rendezvous.state import OPENING_REASONS, JoinRequested, JoinState
from tpelastic.core.table import Action
from tpelastic.core.values import Emit

Effects = tuple[object, ...]
Result = tuple[JoinState, Effects]


# --- actions: pure, each returns the next state's data and the effects in order -----------------


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


def _locate_after_check(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    return state, _locate_ops(state)


def _read_reformed(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    new = gd.reform_check(state, event, config).state
    assert new is not None
    return _read_result(new, event, config)


def _confirm(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    new = gd.reform_check(state, event, config).state
    assert new is not None
    return new, (StoreOps(reform.confirm_ops(new)),)


def _publish_reformed(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    return _offer(state, gd.confirmation(state, event, config).result)


def _publish_void(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = gd.status(state, event, config)
    note = Emit(name="rendezvous.round_void", fields=(("round", state.round_no),))
    new, effects = _offer(verdict.state or state, verdict.result)
    return new, (note, *effects)


def _offer(state: JoinState, draft: RoundResult | None) -> Result:
    assert draft is not None
    key = state.keys.result(state.round_no)
    offered = evolve(state, draft=draft, unwritten_since=None)
    return offered, (StoreOps((SetIfAbsent(key, encode_result(draft)),)),)


def _recheck(state: JoinState, event: JoinRequested, config: RendezvousConfig) -> Result:
    round_no = event.arrived_round or 0
    new = evolve(_fresh(event, config), round_no=round_no, arrived_slot=event.arrived_slot)
    return new, (StoreOps(resuming.resume_ops(new, round_no)),)


def _recheck_previous(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    round_no = state.round_no - 1  # the probe found this node in the round before the forming one
    new = evolve(state, round_no=round_no, arrived_slot=None, may_resume=False)
    return new, (StoreOps(resuming.resume_ops(new, round_no)),)


def _resume(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    result = gd.resume_verdict(state, event, config).result
    assert result is not None
    rank = result.rank_of(state.node.node)
    assert rank is not None
    new = evolve(state, result=result, may_resume=False)
    note = Emit(name="rendezvous.join_resumed", fields=(("round", result.round_no), ("rank", rank)))
    return new, (note, JoinSucceeded(result=result, rank=rank))


def _reclaim(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = gd.resume_verdict(state, event, config)
    slot = state.arrived_slot
    assert slot is not None
    new, _ = _arrive_at(evolve(state, may_resume=False), verdict.round_no, verdict.previous)
    return _register_slot(evolve(new, arrived_slot=None), slot)


def _relocate(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    new = gd.resume_verdict(state, event, config).state
    assert new is not None
    return new, _locate_ops(new)


def _probe(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = gd.location(state, event, config)
    return _probe_round(state, verdict.round_no)


def _probe_round(state: JoinState, round_no: int) -> Result:
    return evolve(state, round_no=round_no), (StoreOps(reading.probe_ops(state, round_no)),)


def _probe_next(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    return _probe_round(state, gd.probe_verdict(state, event, config).round_no)


def _locate_as_newcomer(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    new = gd.probe_verdict(state, event, config).state
    assert new is not None
    note = Emit(name="rendezvous.round_forgotten", fields=(("round", state.round_no - 1),))
    return new, (note, *_locate_ops(new))


def _arrive(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = gd.probe_verdict(state, event, config)
    return _arrive_at(state, verdict.round_no, verdict.previous)


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


def _register(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    return _register_slot(state, int(event.replies[0] or 0) - 1)


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


def _follow(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    until = event.now + config.takeover_delay
    new = evolve(state, follow_until=until)
    # A survivor that confirmed a proposal waits for its few-byte formed record instead.
    key = state.keys.formed if state.proposal is not None else state.keys.result
    wait = StoreWait((key(state.round_no),), min(until, state.deadline))
    return new, (wait,)


def _gather(state: JoinState, event: object, config: RendezvousConfig) -> Result:
    return state, (StoreOps(reading.status_ops(state)),)


def _wait(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = gd.status(state, event, config)
    new = verdict.state or state
    return new, (*_dead_notes(state, new), StoreWait(verdict.wait_keys, verdict.wait_until))


def _dead_notes(old: JoinState, new: JoinState) -> Effects:
    fresh = [n for n in new.declared_dead if n not in old.declared_dead]
    return tuple(
        Emit(name="rendezvous.node_declared_dead", fields=(("node", n), ("round", new.round_no)))
        for n in fresh
    )


def _collect(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    new = gd.status(state, event, config).state or state
    return new, (*_dead_notes(state, new), StoreOps(reading.collect_ops(new)))


def _await_slots(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = gd.collection(state, event, config)
    waiting = verdict.state if verdict.state is not None else state
    until = min(state.deadline, event.now + config.heartbeat_interval)
    if waiting.unwritten_since is not None:
        until = min(until, waiting.unwritten_since + config.heartbeat_timeout)
    return waiting, (StoreWait(verdict.wait_keys, until),)


def _publish(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    return _offer(state, gd.collection(state, event, config).result)


def _announce(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
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


def _complete(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    result = state.draft if gd.won_publish(state, event, config) else None
    result = result or gd.result_verdict(state, event, config).result
    assert result is not None
    rank = result.rank_of(state.node.node)
    assert rank is not None
    return evolve(state, result=result), (JoinSucceeded(result=result, rank=rank),)


def _complete_as_closer(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    result = state.draft
    assert result is not None
    rank = result.rank_of(state.node.node)
    assert rank is not None
    return evolve(state, result=result), (JoinSucceeded(result=result, rank=rank),)


def _move_on_from_draft(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    # The world filled up with the previous round's members: this node waits for the next.
    return _arrive_at(evolve(state, reason="waiting"), state.round_no + 1, state.draft)


def _move_on(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    result = gd.result_verdict(state, event, config).result
    return _arrive_at(evolve(state, reason="waiting"), state.round_no + 1, result)


def _fail(kind: str, reader: gd.Reader) -> Action:
    def action(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
        verdict = reader(state, event, config)
        reason = verdict.detail or kind
        return evolve(state, failure=reason), (JoinFailed(kind=kind, reason=reason),)

    return action


def _time_out(state: JoinState, event: WaitEnded, config: RendezvousConfig) -> Result:
    reason = f"round {state.round_no}: no result within the join timeout ({config.join_timeout:g}s)"
    return evolve(state, failure=reason), (JoinFailed(kind="timeout", reason=reason),)


ACTIONS: dict[str, Action] = {
    "locate": _locate,
    "check_reform": _check_reform,
    "locate_after_check": _locate_after_check,
    "read_reformed": _read_reformed,
    "confirm": _confirm,
    "publish_reformed": _publish_reformed,
    "publish_void": _publish_void,
    "fail_closed_reform": _fail("closed", gd.reform_check),
    "fail_corrupt_reform": _fail("corrupt", gd.reform_check),
    "recheck": _recheck,
    "recheck_previous": _recheck_previous,
    "resume": _resume,
    "reclaim": _reclaim,
    "relocate": _relocate,
    "fail_closed_resume": _fail("closed", gd.resume_verdict),
    "fail_corrupt_resume": _fail("corrupt", gd.resume_verdict),
    "probe": _probe,
    "probe_next": _probe_next,
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
    "fail_closed_location": _fail("closed", gd.location),
    "fail_corrupt_location": _fail("corrupt", gd.location),
    "fail_closed_probe": _fail("closed", gd.probe_verdict),
    "fail_corrupt_probe": _fail("corrupt", gd.probe_verdict),
    "fail_closed_status": _fail("closed", gd.status),
    "fail_corrupt_status": _fail("corrupt", gd.status),
    "fail_timeout_status": _fail("timeout", gd.status),
    "fail_corrupt_collection": _fail("corrupt", gd.collection),
    "fail_timeout_collection": _fail("timeout", gd.collection),
    "fail_closed_result": _fail("closed", gd.result_verdict),
    "fail_corrupt_result": _fail("corrupt", gd.result_verdict),
    "time_out": _time_out,
}
