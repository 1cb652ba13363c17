"""Every transition of one node's join of a rendezvous round is in this table.

A node joins by taking an arrival slot in the round still forming (an atomic counter), writing who
it is into that slot, and waiting for the round's result. The node in slot 0 is the *closer*: it
watches arrivals, the previous round's members and their heartbeats, and publishes the result
with set-if-absent once the round may complete; whoever's offer lands first wins, so a race
between closers is an ordinary transition. A node the result leaves out moves on to the next
round, where it counts as waiting. A join retried after losing the store first looks at the
round it arrived in (``RESUMING``, :mod:`tpelastic.core.rendezvous.resuming`) and takes up the place
it holds there, instead of arriving anew.

A round may complete only when (one world at a time) every member of the previous round has
arrived, left, or been found dead (by the closer's own clock, or with leases by its heartbeat key
being gone); at least ``min_nodes`` arrived; and
either ``max_nodes`` arrived or the last call (``last_call_timeout`` after min was reached) is
over. Guards are named here and read replies through :mod:`tpelastic.core.rendezvous.reading`;
the table does not know which node it runs on.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from attrs import evolve

from tpelastic.core.rendezvous import reading, resuming
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
from tpelastic.core.rendezvous.state import (
    OPENING_REASONS,
    TERMINAL,
    JoinPhase,
    JoinRequested,
    JoinState,
)
from tpelastic.core.table import Action, Guard, Row, Step, build_table
from tpelastic.core.values import Emit

P = JoinPhase
Effects = tuple[object, ...]
Result = tuple[JoinState, Effects]


# --- readers: each reads a step's replies once -------------------------------------------------

Reader = Callable[[JoinState, OpsDone, RendezvousConfig], reading.Verdict]


def _without_config(reader: Callable[[JoinState, OpsDone], reading.Verdict]) -> Reader:
    @wraps(reader)
    def read(state: JoinState, event: OpsDone, config: RendezvousConfig) -> reading.Verdict:
        return reader(state, event)

    return read


# The guards of one (phase, event) group and the action of the row chosen all ask the same reader
# about the same replies; the table evaluates every guard of the group. Each reader therefore
# remembers its last verdict (keyed by the identity of the step's immutable state, event and
# config), so a step reads its replies once (a closer's reading is O(previous world)).
_location = reading.once_per_step(_without_config(reading.read_location))
_probe_verdict = reading.once_per_step(_without_config(reading.read_probe))
_resume_verdict = reading.once_per_step(_without_config(resuming.read_resume))
_status = reading.once_per_step(reading.read_status)
_collection = reading.once_per_step(reading.read_collection)
_result_verdict = reading.once_per_step(_without_config(reading.read_result))


# --- guards: one line of prose each ------------------------------------------------------------


def _verdict_is(reader: Reader, kind: str) -> Guard:
    def guard(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
        return reader(state, event, config).kind == kind

    guard.__doc__ = f"the replies read as {kind!r}"
    return guard


def _wait_present(state: JoinState, event: WaitEnded, config: RendezvousConfig) -> bool:
    """The awaited keys exist."""
    return event.present


def _deadline_passed(state: JoinState, event: WaitEnded, config: RendezvousConfig) -> bool:
    """The wait ended empty-handed and the join deadline has passed."""
    return not event.present and event.now >= state.deadline


def _retrying(state: JoinState, event: JoinRequested, config: RendezvousConfig) -> bool:
    """The join retries one that lost the store after arriving in a round."""
    return event.arrived_round is not None


def _probe_finds_member(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
    """The forming round is found, and this node, which may resume, is in the round before."""
    verdict = _probe_verdict(state, event, config)
    return verdict.kind == "open" and resuming.finds_member(state, verdict.previous)


def _closer_slot(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
    """This node took slot 0, so it closes the round."""
    return state.is_closer


@reading.once_per_step
def _won_publish(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
    """The stored result is exactly the one this node offered."""
    # Remembered per step like the readers: five guards and an action ask, and encoding the
    # draft is O(world size).
    return state.draft is not None and event.replies[0] == encode_result(state.draft)


def _in_draft(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
    """The result this closer published includes this node."""
    return state.draft is not None and state.draft.rank_of(state.node.node) is not None


def _lost(kind: str) -> Guard:
    def guard(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
        return (
            not _won_publish(state, event, config)
            and _result_verdict(state, event, config).kind == kind
        )

    guard.__doc__ = f"another closer's result landed first and reads as {kind!r}"
    return guard


GUARDS: dict[str, Guard] = {
    "location_closed": _verdict_is(_location, "closed"),
    "location_corrupt": _verdict_is(_location, "corrupt"),
    "probe_taken": _verdict_is(_probe_verdict, "taken"),
    "probe_closed": _verdict_is(_probe_verdict, "closed"),
    "probe_corrupt": _verdict_is(_probe_verdict, "corrupt"),
    "closer_slot": _closer_slot,
    "retrying": _retrying,
    "probe_finds_member": _probe_finds_member,
    "resume_closed": _verdict_is(_resume_verdict, "closed"),
    "resume_corrupt": _verdict_is(_resume_verdict, "corrupt"),
    "still_member": _verdict_is(_resume_verdict, "member"),
    "slot_held": _verdict_is(_resume_verdict, "slot"),
    "may_close": _verdict_is(_status, "close"),
    "result_exists": _verdict_is(_status, "decided"),
    "status_closed": _verdict_is(_status, "closed"),
    "status_corrupt": _verdict_is(_status, "corrupt"),
    "join_window_over": _verdict_is(_status, "timeout"),
    "slots_unwritten": _verdict_is(_collection, "unwritten"),
    "collection_corrupt": _verdict_is(_collection, "corrupt"),
    "collection_timed_out": _verdict_is(_collection, "timeout"),
    "won_publish": _won_publish,
    "in_draft": _in_draft,
    "lost_to_mine": _lost("mine"),
    "lost_to_not_mine": _lost("not_mine"),
    "lost_to_closed": _lost("closed"),
    "lost_to_corrupt": _lost("corrupt"),
    "result_mine": _verdict_is(_result_verdict, "mine"),
    "result_not_mine": _verdict_is(_result_verdict, "not_mine"),
    "result_closed": _verdict_is(_result_verdict, "closed"),
    "result_corrupt": _verdict_is(_result_verdict, "corrupt"),
    "keys_present": _wait_present,
    "deadline_passed": _deadline_passed,
}


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


def _recheck(state: JoinState, event: JoinRequested, config: RendezvousConfig) -> Result:
    round_no = event.arrived_round or 0
    new = evolve(_fresh(event, config), round_no=round_no, arrived_slot=event.arrived_slot)
    return new, (StoreOps(resuming.resume_ops(new, round_no)),)


def _recheck_previous(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    round_no = state.round_no - 1  # the probe found this node in the round before the forming one
    new = evolve(state, round_no=round_no, arrived_slot=None, may_resume=False)
    return new, (StoreOps(resuming.resume_ops(new, round_no)),)


def _resume(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    result = _resume_verdict(state, event, config).result
    assert result is not None
    rank = result.rank_of(state.node.node)
    assert rank is not None
    new = evolve(state, result=result, may_resume=False)
    note = Emit(name="rendezvous.join_resumed", fields=(("round", result.round_no), ("rank", rank)))
    return new, (note, JoinSucceeded(result=result, rank=rank))


def _reclaim(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = _resume_verdict(state, event, config)
    slot = state.arrived_slot
    assert slot is not None
    new, _ = _arrive_at(evolve(state, may_resume=False), verdict.round_no, verdict.previous)
    return _register_slot(evolve(new, arrived_slot=None), slot)


def _relocate(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    new = _resume_verdict(state, event, config).state
    assert new is not None
    return new, _locate_ops(new)


def _probe(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = _location(state, event, config)
    return _probe_round(state, verdict.round_no)


def _probe_round(state: JoinState, round_no: int) -> Result:
    return evolve(state, round_no=round_no), (StoreOps(reading.probe_ops(state, round_no)),)


def _probe_next(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    return _probe_round(state, _probe_verdict(state, event, config).round_no)


def _arrive(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = _probe_verdict(state, event, config)
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
    wait = StoreWait((state.keys.result(state.round_no),), min(until, state.deadline))
    return new, (wait,)


def _gather(state: JoinState, event: object, config: RendezvousConfig) -> Result:
    return state, (StoreOps(reading.status_ops(state)),)


def _wait(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = _status(state, event, config)
    new = verdict.state or state
    return new, (*_dead_notes(state, new), StoreWait(verdict.wait_keys, verdict.wait_until))


def _dead_notes(old: JoinState, new: JoinState) -> Effects:
    fresh = [n for n in new.declared_dead if n not in old.declared_dead]
    return tuple(
        Emit(name="rendezvous.node_declared_dead", fields=(("node", n), ("round", new.round_no)))
        for n in fresh
    )


def _collect(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    new = _status(state, event, config).state or state
    return new, (*_dead_notes(state, new), StoreOps(reading.collect_ops(new)))


def _await_slots(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    verdict = _collection(state, event, config)
    waiting = verdict.state if verdict.state is not None else state
    until = min(state.deadline, event.now + config.heartbeat_interval)
    if waiting.unwritten_since is not None:
        until = min(until, waiting.unwritten_since + config.heartbeat_timeout)
    return waiting, (StoreWait(verdict.wait_keys, until),)


def _publish(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    draft = _collection(state, event, config).result
    assert draft is not None
    key = state.keys.result(state.round_no)
    published = evolve(state, draft=draft, unwritten_since=None)
    return published, (StoreOps((SetIfAbsent(key, encode_result(draft)),)),)


def _announce(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    return state, (StoreOps((Add(state.keys.published_rounds(), 1),)),)


def _read_result(state: JoinState, event: object, config: RendezvousConfig) -> Result:
    return state, (StoreOps((Get(state.keys.result(state.round_no)),)),)


def _complete(state: JoinState, event: OpsDone, config: RendezvousConfig) -> Result:
    result = state.draft if _won_publish(state, event, config) else None
    result = result or _result_verdict(state, event, config).result
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
    result = _result_verdict(state, event, config).result
    return _arrive_at(evolve(state, reason="waiting"), state.round_no + 1, result)


def _fail(kind: str, reader: Reader) -> Action:
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
    "recheck": _recheck,
    "recheck_previous": _recheck_previous,
    "resume": _resume,
    "reclaim": _reclaim,
    "relocate": _relocate,
    "fail_closed_resume": _fail("closed", _resume_verdict),
    "fail_corrupt_resume": _fail("corrupt", _resume_verdict),
    "probe": _probe,
    "probe_next": _probe_next,
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
    "fail_closed_location": _fail("closed", _location),
    "fail_corrupt_location": _fail("corrupt", _location),
    "fail_closed_probe": _fail("closed", _probe_verdict),
    "fail_corrupt_probe": _fail("corrupt", _probe_verdict),
    "fail_closed_status": _fail("closed", _status),
    "fail_corrupt_status": _fail("corrupt", _status),
    "fail_timeout_status": _fail("timeout", _status),
    "fail_corrupt_collection": _fail("corrupt", _collection),
    "fail_timeout_collection": _fail("timeout", _collection),
    "fail_closed_result": _fail("closed", _result_verdict),
    "fail_corrupt_result": _fail("corrupt", _result_verdict),
    "time_out": _time_out,
}

R = Row
ROWS = (
    R(
        src=P.IDLE,
        on=JoinRequested,
        dst=P.RESUMING,
        guard="retrying",
        action="recheck",
        note="a retry: first look at the round it arrived in",
    ),
    R(src=P.IDLE, on=JoinRequested, dst=P.LOCATING, action="locate"),
    R(src=P.RESUMING, on=OpsDone, dst=P.CLOSED, guard="resume_closed", action="fail_closed_resume"),
    R(
        src=P.RESUMING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="resume_corrupt",
        action="fail_corrupt_resume",
    ),
    R(
        src=P.RESUMING,
        on=OpsDone,
        dst=P.COMPLETE,
        guard="still_member",
        action="resume",
        note="its round completed with it, and its world still stands: take up its place",
    ),
    R(
        src=P.RESUMING,
        on=OpsDone,
        dst=P.REGISTERING,
        guard="slot_held",
        action="reclaim",
        note="its round is still forming: write its slot again and wait as before",
    ),
    R(
        src=P.RESUMING,
        on=OpsDone,
        dst=P.LOCATING,
        action="relocate",
        note="nothing to take up: join as usual (as a member of that round, if it is one)",
    ),
    R(
        src=P.LOCATING,
        on=OpsDone,
        dst=P.CLOSED,
        guard="location_closed",
        action="fail_closed_location",
    ),
    R(
        src=P.LOCATING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="location_corrupt",
        action="fail_corrupt_location",
    ),
    R(src=P.LOCATING, on=OpsDone, dst=P.PROBING, action="probe"),
    R(
        src=P.PROBING,
        on=OpsDone,
        dst=P.PROBING,
        guard="probe_taken",
        action="probe_next",
        note="that round is complete: look at the next",
    ),
    R(src=P.PROBING, on=OpsDone, dst=P.CLOSED, guard="probe_closed", action="fail_closed_probe"),
    R(
        src=P.PROBING,
        on=OpsDone,
        dst=P.RESUMING,
        guard="probe_finds_member",
        action="recheck_previous",
        note="the latest round includes this node, which says it comes from before: a retry",
    ),
    R(src=P.PROBING, on=OpsDone, dst=P.CORRUPT, guard="probe_corrupt", action="fail_corrupt_probe"),
    R(src=P.PROBING, on=OpsDone, dst=P.ARRIVING, action="arrive", note="found the forming round"),
    R(src=P.ARRIVING, on=OpsDone, dst=P.REGISTERING, action="register"),
    R(src=P.REGISTERING, on=OpsDone, dst=P.GATHERING, guard="closer_slot", action="gather"),
    R(src=P.REGISTERING, on=OpsDone, dst=P.FOLLOWING, action="follow"),
    R(
        src=P.FOLLOWING,
        on=WaitEnded,
        dst=P.READING_RESULT,
        guard="keys_present",
        action="read_result",
    ),
    R(src=P.FOLLOWING, on=WaitEnded, dst=P.TIMED_OUT, guard="deadline_passed", action="time_out"),
    R(
        src=P.FOLLOWING,
        on=WaitEnded,
        dst=P.GATHERING,
        action="gather",
        note="the closer is slow or gone: close the round too (offers race safely)",
    ),
    R(
        src=P.GATHERING,
        on=OpsDone,
        dst=P.CLOSED,
        guard="status_closed",
        action="fail_closed_status",
    ),
    R(
        src=P.GATHERING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="status_corrupt",
        action="fail_corrupt_status",
    ),
    R(
        src=P.GATHERING,
        on=OpsDone,
        dst=P.READING_RESULT,
        guard="result_exists",
        action="read_result",
        note="another closer published first",
    ),
    R(src=P.GATHERING, on=OpsDone, dst=P.COLLECTING, guard="may_close", action="collect"),
    R(
        src=P.GATHERING,
        on=OpsDone,
        dst=P.TIMED_OUT,
        guard="join_window_over",
        action="fail_timeout_status",
    ),
    R(
        src=P.GATHERING,
        on=OpsDone,
        dst=P.WAITING,
        action="wait",
        note="block on the key whose arrival could change the verdict, until the next deadline",
    ),
    R(src=P.WAITING, on=WaitEnded, dst=P.GATHERING, action="gather"),
    R(
        src=P.COLLECTING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="collection_corrupt",
        action="fail_corrupt_collection",
    ),
    R(
        src=P.COLLECTING,
        on=OpsDone,
        dst=P.TIMED_OUT,
        guard="collection_timed_out",
        action="fail_timeout_collection",
        note="counted arrivals never wrote their slots and the join window is over",
    ),
    R(
        src=P.COLLECTING,
        on=OpsDone,
        dst=P.WAITING,
        guard="slots_unwritten",
        action="await_slots",
        note="a counted arrival has not written its slot yet",
    ),
    R(src=P.COLLECTING, on=OpsDone, dst=P.PUBLISHING, action="publish"),
    R(src=P.PUBLISHING, on=OpsDone, dst=P.ANNOUNCING, guard="won_publish", action="announce"),
    R(src=P.PUBLISHING, on=OpsDone, dst=P.COMPLETE, guard="lost_to_mine", action="complete"),
    R(src=P.PUBLISHING, on=OpsDone, dst=P.ARRIVING, guard="lost_to_not_mine", action="move_on"),
    R(
        src=P.PUBLISHING,
        on=OpsDone,
        dst=P.CLOSED,
        guard="lost_to_closed",
        action="fail_closed_result",
    ),
    R(
        src=P.PUBLISHING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="lost_to_corrupt",
        action="fail_corrupt_result",
    ),
    R(src=P.ANNOUNCING, on=OpsDone, dst=P.COMPLETE, guard="in_draft", action="complete_as_closer"),
    R(
        src=P.ANNOUNCING,
        on=OpsDone,
        dst=P.ARRIVING,
        action="move_on_from_draft",
        note="a closer left out of a full world waits in the next round",
    ),
    R(src=P.READING_RESULT, on=OpsDone, dst=P.COMPLETE, guard="result_mine", action="complete"),
    R(
        src=P.READING_RESULT,
        on=OpsDone,
        dst=P.ARRIVING,
        guard="result_not_mine",
        action="move_on",
        note="left out (late or beyond max_nodes): wait in the next round",
    ),
    R(
        src=P.READING_RESULT,
        on=OpsDone,
        dst=P.CLOSED,
        guard="result_closed",
        action="fail_closed_result",
    ),
    R(
        src=P.READING_RESULT,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="result_corrupt",
        action="fail_corrupt_result",
    ),
)

TABLE = build_table(
    name="rendezvous_join",
    phases=JoinPhase,
    initial=JoinPhase.IDLE,
    events=(JoinRequested, OpsDone, WaitEnded),
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    terminal=TERMINAL,
    doc=__doc__ or "",
)


def step(state: JoinState, event: object, config: RendezvousConfig) -> Step[JoinState]:
    """Apply one event to a node's join. Unknown (phase, event) pairs are rejected cleanly."""
    return TABLE.step(state, event, config)
