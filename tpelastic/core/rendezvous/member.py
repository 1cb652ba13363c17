"""Every transition of a round's member between joins is in this table: its looks, the report
of a dead ring successor, its graceful leave, and the close of the rendezvous.

While its workers run, a member of round R looks at what ends its world: the close, round R+1
opened, nodes arriving at R+1, and the next in-place attempt of R (``membership.watch_ops``).
When the look finds neither a close nor R+1 opened, the world still stands and the member judges
its ring successor (rank + 1 mod n) by the heartbeat read in the same batch: with leases the
key's absence is death at once; otherwise the counter not moving for ``heartbeat_timeout`` of
this member's own clock is. A dead successor is reported (its ``gone`` mark, and R+1 opened with
reason ``membership``) and the look answers with R+1 opened by whoever opened it first.

Closing the rendezvous writes the closed record first (it stands however damaged the rest is),
then takes the forming round's result slot (``membership.close_ops``), so the member first
finds that round: from the ``published`` hint (and past its own round) forward while results
exist; when the previous result is missing too (the hint ran ahead, or the store started again
empty) it scans forward again from just past its own round, or from round 0.

A graceful leave writes the member's ``gone`` mark for R+1 and opens R+1 for the others
(``membership.leave_ops``), unless no round completed or the rendezvous is closed (a look saw
it, or one read finds it): then the job is over for everyone and there is nothing to open.

The store's replies are decoded into typed facts (:func:`decode`) before they are stepped: the
guards ask questions about facts, never about bytes. Pure: time and replies come in as events,
store requests and outcomes go out as effects; the adapter carries them out in order.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TypeVar

from attrs import evolve, field, frozen, validators

from tpelastic.core.rendezvous import attempts, membership
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.membership import RoundWatch
from tpelastic.core.rendezvous.ops import Get, Op, OpsDone, Reply, StoreOps
from tpelastic.core.rendezvous.records import (
    RoundResult,
    StateCorrupt,
    decode_closed,
    decode_counter,
    decode_reason,
)
from tpelastic.core.table import Action, Guard, Row, Step, build_table
from tpelastic.core.values import Emit, Instant, value_eq, value_hash, value_repr

# How many round results a close probes past the hint before it calls the state corrupt. The
# hint lags the truth by at most the rounds whose closer has not bumped it yet: a handful.
MAX_PROBES = 1000


class MemberPhase(enum.Enum):
    IDLE = "idle"  # nothing asked of the store
    LOOKING = "looking"  # the look's reads are out
    REPORTING = "reporting"  # the dead successor's report (and R+1 opened) is out
    LOCATING = "locating"  # (closing) the published hint's read is out
    PROBING = "probing"  # (closing) reading results around one round
    CLOSING = "closing"  # (closing) the close's writes are out
    CHECKING = "checking"  # (leaving) the closed record's read is out
    LEAVING = "leaving"  # (leaving) the leave's writes are out


@frozen(kw_only=True)
class MemberState:
    """A node's view of its round between joins (a fresh one after every completed join).

    ``arrivals_seen`` and ``attempt_seen`` say what looks saw present: a held wait for a change
    leaves those keys out (present keys would end it at once, again and again).
    """

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: MemberPhase = MemberPhase.IDLE
    keys: RunKeys = RunKeys("")
    node: str = "?"
    result: RoundResult | None = None  # the round this node completed last; None before one
    liveness: LivenessTracker = LivenessTracker()  # sightings of the ring successor
    attempt: int = field(default=0, validator=validators.ge(0))  # the attempt of the last look
    attempt_seen: int = field(default=0, validator=validators.ge(0))  # newest seen opened
    arrivals_seen: bool = False
    closed: bool = False  # a look saw the close, or this node closed
    successor: str | None = None  # judged by the look that is out
    asked_at: Instant | None = None  # when the look that is out was asked
    # The last instant a look proved the store answered nobody until (see ``served_nobody``):
    # this node's own keep-alive clock restarts there, as its peers' clocks of it do.
    store_silent_until: Instant | None = None
    answered_at: Instant | None = None  # when the last look that judged a successor was answered
    hosts_store: bool = False  # the store's server runs in this node's process
    watcher_seen: int | None = None  # the ring predecessor's counter at the last look
    seen: RoundWatch | None = None  # what the look saw, while its report is out
    # Closing: the outcome to write, the first round probed and the one probed now.
    close: tuple[str, str] | None = None
    probe_from: int = 0
    probing: int = 0


def member_state(
    keys: RunKeys, node: str, result: RoundResult | None = None, hosts_store: bool = False
) -> MemberState:
    """A member of ``result`` (None: no round completed yet) that has not looked yet;
    ``hosts_store``: the store's server runs in its process."""
    return MemberState(keys=keys, node=node, result=result, hosts_store=hosts_store)


def carried_attempt(state: MemberState, running: int) -> int:
    """The in-place attempt of its round a member's next join reports (its closer carries it
    into the next round's count): the one it runs, or a newer one a look saw opened."""
    return max(running, state.attempt_seen) if state.result is not None else 0


# -- events: requests, and the store's replies decoded into facts ------------------------------


@frozen(kw_only=True)
class LookRequested:
    """Look at what ends the world of this node's round, which it runs as ``attempt``."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    attempt: int = field(default=0, validator=validators.ge(0))


@frozen(kw_only=True)
class LookRead:
    """The look's replies: what it saw, and the ring successor's heartbeat (``beat``: the
    counter, 0 when absent; ``beat_present``: whether its key exists)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    watch: RoundWatch
    beat: int = 0
    beat_present: bool = False
    # The ring predecessor's counter (the member that times this node), when it is not the
    # successor and counters are kept; None otherwise.
    watcher_beat: int | None = None


@frozen(kw_only=True)
class DeathReported:
    """The dead successor is marked gone; ``next_opened`` is why R+1 opened (whoever won)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    next_opened: str


@frozen(kw_only=True)
class CloseRequested:
    """End the job for every node with ``outcome`` (``succeeded`` or ``failed``)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    outcome: str
    reason: str = ""


@frozen(kw_only=True)
class HintRead:
    """The ``published`` hint: how many rounds' results were announced."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    published: int = field(validator=validators.ge(0))


@frozen(kw_only=True)
class ResultsProbed:
    """Whether round ``round_no - 1`` (True for round 0) and round ``round_no`` have results."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    previous: bool
    current: bool


@frozen(kw_only=True)
class LeaveRequested:
    """Leave gracefully: the others form the next round without this node."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class ClosedRead:
    """Whether the closed record exists (it was validated)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    closed: bool


@frozen(kw_only=True)
class Written:
    """The writes asked for are done."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class RepliesUnreadable:
    """A reply under one of our keys is not ours (foreign bytes, a newer schema)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    reason: str


MEMBER_EVENTS: tuple[type, ...] = (
    LeaveRequested,
    ClosedRead,
    LookRequested,
    LookRead,
    DeathReported,
    CloseRequested,
    HintRead,
    ResultsProbed,
    Written,
    RepliesUnreadable,
)


# -- effects (outcomes) ------------------------------------------------------------------------


@frozen(kw_only=True)
class Looked:
    """Outcome: what the look saw (with R+1 opened when it reported a dead successor)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    watch: RoundWatch


@frozen(kw_only=True)
class Left:
    """Outcome: the leave is written, or there was nothing to leave (no round, or the
    rendezvous is closed: the job is over for everyone)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    wrote: bool


@frozen(kw_only=True)
class Closed:
    """Outcome: the close is written."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash


@frozen(kw_only=True)
class MemberFailed:
    """Outcome: the store holds something this node cannot read (``kind`` is ``corrupt``)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    kind: str
    reason: str


# -- decoding the replies to the requests of a phase -------------------------------------------


def _bytes(reply: Reply, what: str) -> bytes | None:
    if reply is None or isinstance(reply, bytes):
        return reply
    raise StateCorrupt(f"{what} is not bytes")


def decode(state: MemberState, done: OpsDone, config: RendezvousConfig) -> object:
    """The facts the replies to ``state``'s request hold, as the event to step.

    A reply that is not ours decodes to :class:`RepliesUnreadable` naming its key, never an
    exception.
    """
    now, replies = done.now, done.replies
    keys = state.keys
    try:
        if state.phase is MemberPhase.LOOKING:
            return _decode_look(state, replies, now, config)
        if state.phase is MemberPhase.REPORTING:
            assert state.result is not None
            key = keys.opened(state.result.round_no + 1)
            opened = _named(key, lambda: _bytes(replies[-1], "opened flag"))
            why = _named(key, lambda: decode_reason(opened)) if opened is not None else None
            return DeathReported(now=now, next_opened=why or "membership")
        if state.phase is MemberPhase.LOCATING:
            try:
                hint = decode_counter(_bytes(replies[-1], "hint"))
            except StateCorrupt:
                # Only a hint: a close scans from this node's own round instead, so it still
                # takes the forming round's slot when the hint is what is corrupt.
                hint = 0
            return HintRead(now=now, published=hint)
        if state.phase is MemberPhase.CHECKING:
            raw = _named(keys.closed(), lambda: _bytes(replies[0], "closed flag"))
            if raw is not None:
                _named(keys.closed(), lambda: decode_closed(raw))
            return ClosedRead(now=now, closed=raw is not None)
        if state.phase is MemberPhase.PROBING:
            raws = [
                _named(keys.result(state.probing), lambda r=r: _bytes(r, "round result"))  # type: ignore[misc]
                for r in replies
            ]
            previous = state.probing == 0 or raws[0] is not None
            return ResultsProbed(now=now, previous=previous, current=raws[-1] is not None)
    except StateCorrupt as error:
        return RepliesUnreadable(now=now, reason=str(error))
    return Written(now=now)


T = TypeVar("T")


def _named(key: str, read: Callable[[], T]) -> T:
    """``read()``, its StateCorrupt (or ValueError) naming ``key``."""
    try:
        return read()
    except (StateCorrupt, ValueError) as error:
        raise StateCorrupt(f"corrupt rendezvous state at {key!r}: {error}") from None


def _decode_look(
    state: MemberState, replies: Sequence[Reply], now: Instant, config: RendezvousConfig
) -> LookRead:
    assert state.result is not None
    ops = membership.watch_ops(state.keys, state.result.round_no, state.attempt)
    watch = membership.read_watch_at(ops, replies)
    if state.successor is None:
        return LookRead(now=now, watch=watch)
    key = state.keys.heartbeat(state.successor)
    beat = _named(key, lambda: _bytes(replies[4], "heartbeat"))
    counter = 0 if config.leased_liveness else _named(key, lambda: decode_counter(beat))
    watcher: int | None = None
    if len(replies) > 5 and not config.leased_liveness:
        predecessor = membership.ring_predecessor(state.result, state.node)
        assert predecessor is not None
        wkey = state.keys.heartbeat(predecessor)
        wbeat = _named(wkey, lambda: _bytes(replies[5], "heartbeat"))
        watcher = _named(wkey, lambda: decode_counter(wbeat))
    present = beat is not None
    return LookRead(now=now, watch=watch, beat=counter, beat_present=present, watcher_beat=watcher)


# -- requests ----------------------------------------------------------------------------------


def look_ops(state: MemberState, attempt: int, leased: bool = False) -> tuple[Op, ...]:
    """The reads of one look: the watch keys, the ring successor's heartbeat, and (counted
    liveness, a ring of three or more) the ring predecessor's, which :func:`served_nobody`
    reads: the predecessor is who times this node."""
    assert state.result is not None
    ops = membership.watch_ops(state.keys, state.result.round_no, attempt)
    successor = membership.ring_successor(state.result, state.node)
    if successor is None:
        return ops
    ops = (*ops, Get(state.keys.heartbeat(successor)))
    predecessor = membership.ring_predecessor(state.result, state.node)
    if leased or predecessor is None or predecessor == successor:
        return ops
    return (*ops, Get(state.keys.heartbeat(predecessor)))


def change_keys(state: MemberState) -> tuple[str, ...]:
    """The keys whose appearance a held wait for a change waits on: the watch keys, less the
    arrivals at R+1 and the next attempt once a look saw them present (they stay present)."""
    if state.result is None:
        return ()
    round_no, attempt = state.result.round_no, state.attempt
    keys = [
        op.key for op in membership.watch_ops(state.keys, round_no, attempt) if isinstance(op, Get)
    ]
    if state.arrivals_seen:
        keys.remove(state.keys.arrivals(round_no + 1))
    if state.attempt_seen > attempt:  # seen, not yet followed
        keys.remove(attempts.next_attempt_key(state.keys, round_no, attempt))
    return tuple(keys)


def _probe_ops(keys: RunKeys, round_no: int) -> tuple[Op, ...]:
    before = (Get(keys.result(round_no - 1)),) if round_no > 0 else ()
    return (*before, Get(keys.result(round_no)))


# -- guards ------------------------------------------------------------------------------------


def in_a_round(state: MemberState, event: LookRequested, config: RendezvousConfig) -> bool:
    """This node completed a round (a look before the first is rejected)."""
    return state.result is not None


def nothing_to_leave(state: MemberState, event: LeaveRequested, config: RendezvousConfig) -> bool:
    """No round completed, or a look saw the close: the leave writes nothing."""
    return state.result is None or state.closed


def something_to_leave(state: MemberState, event: LeaveRequested, config: RendezvousConfig) -> bool:
    """A member of a round not known to be closed."""
    return not nothing_to_leave(state, event, config)


def run_closed(state: MemberState, event: ClosedRead, config: RendezvousConfig) -> bool:
    """The rendezvous is closed: leaving would open a round nobody joins."""
    return event.closed


def run_open(state: MemberState, event: ClosedRead, config: RendezvousConfig) -> bool:
    """The rendezvous is open: the leave is written."""
    return not event.closed


def world_stands(state: MemberState, event: LookRead, config: RendezvousConfig) -> bool:
    """Neither closed nor R+1 opened: the ring successor is judged."""
    return event.watch.closed is None and event.watch.next_opened is None


def successor_dead(state: MemberState, event: LookRead, config: RendezvousConfig) -> bool:
    """The world stands and the ring successor is dead: its leased key is gone, or its counter
    has not moved for ``heartbeat_timeout`` on this node's clock."""
    if state.successor is None or not world_stands(state, event, config):
        return False
    if config.leased_liveness:
        return not event.beat_present
    tracker = _sighted(state, event, config)
    return tracker.is_dead(state.successor, event.now, config.heartbeat_timeout)


def successor_alive(state: MemberState, event: LookRead, config: RendezvousConfig) -> bool:
    """Not :func:`successor_dead` (or nothing to judge)."""
    return not successor_dead(state, event, config)


def forming_found(state: MemberState, event: ResultsProbed, config: RendezvousConfig) -> bool:
    """The previous round has a result and the probed one has none: it is forming."""
    return event.previous and not event.current


def probe_taken(state: MemberState, event: ResultsProbed, config: RendezvousConfig) -> bool:
    """The probed round has a result: look at the next (within ``MAX_PROBES``)."""
    return event.current and state.probing + 1 - state.probe_from < MAX_PROBES


def probe_behind(state: MemberState, event: ResultsProbed, config: RendezvousConfig) -> bool:
    """Neither the probed round nor the one before has a result: look one round back."""
    return not event.previous and not event.current


def store_was_silent(state: MemberState, event: LookRead, config: RendezvousConfig) -> bool:
    """Did the look wait a heartbeat interval or more for its answer? The store did not answer
    meanwhile (its process paused, or unreachable from here), so no beat this member could see
    landed: the time says nothing about the successor."""
    asked = state.asked_at
    return asked is not None and event.now - asked >= config.heartbeat_interval


def served_nobody(state: MemberState, event: LookRead, config: RendezvousConfig) -> bool:
    """Did a silent look (see :func:`store_was_silent`) find that the store answered nobody
    meanwhile? The ring successor, answered, would have beaten about once per interval of the
    wait; its counter moved at most once (a beat the store held up), and by fewer than the
    wait's intervals less one, and so did the ring predecessor's (the member that times this
    node; in a ring of two, the successor). Then no peer could time this node either: the store
    was paused, not cut off from this node alone. Without sightings to compare (no successor,
    a new one, leases) nothing is proved."""
    asked, successor = state.asked_at, state.successor
    if asked is None or successor is None or config.leased_liveness:
        return False
    if not store_was_silent(state, event, config):
        return False
    before = state.liveness.seen.get(successor)
    if before is None:
        return False
    intervals = (event.now - asked) / config.heartbeat_interval

    def held(moved: int) -> bool:
        return 0 <= moved <= 1 and moved < intervals - 1

    if not held(event.beat - before.counter):
        return False
    if event.watcher_beat is None:  # a ring of two: the successor is the watcher
        return True
    return state.watcher_seen is not None and held(event.watcher_beat - state.watcher_seen)


def observer_was_away(state: MemberState, event: LookRead, config: RendezvousConfig) -> bool:
    """Does this node host the store, and was this look answered two heartbeat intervals or
    more after its last one? Its process was paused or starved between looks (they come every
    interval at most), the store with it, so no beat could land meanwhile: the time says
    nothing about the successor. (Away without the store, beats land as usual.)"""
    last = state.answered_at
    away = last is not None and event.now - last >= 2 * config.heartbeat_interval
    return state.hosts_store and away


def _sighted(state: MemberState, event: LookRead, config: RendezvousConfig) -> LivenessTracker:
    """The tracker with this look's sighting of the successor; its clock starts again after a
    silent store (a store host paused for seconds is not dead, nor are the beats it held up)
    and after this node was away (a paused store host's own looks)."""
    assert state.successor is not None
    blind = store_was_silent(state, event, config) or observer_was_away(state, event, config)
    tracker = LivenessTracker() if blind else state.liveness
    return tracker.observe(state.successor, event.beat, event.now)


# -- actions -----------------------------------------------------------------------------------

Out = tuple[MemberState, tuple[object, ...]]


def look(state: MemberState, event: LookRequested, config: RendezvousConfig) -> Out:
    assert state.result is not None
    successor = membership.ring_successor(state.result, state.node)
    new = evolve(state, attempt=event.attempt, successor=successor, seen=None, asked_at=event.now)
    ops = look_ops(state, event.attempt, config.leased_liveness)
    return new, (StoreOps(ops),)


def _after_look(state: MemberState, watch: RoundWatch) -> MemberState:
    changes: dict[str, object] = {"seen": None, "successor": None, "asked_at": None}
    if watch.waiting > 0:
        changes["arrivals_seen"] = True
    if watch.next_attempt is not None:
        changes["attempt_seen"] = max(state.attempt_seen, state.attempt + 1)
    if watch.closed is not None:
        changes["closed"] = True
    return evolve(state, **changes)  # type: ignore[arg-type]


def answer(state: MemberState, event: LookRead, config: RendezvousConfig) -> Out:
    liveness = state.liveness
    if state.successor is not None and not config.leased_liveness:
        liveness = _sighted(state, event, config)
    silent_until = event.now if served_nobody(state, event, config) else state.store_silent_until
    new = evolve(
        _after_look(state, event.watch),
        liveness=liveness,
        store_silent_until=silent_until,
        answered_at=event.now if state.successor is not None else state.answered_at,
        watcher_seen=state.watcher_seen if event.watcher_beat is None else event.watcher_beat,
    )
    return new, (Looked(watch=event.watch),)


def report_dead(state: MemberState, event: LookRead, config: RendezvousConfig) -> Out:
    assert state.result is not None and state.successor is not None
    dead = state.successor
    new = evolve(state, seen=event.watch)
    round_no = state.result.round_no
    said = Emit(name="rdzv.found_dead", fields=(("round", round_no), ("node", dead)))
    ops = membership.report_dead_ops(
        state.keys,
        state.result,
        dead,
        reporter=state.node,
        attempt=carried_attempt(state, state.attempt),
    )
    return new, (said, StoreOps(ops))


def answer_reported(state: MemberState, event: DeathReported, config: RendezvousConfig) -> Out:
    assert state.seen is not None
    watch = evolve(state.seen, next_opened=event.next_opened)
    return _after_look(state, watch), (Looked(watch=watch),)


def locate_forming(state: MemberState, event: CloseRequested, config: RendezvousConfig) -> Out:
    new = evolve(state, close=(event.outcome, event.reason))
    # The closed record goes first: it stands even when the state is too damaged to find the
    # forming round (a close for corrupt state), and every reader checks it.
    record = membership.close_ops(state.keys, 0, event.outcome, event.reason)[0]
    return new, (StoreOps((record, Get(state.keys.published_rounds()))),)


def probe_first(state: MemberState, event: HintRead, config: RendezvousConfig) -> Out:
    start = event.published
    if state.result is not None:
        start = max(start, state.result.round_no + 1)
    new = evolve(state, probe_from=start, probing=start)
    return new, (StoreOps(_probe_ops(state.keys, start)),)


def probe_next(state: MemberState, event: ResultsProbed, config: RendezvousConfig) -> Out:
    return _probe(state, state.probing + 1)


def probe_back(state: MemberState, event: ResultsProbed, config: RendezvousConfig) -> Out:
    # Results are contiguous from round 0: scan forward again from just after this node's own
    # round (whose result exists), or from 0 when even that one is missing (the store started
    # again empty). Never one round back per probe: the hint may be 10^9.
    floor = state.result.round_no + 1 if state.result is not None else 0
    return _probe(state, floor if floor < state.probing else 0)


def _probe(state: MemberState, round_no: int) -> Out:
    return evolve(state, probing=round_no), (StoreOps(_probe_ops(state.keys, round_no)),)


def write_close(state: MemberState, event: ResultsProbed, config: RendezvousConfig) -> Out:
    assert state.close is not None
    outcome, reason = state.close
    ops = membership.close_ops(state.keys, state.probing, outcome, reason)
    return state, (StoreOps(ops),)


def check_closed(state: MemberState, event: LeaveRequested, config: RendezvousConfig) -> Out:
    return state, (StoreOps((Get(state.keys.closed()),)),)


def left_without_writing(state: MemberState, event: object, config: RendezvousConfig) -> Out:
    return state, (Left(wrote=False),)


def write_leave(state: MemberState, event: ClosedRead, config: RendezvousConfig) -> Out:
    assert state.result is not None
    attempt = carried_attempt(state, state.attempt)
    ops = membership.leave_ops(state.keys, state.result, state.node, attempt=attempt)
    return state, (StoreOps(ops),)


def left(state: MemberState, event: Written, config: RendezvousConfig) -> Out:
    return state, (Left(wrote=True),)


def closed(state: MemberState, event: Written, config: RendezvousConfig) -> Out:
    return evolve(state, closed=True, close=None), (Closed(),)


def fail_unreadable(state: MemberState, event: RepliesUnreadable, config: RendezvousConfig) -> Out:
    new = evolve(state, seen=None, successor=None, close=None)
    return new, (MemberFailed(kind="corrupt", reason=event.reason),)


def fail_no_forming(state: MemberState, event: ResultsProbed, config: RendezvousConfig) -> Out:
    reason = f"no forming round within {MAX_PROBES} rounds of round {state.probe_from}"
    return evolve(state, close=None), (MemberFailed(kind="corrupt", reason=reason),)


P = MemberPhase
R = Row
ROWS = (
    R(src=P.IDLE, on=LookRequested, dst=P.LOOKING, guard="in_a_round", action="look"),
    R(
        src=P.LOOKING,
        on=LookRead,
        dst=P.REPORTING,
        guard="successor_dead",
        action="report_dead",
        note="mark it gone and open R+1 (first writer wins)",
    ),
    R(src=P.LOOKING, on=LookRead, dst=P.IDLE, guard="successor_alive", action="answer"),
    R(src=P.LOOKING, on=RepliesUnreadable, dst=P.IDLE, action="fail_unreadable"),
    R(src=P.REPORTING, on=DeathReported, dst=P.IDLE, action="answer_reported"),
    R(src=P.REPORTING, on=RepliesUnreadable, dst=P.IDLE, action="fail_unreadable"),
    R(src=P.IDLE, on=CloseRequested, dst=P.LOCATING, action="locate_forming"),
    R(src=P.LOCATING, on=HintRead, dst=P.PROBING, action="probe_first"),
    R(src=P.LOCATING, on=RepliesUnreadable, dst=P.IDLE, action="fail_unreadable"),
    R(
        src=P.PROBING,
        on=ResultsProbed,
        dst=P.CLOSING,
        guard="forming_found",
        action="write_close",
        note="the close takes the forming round's result slot",
    ),
    R(src=P.PROBING, on=ResultsProbed, dst=P.PROBING, guard="probe_taken", action="probe_next"),
    R(
        src=P.PROBING,
        on=ResultsProbed,
        dst=P.PROBING,
        guard="probe_behind",
        action="probe_back",
        note="the hint ran ahead of the results (or the store started again empty): scan again",
    ),
    R(
        src=P.PROBING,
        on=ResultsProbed,
        dst=P.IDLE,
        action="fail_no_forming",
        note="results past MAX_PROBES rounds of the hint: not a state a run reaches",
    ),
    R(src=P.PROBING, on=RepliesUnreadable, dst=P.IDLE, action="fail_unreadable"),
    R(src=P.CLOSING, on=Written, dst=P.IDLE, action="closed"),
    R(
        src=P.IDLE,
        on=LeaveRequested,
        dst=P.IDLE,
        guard="nothing_to_leave",
        action="left_without_writing",
    ),
    R(
        src=P.IDLE,
        on=LeaveRequested,
        dst=P.CHECKING,
        guard="something_to_leave",
        action="check_closed",
    ),
    R(
        src=P.CHECKING,
        on=ClosedRead,
        dst=P.IDLE,
        guard="run_closed",
        action="left_without_writing",
        note="the job is over for everyone: nothing to open",
    ),
    R(
        src=P.CHECKING,
        on=ClosedRead,
        dst=P.LEAVING,
        guard="run_open",
        action="write_leave",
        note="its gone mark, and the next round opened: leaving never closes the rendezvous",
    ),
    R(src=P.CHECKING, on=RepliesUnreadable, dst=P.IDLE, action="fail_unreadable"),
    R(src=P.LEAVING, on=Written, dst=P.IDLE, action="left"),
)
GUARDS: dict[str, Guard] = {
    "nothing_to_leave": nothing_to_leave,
    "something_to_leave": something_to_leave,
    "run_closed": run_closed,
    "run_open": run_open,
    "in_a_round": in_a_round,
    "successor_dead": successor_dead,
    "successor_alive": successor_alive,
    "forming_found": forming_found,
    "probe_taken": probe_taken,
    "probe_behind": probe_behind,
}
ACTIONS: dict[str, Action] = {
    "check_closed": check_closed,
    "left_without_writing": left_without_writing,
    "write_leave": write_leave,
    "left": left,
    "look": look,
    "answer": answer,
    "report_dead": report_dead,
    "answer_reported": answer_reported,
    "locate_forming": locate_forming,
    "probe_first": probe_first,
    "probe_next": probe_next,
    "probe_back": probe_back,
    "write_close": write_close,
    "closed": closed,
    "fail_unreadable": fail_unreadable,
    "fail_no_forming": fail_no_forming,
}
TABLE = build_table(
    name="rendezvous_member",
    phases=MemberPhase,
    initial=P.IDLE,
    events=MEMBER_EVENTS,
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    doc=__doc__ or "",
)


def step(state: MemberState, event: object, config: RendezvousConfig) -> Step[MemberState]:
    """Apply one event to a member's view of its round (unknown pairs are rejected cleanly)."""
    return TABLE.step(state, event, config)


__all__ = [
    "MAX_PROBES",
    "MEMBER_EVENTS",
    "TABLE",
    "CloseRequested",
    "Closed",
    "ClosedRead",
    "LeaveRequested",
    "Left",
    "DeathReported",
    "HintRead",
    "LookRead",
    "LookRequested",
    "Looked",
    "MemberFailed",
    "MemberPhase",
    "MemberState",
    "RepliesUnreadable",
    "ResultsProbed",
    "Written",
    "change_keys",
    "decode",
    "look_ops",
    "carried_attempt",
    "member_state",
    "step",
]
