"""The round member's machine over an in-memory store: looks, a dead successor, the close."""

from __future__ import annotations

import pytest
from attrs import evolve
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core.rendezvous import liveness, membership
from tpelastic.core.rendezvous import member as mm
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import OpsDone, StoreOps, run_ops
from tpelastic.core.rendezvous.records import (
    ClosedRecord,
    NodeInfo,
    RoundResult,
    decode_closed,
    decode_reason,
    decode_result,
    encode_closed,
    encode_reason,
    encode_result,
)
from tpelastic.core.values import Emit

KEYS = RunKeys("job")
CFG = RendezvousConfig(min_nodes=1, max_nodes=4, heartbeat_interval=1.0, heartbeat_timeout=3.0)
LEASED = RendezvousConfig(
    min_nodes=1, max_nodes=4, heartbeat_interval=1.0, heartbeat_timeout=3.0, leased_liveness=True
)
WORLD = RoundResult(round_no=2, participants=(NodeInfo(node="a"), NodeInfo(node="b")))


def drive(
    state: mm.MemberState, event: object, store: dict[str, bytes], config: RendezvousConfig
) -> tuple[mm.MemberState, list[object]]:
    """Step ``event`` to its outcome over ``store``, as the adapter's run_member does."""
    outcomes: list[object] = []
    for _ in range(2 * mm.MAX_PROBES + 10):
        result = mm.step(state, event, config)
        state = result.state
        request = [e for e in result.effects if isinstance(e, StoreOps)]
        outcomes += [e for e in result.effects if not isinstance(e, StoreOps)]
        if not request:
            return state, outcomes
        done = OpsDone(replies=run_ops(request[0].ops, store), now=event.now)  # type: ignore[attr-defined]
        event = mm.decode(state, done, config)
    raise AssertionError("the machine did not come to an outcome")


def looked(outcomes: list[object]) -> membership.RoundWatch:
    answers = [o for o in outcomes if isinstance(o, mm.Looked)]
    assert len(answers) == 1, outcomes
    return answers[0].watch


def fresh() -> mm.MemberState:
    return mm.member_state(KEYS, "a", WORLD)


def test_L1_a_look_reads_the_watch_keys_and_reports_a_dead_successor_once() -> None:
    store: dict[str, bytes] = {}
    state, out = drive(fresh(), mm.LookRequested(now=0.0), store, CFG)
    assert looked(out) == membership.RoundWatch(closed=None, next_opened=None, waiting=0)
    # b's counter never moves: at heartbeat_timeout on a's clock it is reported, once.
    state, out = drive(state, mm.LookRequested(now=2.9), store, CFG)
    assert looked(out).next_opened is None
    state, out = drive(state, mm.LookRequested(now=3.0), store, CFG)
    assert looked(out).next_opened == "membership"
    assert [o for o in out if isinstance(o, Emit)][0].as_dict()["node"] == "b"
    assert decode_reason(store[KEYS.gone(3, 1)]) == "dead"
    state, out = drive(state, mm.LookRequested(now=4.0), store, CFG)
    assert looked(out).next_opened == "membership"
    assert not [o for o in out if isinstance(o, Emit)]  # R+1 is open: nothing judged again
    assert state.phase is mm.MemberPhase.IDLE


def test_L1_the_report_answers_with_whoever_opened_the_next_round_first() -> None:
    store = {KEYS.heartbeat("b"): b"1"}
    state, _ = drive(fresh(), mm.LookRequested(now=0.0), store, CFG)
    # Between the look's reads and its report a peer opens R+1 for a scale-up: its reason wins.
    result = mm.step(state, mm.LookRequested(now=5.0), CFG)
    store[KEYS.opened(3)] = encode_reason("scale_up")
    watch = membership.RoundWatch(closed=None, next_opened=None, waiting=0)
    dead = mm.step(result.state, mm.LookRead(now=5.0, watch=watch, beat=1, beat_present=True), CFG)
    assert dead.state.phase is mm.MemberPhase.REPORTING
    (ops,) = [e for e in dead.effects if isinstance(e, StoreOps)]
    done = OpsDone(replies=run_ops(ops.ops, store), now=5.0)
    final = mm.step(dead.state, mm.decode(dead.state, done, CFG), CFG)
    assert looked(list(final.effects)).next_opened == "scale_up"


def test_L1_a_closed_or_opened_look_judges_nobody() -> None:
    for key, value in (
        (KEYS.closed(), encode_closed(ClosedRecord(outcome="failed"))),
        (KEYS.opened(3), encode_reason("failure")),
    ):
        store = {key: value}
        state, _ = drive(fresh(), mm.LookRequested(now=0.0), store, CFG)
        state, out = drive(state, mm.LookRequested(now=100.0), store, CFG)
        assert KEYS.gone(3, 1) not in store
        watch = looked(out)
        assert watch.closed is not None or watch.next_opened == "failure"


@given(beats=st.lists(st.tuples(st.floats(0.0, 2.0), st.booleans()), min_size=1, max_size=30))
def test_L2_a_moving_counter_is_never_dead_and_a_still_one_dies_at_the_timeout(
    beats: list[tuple[float, bool]],
) -> None:
    store: dict[str, bytes] = {}
    state, now, counter = fresh(), 0.0, 0
    still_since: float | None = None  # on a's clock: the first look, then every move
    for gap, moves in beats:
        now += gap
        if moves:
            counter += 1
            store[KEYS.heartbeat("b")] = str(counter).encode()
        state, out = drive(state, mm.LookRequested(now=now), store, CFG)
        if moves or still_since is None:
            still_since = now
        dead = now - still_since >= CFG.heartbeat_timeout
        assert (KEYS.gone(3, 1) in store) is dead
        assert looked(out).next_opened == ("membership" if dead else None)
        if dead:
            return


def test_L2_leased_absent_is_dead_at_once_and_present_never() -> None:
    store = {KEYS.heartbeat("b"): b"alive"}
    state, out = drive(fresh(), mm.LookRequested(now=0.0), store, LEASED)
    state, out = drive(state, mm.LookRequested(now=1000.0), store, LEASED)
    assert looked(out).next_opened is None
    del store[KEYS.heartbeat("b")]
    state, out = drive(state, mm.LookRequested(now=1000.1), store, LEASED)
    assert looked(out).next_opened == "membership"


def _results(upto: int) -> dict[str, bytes]:
    return {KEYS.result(r): encode_result(RoundResult(round_no=r)) for r in range(upto)}


@given(
    forming=st.integers(0, 12),
    hint=st.integers(0, 20),
    own=st.one_of(st.none(), st.integers(0, 12)),
)
def test_L3_a_close_takes_the_forming_rounds_slot_whatever_the_hint(
    forming: int, hint: int, own: int | None
) -> None:
    store = _results(forming)
    store[KEYS.published_rounds()] = str(hint).encode()
    result = RoundResult(round_no=own) if own is not None and own < forming else None
    state = mm.member_state(KEYS, "a", result)
    state, out = drive(state, mm.CloseRequested(now=0.0, outcome="failed", reason="x"), store, CFG)
    assert [type(o) for o in out] == [mm.Closed]
    assert decode_result(store[KEYS.result(forming)]).closed
    assert decode_closed(store[KEYS.closed()]) == ClosedRecord(outcome="failed", reason="x")
    assert KEYS.result(forming + 1) not in store
    assert state.closed and state.phase is mm.MemberPhase.IDLE


def test_L3_results_past_the_probe_bound_are_corrupt_not_a_loop() -> None:
    store = _results(mm.MAX_PROBES + 2)
    state, out = drive(
        mm.member_state(KEYS, "a"), mm.CloseRequested(now=0.0, outcome="failed"), store, CFG
    )
    assert [type(o) for o in out] == [mm.MemberFailed]
    # The closed record stands all the same: every reader checks it before anything else.
    assert decode_closed(store[KEYS.closed()]).outcome == "failed"
    assert not any(decode_result(store[KEYS.result(r)]).closed for r in range(mm.MAX_PROBES + 2))


@pytest.mark.parametrize("own", [None, 1])
def test_L3_a_huge_hint_costs_a_scan_not_a_walk_down(own: int | None) -> None:
    store = _results(3)
    store[KEYS.published_rounds()] = b"1000000000"
    result = RoundResult(round_no=own) if own is not None else None
    state, out = drive(
        mm.member_state(KEYS, "a", result), mm.CloseRequested(now=0.0, outcome="failed"), store, CFG
    )
    assert [type(o) for o in out] == [mm.Closed]
    assert decode_result(store[KEYS.result(3)]).closed


garbage = st.one_of(st.binary(max_size=40), st.just(b'{"v": 99, "kind": "reason"}'))


@given(
    key=st.sampled_from(["closed", "opened", "arrivals", "attempt", "hb", "hint", "r0"]),
    blob=garbage,
)
def test_L4_foreign_bytes_fail_cleanly_and_the_state_stays_usable(key: str, blob: bytes) -> None:
    where = {
        "closed": KEYS.closed(),
        "opened": KEYS.opened(3),
        "arrivals": KEYS.arrivals(3),
        "attempt": KEYS.attempt(2, 1),
        "hb": KEYS.heartbeat("b"),
        "hint": KEYS.published_rounds(),
        "r0": KEYS.result(0),
    }[key]
    store = {where: blob}
    for event in (mm.LookRequested(now=0.0), mm.CloseRequested(now=0.0, outcome="failed")):
        state, out = drive(fresh(), event, dict(store), CFG)
        assert state.phase is mm.MemberPhase.IDLE
        assert len(out) <= 2 and type(out[-1]) in (mm.Looked, mm.Closed, mm.MemberFailed)
        again = mm.step(state, mm.LookRequested(now=1.0), CFG)
        assert again.state.phase is mm.MemberPhase.LOOKING


def test_L5_a_held_wait_leaves_out_keys_a_look_saw_present() -> None:
    store = {KEYS.arrivals(3): b"1", KEYS.attempt(2, 1): encode_reason("exit 1")}
    state = fresh()
    every = mm.change_keys(state)
    assert set(every) == {KEYS.closed(), KEYS.opened(3), KEYS.arrivals(3), KEYS.attempt(2, 1)}
    state, _ = drive(state, mm.LookRequested(now=0.0), store, CFG)
    assert set(mm.change_keys(state)) == {KEYS.closed(), KEYS.opened(3)}
    # Following attempt 1 moves the wait on to attempt 2's key.
    followed = mm.change_keys(evolve(state, attempt=1))
    assert KEYS.attempt(2, 2) in followed and KEYS.arrivals(3) not in followed


def test_a_look_before_the_first_round_is_rejected() -> None:
    result = mm.step(mm.member_state(KEYS, "a"), mm.LookRequested(now=0.0), CFG)
    assert result.state.phase is mm.MemberPhase.IDLE
    assert [type(e).__name__ for e in result.effects] == ["Rejected"]


@given(
    interval=st.floats(0.05, 3.0),
    times=st.integers(2, 5),
    death=st.floats(0.0, 10.0),
    phase=st.floats(0.0, 1.0),
)
def test_L6_a_dead_successor_is_reported_within_the_peer_loss_window(
    interval: float, times: int, death: float, phase: float
) -> None:
    timeout = interval * times
    config = RendezvousConfig(
        min_nodes=1, max_nodes=4, heartbeat_interval=interval, heartbeat_timeout=timeout
    )
    period = liveness.look_period(interval)
    store: dict[str, bytes] = {}
    state, beat, now = fresh(), 0, phase * period
    next_beat = 0.0
    while True:
        while next_beat <= min(now, death):  # b beats every interval until it dies
            beat += 1
            store[KEYS.heartbeat("b")] = str(beat).encode()
            next_beat += interval
        state, out = drive(state, mm.LookRequested(now=now), store, config)
        if looked(out).next_opened is not None:
            break
        now += period
    assert now - death <= liveness.peer_loss_window(timeout, interval) - liveness.PEER_LOSS_MARGIN


def test_L7_a_leave_opens_the_next_round_only_while_the_rendezvous_is_open() -> None:
    store: dict[str, bytes] = {}
    state, out = drive(fresh(), mm.LeaveRequested(now=0.0), store, CFG)
    assert out == [mm.Left(wrote=True)]
    assert decode_reason(store[KEYS.gone(3, 0)]) == "left"
    assert decode_reason(store[KEYS.opened(3)]) == "membership"
    assert KEYS.closed() not in store  # leaving never closes the rendezvous
    closed = {KEYS.closed(): encode_closed(ClosedRecord(outcome="succeeded"))}
    state, out = drive(fresh(), mm.LeaveRequested(now=0.0), closed, CFG)
    assert out == [mm.Left(wrote=False)] and set(closed) == {KEYS.closed()}
    # A look that saw the close spares the read; no round completed: nothing to leave.
    seen, _ = drive(fresh(), mm.LookRequested(now=0.0), dict(closed), CFG)
    assert mm.step(seen, mm.LeaveRequested(now=1.0), CFG).effects == (mm.Left(wrote=False),)
    alone = mm.member_state(KEYS, "a")
    assert mm.step(alone, mm.LeaveRequested(now=1.0), CFG).effects == (mm.Left(wrote=False),)
    bad = {KEYS.closed(): b"garbage"}
    state, out = drive(fresh(), mm.LeaveRequested(now=0.0), bad, CFG)
    assert [type(o) for o in out] == [mm.MemberFailed] and KEYS.opened(3) not in bad


def test_L3_a_garbage_hint_does_not_stop_a_close() -> None:
    store = _results(2)
    store[KEYS.published_rounds()] = b"{garbage"
    state, out = drive(
        mm.member_state(KEYS, "a"), mm.CloseRequested(now=0.0, outcome="failed"), store, CFG
    )
    assert [type(o) for o in out] == [mm.Closed]
    assert decode_result(store[KEYS.result(2)]).closed


def _look_answered_late(
    state: mm.MemberState, asked: float, answered: float, counter: int
) -> mm.MemberState:
    """One look asked at ``asked`` whose replies (the successor's counter ``counter``) come at
    ``answered``, as when the store held them up."""
    store = {KEYS.heartbeat("b"): str(counter).encode()}
    requested = mm.step(state, mm.LookRequested(now=asked), CFG)
    (ops,) = [e for e in requested.effects if isinstance(e, StoreOps)]
    done = OpsDone(replies=run_ops(ops.ops, store), now=answered)
    return mm.step(requested.state, mm.decode(requested.state, done, CFG), CFG).state


@given(wait=st.floats(0.0, 20.0), moved=st.integers(-1, 30))
def test_L9_a_silence_that_served_nobody_restarts_the_nodes_own_clock(
    wait: float, moved: int
) -> None:
    """A look that waited a heartbeat interval or more, and saw the ring successor's counter
    move at most once and by fewer than the wait's intervals less one, proves the store answered
    nobody: ``store_silent_until`` is the instant it answered. A successor that beat on meanwhile
    (the store answered others: this node alone was cut off), a quick look, or no sighting to
    compare gives no such proof."""
    first = _look_answered_late(fresh(), 0.0, 0.0, 5)
    assert first.store_silent_until is None  # nothing to compare with yet
    state = _look_answered_late(first, 1.0, 1.0 + wait, 5 + moved)
    proved = (
        wait >= CFG.heartbeat_interval
        and 0 <= moved <= 1
        and moved < wait / CFG.heartbeat_interval - 1
    )
    assert state.store_silent_until == (1.0 + wait if proved else None)
    # A later quick look keeps the proof it had.
    later = _look_answered_late(state, 2.0 + wait, 2.0 + wait, 6 + moved)
    assert later.store_silent_until == state.store_silent_until


def test_L9_a_paused_store_then_a_cut_off_node() -> None:
    """The paused store host's case (its successor held still) against a partition that cut off
    this node alone (its successor beat on, once per interval)."""
    state = _look_answered_late(fresh(), 0.0, 0.0, 5)
    paused = _look_answered_late(state, 0.25, 2.75, 6)
    assert paused.store_silent_until == 2.75
    cut_off = _look_answered_late(state, 0.25, 2.75, 7)
    assert cut_off.store_silent_until is None


def test_L10_a_store_host_away_two_intervals_starts_its_successors_clock_again() -> None:
    """A store host's looks answered two heartbeat intervals or more apart (it was paused
    between them, and held every beat up with it) restart the successor's clock; looks an
    interval apart judge it dead at the timeout as usual, and so do a non-host's sparse looks
    (beats landed meanwhile)."""
    store = {KEYS.heartbeat("b"): b"5"}
    host = mm.member_state(KEYS, "a", WORLD, hosts_store=True)
    state, _ = drive(host, mm.LookRequested(now=0.0), store, CFG)
    state, out = drive(state, mm.LookRequested(now=2.5), store, CFG)  # away 2.5 s
    state, out = drive(state, mm.LookRequested(now=3.5), store, CFG)
    assert looked(out).next_opened is None  # 3.5 s still, but timed from 2.5 s only
    for now in (4.5, 5.4):
        state, out = drive(state, mm.LookRequested(now=now), store, CFG)
        assert looked(out).next_opened is None
    state, out = drive(state, mm.LookRequested(now=5.5), store, CFG)
    assert looked(out).next_opened == "membership"  # 3 s of looks an interval apart
    for start, times in ((host, (1.0, 2.0, 2.9)), (fresh(), (2.5, 2.9))):
        still = {KEYS.heartbeat("b"): b"5"}
        steady, _ = drive(start, mm.LookRequested(now=0.0), still, CFG)
        for now in times:
            steady, out = drive(steady, mm.LookRequested(now=now), still, CFG)
            assert looked(out).next_opened is None
        steady, out = drive(steady, mm.LookRequested(now=3.0), still, CFG)
        assert looked(out).next_opened == "membership"


THREE = RoundResult(
    round_no=2, participants=(NodeInfo(node="a"), NodeInfo(node="b"), NodeInfo(node="c"))
)


@pytest.mark.parametrize(("watcher_moved", "credited"), [(0, True), (1, True), (7, False)])
def test_L9_in_a_ring_of_three_the_watcher_must_have_held_still_too(
    watcher_moved: int, credited: bool
) -> None:
    """a's successor is b, its predecessor (who times a) is c. A silent look that saw b held
    still proves nothing if c beat on: c was served, and times a out."""
    store = {KEYS.heartbeat("b"): b"5", KEYS.heartbeat("c"): b"9"}
    state, _ = drive(mm.member_state(KEYS, "a", THREE), mm.LookRequested(now=0.0), store, CFG)
    assert state.watcher_seen == 9
    requested = mm.step(state, mm.LookRequested(now=0.25), CFG)
    (ops,) = [e for e in requested.effects if isinstance(e, StoreOps)]
    assert len(ops.ops) == 6  # the watch keys, b's beat, c's beat
    store[KEYS.heartbeat("c")] = str(9 + watcher_moved).encode()
    done = OpsDone(replies=run_ops(ops.ops, store), now=2.75)
    after = mm.step(requested.state, mm.decode(requested.state, done, CFG), CFG).state
    assert after.store_silent_until == (2.75 if credited else None)
