"""The membership machine: every row by example, and its rules over random observations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpelastic.core import agent as ag
from tpelastic.core import membership as mb

CFG = mb.MemberConfig(heartbeat_timeout=3.0, heartbeat_interval=1.0, fence_timeout=20.0)
FRESH = mb.MemberState()
TWO_FAILED = mb.MemberState(failed_looks=2)
FENCED = mb.MemberState(phase=mb.MemberPhase.FENCED, fenced_at=4.0)


def look(**seen: object) -> mb.LookDone:
    return mb.LookDone(now=5.0, round=4, **seen)  # type: ignore[arg-type]


def landed(last_beat: float, now: float = 5.0, asked_at: float | None = None) -> mb.OpenLanded:
    return mb.OpenLanded(now=now, round=4, attempt=1, last_beat=last_beat, asked_at=asked_at)


EXAMPLES = [
    ("closed", FRESH, look(closed=("succeeded", "done")), [ag.RendezvousClosed]),
    ("closed, foreign outcome", FRESH, look(closed=("weird", "x")), [ag.RendezvousClosed]),
    ("next round", FRESH, look(next_opened="membership"), [ag.NextRoundOpened]),
    ("next attempt", FRESH, look(next_attempt=(2, "exit 1")), [ag.AttemptOpened]),
    ("nodes waiting", FRESH, look(waiting=2), [ag.NodesWaiting]),
    ("nothing new", TWO_FAILED, look(), []),
    ("a failed look", FRESH, mb.LookFailed(now=5.0, reason="busy"), []),
    (
        "the third failed look",
        TWO_FAILED,
        mb.LookFailed(now=5.0, reason="gone"),
        [ag.RendezvousFailed],
    ),
    ("keep-alive lapsed", FRESH, mb.KeepAliveRead(now=5.0, last_beat=3.0), [ag.KeepAliveLapsed]),
    ("keep-alive fine", FRESH, mb.KeepAliveRead(now=5.0, last_beat=3.1), []),
    (
        "join closed, outcome read",
        FRESH,
        mb.JoinClosed(now=5.0, why="closed", closed=("failed", "budget")),
        [ag.RendezvousClosed],
    ),
    ("join closed, unread", FRESH, mb.JoinClosed(now=5.0, why="closed"), [ag.RendezvousFailed]),
    ("fenced, still lapsed", FENCED, mb.KeepAliveRead(now=5.0, last_beat=2.0), []),
    (
        "fenced, a beat landed",
        FENCED,
        mb.KeepAliveRead(now=5.0, last_beat=4.5),
        [ag.KeepAliveRestored],
    ),
    (
        "fenced past the join timeout",
        FENCED,
        mb.KeepAliveRead(now=24.0, last_beat=2.0),
        [ag.RendezvousFailed],
    ),
    ("fenced, closed", FENCED, look(closed=("failed", "budget")), [ag.RendezvousClosed]),
    ("fenced, a next round", FENCED, look(next_opened="membership"), []),
    ("fenced, a failed look", FENCED, mb.LookFailed(now=5.0, reason="gone"), [ag.RendezvousFailed]),
    (
        "fenced, join closed, read",
        FENCED,
        mb.JoinClosed(now=5.0, why="closed", closed=("failed", "budget")),
        [ag.RendezvousClosed],
    ),
    ("fenced, join closed", FENCED, mb.JoinClosed(now=5.0, why="closed"), [ag.RendezvousFailed]),
    ("own open landed", FRESH, landed(last_beat=3.1), [ag.OwnAttemptOpened]),
    ("own open landed, lapsed", FRESH, landed(last_beat=3.0), [ag.KeepAliveLapsed]),
    ("own open landed while fenced", FENCED, landed(last_beat=4.5), []),
]


@pytest.mark.parametrize(
    ("name", "state", "event", "effects"), EXAMPLES, ids=[e[0] for e in EXAMPLES]
)
def test_example(name: str, state: mb.MemberState, event: object, effects: list[type]) -> None:
    result = mb.step(state, event, CFG)
    assert [type(e) for e in result.effects] == effects


def test_every_row_has_an_example() -> None:
    assert {mb.TABLE.select(s, e, CFG) for _, s, e, _ in EXAMPLES} == set(mb.TABLE.rows)


seen_values = st.builds(
    mb.LookDone,
    now=st.floats(0, 100),
    round=st.integers(-1, 5),
    closed=st.none() | st.tuples(st.sampled_from(["succeeded", "failed", "odd"]), st.just("r")),
    next_opened=st.none() | st.sampled_from(["membership", "scale_up", "failure"]),
    next_attempt=st.none() | st.tuples(st.integers(1, 4), st.just("exit 1")),
    waiting=st.integers(0, 3),
    running=st.booleans(),
)


@given(event=seen_values, failed=st.integers(0, 2))
def test_M1_a_look_means_one_thing_by_priority(event: mb.LookDone, failed: int) -> None:
    """One look yields at most one agent event: closed, then the next round, then the next
    attempt, then nodes waiting (only while the workers run); it resets the failed looks."""
    result = mb.step(mb.MemberState(failed_looks=failed), event, CFG)
    assert result.state.failed_looks == 0
    if event.closed is not None:
        expected: type | None = ag.RendezvousClosed
    elif event.next_opened is not None:
        expected = ag.NextRoundOpened
    elif event.next_attempt is not None and event.round >= 0:
        expected = ag.AttemptOpened  # a node in no round yet has no attempt to follow
    elif event.running and event.waiting > 0:
        expected = ag.NodesWaiting
    else:
        expected = None
    assert [type(e) for e in result.effects] == ([expected] if expected else [])
    for effect in result.effects:
        if isinstance(effect, ag.RendezvousClosed):
            assert effect.outcome in ("succeeded", "failed")
            assert event.closed is not None
            assert effect.outcome == "succeeded" or event.closed[0] != "succeeded"
        if isinstance(effect, ag.NextRoundOpened):
            assert effect.round == event.round + 1


@given(events=st.lists(st.booleans(), max_size=30), lost=st.integers(1, 4))
def test_M2_only_looks_lost_failed_looks_in_a_row_lose_the_rendezvous(
    events: list[bool], lost: int
) -> None:
    """A failed look loses the rendezvous only as the ``looks_lost``-th in a row; any look that
    worked starts the count again."""
    config = mb.MemberConfig(looks_lost=lost)
    state, in_a_row = mb.MemberState(), 0
    for failed in events:
        event: object = (
            mb.LookFailed(now=1.0, reason="x") if failed else mb.LookDone(now=1.0, round=0)
        )
        result = mb.step(state, event, config)
        state = result.state
        in_a_row = in_a_row + 1 if failed else 0
        reported = [e for e in result.effects if isinstance(e, ag.RendezvousFailed)]
        assert bool(reported) == (in_a_row == lost)
        if in_a_row == lost:
            in_a_row = 0


@given(
    now=st.floats(0, 1e6),
    age=st.floats(0, 20),
    timeout=st.floats(0.2, 10),
    interval=st.floats(0.05, 5),
)
def test_M3_the_keep_alive_lapses_at_timeout_minus_interval(
    now: float, age: float, timeout: float, interval: float
) -> None:
    """A keep-alive lapses exactly when the last landed beat is heartbeat_timeout -
    heartbeat_interval old or older; without a heartbeat it never does."""
    config = mb.MemberConfig(heartbeat_timeout=timeout, heartbeat_interval=interval)
    read = mb.KeepAliveRead(now=now, last_beat=now - age)
    effects = mb.step(mb.MemberState(), read, config).effects
    lapsed = now - (now - age) >= timeout - interval
    assert [type(e) for e in effects] == ([ag.KeepAliveLapsed] if lapsed else [])
    assert mb.step(mb.MemberState(), read, mb.MemberConfig()).effects == ()
    host = mb.MemberConfig(heartbeat_timeout=timeout, heartbeat_interval=interval, hosts_store=True)
    assert mb.step(mb.MemberState(), read, host).effects == ()


@given(
    now=st.floats(0, 1e6),
    age=st.floats(0, 20),
    silent_age=st.none() | st.floats(0, 20),
)
def test_M6_a_silence_that_served_nobody_counts_as_a_landed_beat(
    now: float, age: float, silent_age: float | None
) -> None:
    """A keep-alive read that carries the end of a silence in which the store answered nobody
    (``silent_until``) is judged from the later of that and the last landed beat: every peer's
    clock of this node started again there."""
    config = mb.MemberConfig(heartbeat_timeout=3.0, heartbeat_interval=1.0)
    silent_until = None if silent_age is None else now - silent_age
    read = mb.KeepAliveRead(now=now, last_beat=now - age, silent_until=silent_until)
    since = now - age if silent_until is None else max(now - age, silent_until)
    lapsed = now - since >= 2.0
    effects = mb.step(mb.MemberState(), read, config).effects
    assert [type(e) for e in effects] == ([ag.KeepAliveLapsed] if lapsed else [])


@given(
    beats=st.lists(st.tuples(st.floats(0.01, 3), st.booleans()), max_size=30),
    fence_timeout=st.none() | st.floats(1, 20),
)
def test_M5_a_fenced_node_rejoins_only_once_a_beat_landed(
    beats: list[tuple[float, bool]], fence_timeout: float | None
) -> None:
    """Fenced, the node re-joins (KeepAliveRestored) at the first read after a heartbeat landed
    again and never while its keep-alive is lapsed; a read still lapsed ``fence_timeout`` after
    the fence is a failed rendezvous (kind timeout). Every read is one of these, once."""
    config = mb.MemberConfig(
        heartbeat_timeout=3.0, heartbeat_interval=1.0, fence_timeout=fence_timeout
    )
    now, last = 0.0, 0.0
    state = mb.step(mb.MemberState(), mb.KeepAliveRead(now=2.0, last_beat=0.0), config).state
    assert state.phase is mb.MemberPhase.FENCED
    now = 2.0
    for wait, landed in beats:
        now += wait
        if landed:
            last = now
        result = mb.step(state, mb.KeepAliveRead(now=now, last_beat=last), config)
        kinds = [type(e) for e in result.effects]
        lapsed = mb.keep_alive_lapsed(now, last, 3.0, 1.0)
        if not lapsed:
            assert kinds == [ag.KeepAliveRestored]
            assert result.state.phase is mb.MemberPhase.WATCHING
            return
        if fence_timeout is not None and now - 2.0 >= fence_timeout:
            assert kinds == [ag.RendezvousFailed]
            failed = result.effects[0]
            assert isinstance(failed, ag.RendezvousFailed) and failed.kind == "timeout"
            return
        assert kinds == [] and result.state.phase is mb.MemberPhase.FENCED
        state = result.state


@pytest.mark.parametrize(
    ("closed", "expected"),
    [
        (("succeeded", "done"), ag.RendezvousClosed(now=5.0, outcome="succeeded", reason="done")),
        (("failed", "b"), ag.RendezvousClosed(now=5.0, outcome="failed", reason="b")),
        (("odd", "b"), ag.RendezvousFailed(now=5.0, reason="closed", kind="closed")),
        (None, ag.RendezvousFailed(now=5.0, reason="closed", kind="closed")),
    ],
)
def test_M4_a_join_that_found_the_run_closed_follows_the_close_it_can_read(
    closed: tuple[str, str] | None, expected: object
) -> None:
    """A join that found the run closed follows the close's outcome when a look read it as
    succeeded or failed; otherwise it is a failed rendezvous of kind ``closed``."""
    event = mb.JoinClosed(now=5.0, why="closed", closed=closed)
    assert mb.step(FRESH, event, CFG).effects == (expected,)


@given(
    wait=st.floats(0, 20),
    since_beat=st.floats(0, 20),
    timeout=st.floats(0.2, 10),
    interval=st.floats(0.05, 5),
    host=st.booleans(),
)
def test_M7_an_own_open_starts_its_attempt_only_with_the_keep_alive_held(
    wait: float, since_beat: float, timeout: float, interval: float, host: bool
) -> None:
    """The node's own open of an attempt, landed ``wait`` s after it was sent with its last
    beat ``since_beat`` s before that, starts the attempt exactly when a keep-alive read then
    would not fence the node (M3); otherwise the node is fenced, as by that read. An open known
    to have waited ``heartbeat_timeout - heartbeat_interval`` or longer fences a non-host even
    when a beat landed at the end."""
    config = mb.MemberConfig(
        heartbeat_timeout=timeout, heartbeat_interval=interval, hosts_store=host
    )
    sent = 100.0
    now, last = sent + wait, sent - since_beat
    opened = mb.step(FRESH, landed(last_beat=last, now=now), config)
    read = mb.step(FRESH, mb.KeepAliveRead(now=now, last_beat=last), config)
    # Knowing when it was sent: an open that waited a lapse long fences the node too, even
    # with a beat landed just now (the loop read no keep-alive while it waited).
    timed = mb.step(FRESH, landed(last_beat=now, now=now, asked_at=sent), config)
    waited_out = not host and wait >= timeout - interval
    assert [type(e) for e in timed.effects] == (
        [ag.KeepAliveLapsed] if waited_out else [ag.OwnAttemptOpened]
    )
    if read.effects:
        assert [type(e) for e in opened.effects] == [ag.KeepAliveLapsed]
        assert opened.state == read.state and opened.state.phase is mb.MemberPhase.FENCED
    else:
        assert opened.effects == (ag.OwnAttemptOpened(now=now, round=4, attempt=1),)
        assert opened.state == FRESH


@given(
    now=st.floats(0, 1e6),
    age=st.floats(0, 100),
    timeout=st.floats(0.5, 30),
    interval=st.floats(0.05, 0.5),
    hosts_store=st.booleans(),
    heartbeat=st.booleans(),
)
def test_M8_keep_alive_holds_is_the_machines_own_verdict(
    now: float, age: float, timeout: float, interval: float, hosts_store: bool, heartbeat: bool
) -> None:
    """What the handler's keep_alive_healthy and the shipped harness answer is exactly whether
    a watching node's step on the same read orders no KeepAliveLapsed."""
    config = mb.MemberConfig(
        heartbeat_timeout=timeout if heartbeat else None,
        heartbeat_interval=interval if heartbeat else None,
        hosts_store=hosts_store,
    )
    read = mb.KeepAliveRead(now=now, last_beat=now - age)
    stepped = mb.step(mb.MemberState(), read, config).effects
    assert mb.keep_alive_holds(read, config) == (stepped == ())
