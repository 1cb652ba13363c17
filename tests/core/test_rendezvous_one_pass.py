"""The closer reads in one pass: liveness of a whole gather in one tracker update, and the
replies decoded once per step. Same answers as the node-by-node, reader-by-reader way (checked
here against a dumb reference), at O(N) instead of O(N^2) per gather."""

from __future__ import annotations

import pytest
from attrs import evolve
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core.rendezvous import join, join_decode, reading
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import LivenessTracker, judge, judge_many
from tpelastic.core.rendezvous.ops import OpsDone
from tpelastic.core.rendezvous.records import (
    NodeInfo,
    RoundResult,
    StateCorrupt,
    decode_counter,
    encode_result,
)
from tpelastic.core.rendezvous.replies import RepliesUnreadable, StatusRead
from tpelastic.core.rendezvous.state import JoinPhase, JoinState

NAMES = st.sampled_from(["a", "b", "c", "d", "e"])
COUNTERS = st.integers(min_value=0, max_value=3)
TIMES = st.sampled_from([0.0, 1.0, 2.5, 3.0, 4.0, 7.0])
BEATS = st.one_of(st.none(), COUNTERS.map(lambda c: str(c).encode()), st.just(b"\xffjunk"))


@st.composite
def trackers(draw: st.DrawFn) -> LivenessTracker:
    tracker = LivenessTracker()
    for node, counter, now in draw(st.lists(st.tuples(NAMES, COUNTERS, TIMES), max_size=6)):
        tracker = tracker.observe(node, counter, now)
    return tracker


@given(tracker=trackers(), batch=st.lists(st.tuples(NAMES, COUNTERS), max_size=8), now=TIMES)
def test_observe_many_is_observe_one_after_another(
    tracker: LivenessTracker, batch: list[tuple[str, int]], now: float
) -> None:
    expected = tracker
    for node, counter in batch:
        expected = expected.observe(node, counter, now)
    got = tracker.observe_many(batch, now)
    assert got == expected
    assert (got is tracker) == (expected is tracker)  # nothing moved: no copy at all


def judge_one(
    tracker: LivenessTracker, node: str, beat: bytes | None, now: float, leased: bool
) -> tuple[LivenessTracker, bool]:
    """The reference: one node, one ``observe`` (a copy of the map each)."""
    if leased:
        return tracker, beat is None
    tracker = tracker.observe(node, decode_counter(beat), now)
    return tracker, tracker.is_dead(node, now, CONFIG.heartbeat_timeout)


@given(
    tracker=trackers(),
    nodes=st.lists(NAMES, unique=True, max_size=5),
    data=st.data(),
    now=TIMES,
    leased=st.booleans(),
)
def test_judge_many_is_judge_node_by_node(
    tracker: LivenessTracker, nodes: list[str], data: st.DataObject, now: float, leased: bool
) -> None:
    beats = [(node, data.draw(BEATS)) for node in nodes]
    expected_tracker, expected_dead, expected_error = tracker, set(), None
    try:
        for node, beat in beats:
            expected_tracker, dead = judge_one(expected_tracker, node, beat, now, leased)
            if dead:
                expected_dead.add(node)
    except StateCorrupt as error:
        expected_error = str(error)
    try:
        got_tracker, got_dead = judge_many(tracker, beats, now, CONFIG.heartbeat_timeout, leased)
    except StateCorrupt as error:
        assert str(error) == expected_error
        return
    assert expected_error is None
    assert (got_tracker, got_dead) == (expected_tracker, frozenset(expected_dead))
    if len(beats) == 1:  # judge is judge_many of one
        assert judge(tracker, *beats[0], now, CONFIG.heartbeat_timeout, leased) == (
            got_tracker,
            bool(got_dead),
        )


# --- a closer's gather, against the node-by-node reference -----------------------------------

CONFIG = RendezvousConfig(
    min_nodes=2, max_nodes=6, join_timeout=100, heartbeat_interval=1, heartbeat_timeout=3
)
MEMBERS = tuple(NodeInfo(node=n) for n in ("me", "a", "b", "c", "d", "e"))
CLOSER = JoinState(
    phase=JoinPhase.GATHERING,
    keys=RunKeys("run"),
    node=MEMBERS[0],
    round_no=1,
    slot=0,
    previous=RoundResult(round_no=0, participants=MEMBERS),
    deadline=100.0,
)


def reference_pending(
    state: JoinState, raws: list[bytes | None], now: float, config: RendezvousConfig
) -> tuple[tuple[int, ...], set[str], LivenessTracker]:
    """The closer's look at the previous members as it was first written: one judgement (and
    one tracker copy) per member."""
    assert state.previous is not None
    liveness, still, dead = state.liveness, [], set()
    for index, rank in enumerate(reading.expected_members(state)):
        arrived, gone, beat = raws[3 * index : 3 * index + 3]
        if arrived is not None or gone is not None:
            continue
        node = state.previous.participants[rank].node
        liveness, is_dead = judge_one(liveness, node, beat, now, config.leased_liveness)
        (dead.add(node) if is_dead else still.append(rank))
    return tuple(still), dead, liveness


@given(data=st.data(), tracker=trackers(), now=TIMES, leased=st.booleans())
def test_a_gather_reads_the_members_as_the_node_by_node_reference_does(
    data: st.DataObject, tracker: LivenessTracker, now: float, leased: bool
) -> None:
    config = evolve(CONFIG, leased_liveness=leased)
    state = evolve(CLOSER, liveness=tracker)
    members = reading.expected_members(state)
    marks = st.one_of(st.none(), st.just(b"1"))
    raws: list[bytes | None] = []
    for _ in members:
        raws += [data.draw(marks), data.draw(marks), data.draw(BEATS)]
    try:
        expected = reference_pending(state, raws, now, config)
    except StateCorrupt:
        expected = None
    replies = (None, None, b"3", *raws, None)  # the last: the round's proposal (none)
    status = reading.read_status(state, OpsDone(replies=replies, now=now), config)
    if expected is None:
        assert isinstance(status, RepliesUnreadable)
        return
    still, dead, liveness = expected
    assert isinstance(status, StatusRead), status
    assert status.pending == still
    assert status.dead == tuple(sorted(dead))
    assert status.liveness == liveness


# --- one reading per step --------------------------------------------------------------------


def test_a_step_reads_its_replies_once_before_the_table_decides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every guard of the GATHERING group and the action of the row chosen read one typed fact:
    # the replies (a closer's are O(previous world)) are read once per step, not once a guard.
    calls: list[OpsDone] = []
    read = join_decode.READERS[JoinPhase.GATHERING]

    def counting(state: JoinState, event: OpsDone, config: RendezvousConfig) -> object:
        calls.append(event)
        return read(state, event, config)

    monkeypatch.setitem(join_decode.READERS, JoinPhase.GATHERING, counting)
    members = reading.expected_members(CLOSER)
    replies = (None, None, b"6", *([b"1", None, b"0"] * len(members)), None)
    done = join.step(CLOSER, OpsDone(replies=replies, now=1.0), CONFIG)
    assert done.state.phase is JoinPhase.COLLECTING and len(calls) == 1


def test_a_publishing_step_answers_from_one_encoding_of_the_draft() -> None:
    # The closer's offer landed: exactly one guard of the PUBLISHING group holds, and the state
    # carries on to ANNOUNCING; a foreign result with this node in it completes the join.
    draft = RoundResult(round_no=1, participants=MEMBERS, closer="me")
    state = evolve(CLOSER, phase=JoinPhase.PUBLISHING, draft=draft)
    won = OpsDone(replies=(encode_result(draft),), now=1.0)
    assert join.step(state, won, CONFIG).state.phase is JoinPhase.ANNOUNCING
    other = evolve(draft, closer="a")
    lost = OpsDone(replies=(encode_result(other),), now=1.0)
    done = join.step(state, lost, CONFIG)
    assert done.state.phase is JoinPhase.COMPLETE and done.state.result == other
