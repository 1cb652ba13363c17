"""What a running member makes of what it sees of the rendezvous: every such decision is a row here.

While its workers run (and at the exit barrier, and while a failure is held) an agent looks at
the rendezvous beyond its round, reads its own keep-alive, and, when a join reports the run
closed, looks once more at how it was closed. This machine turns those observations into the
agent's events (``tpelastic.core.agent``): the node's composed step (:mod:`tpelastic.core.node`)
feeds each observation here first and the effects, in order, to the agent table (specs/node.md).
It decides

* what one look means, in priority order: the run closed, then the next round opened (this node
  is fenced out of its world), then the next in-place attempt of its round, then nodes waiting
  (only while the workers run); nothing else is news;
* when failed looks mean the rendezvous is lost: ``looks_lost`` in a row (one is noise: a busy
  store), counted from the last look that worked; for a fenced node the first (its workers are
  stopped already, and the store client has waited the outage out);
* when the node's own keep-alive has lapsed, so it must fence itself: the last heartbeat that
  landed is ``heartbeat_timeout - heartbeat_interval`` old (a peer may find it dead one interval
  later), unless the node hosts the store (its lapse is the store's too: see ``lapsed``); a
  silence in which a look proved the store answered nobody counts as a beat at its end, since
  every peer's clock of this node started again there (``keep_alive_since``);
* whether the node's own open of an in-place attempt, once it landed, starts the attempt's
  workers: only if its keep-alive held (the open may have waited out an outage in which peers
  found it dead); otherwise it is a lapse like any other;
* when a fenced node may re-join: once a heartbeat lands again (the store answers it), not
  before, since a node that joins and trains while its own keep-alive is lapsed is fenced again
  at once; a fenced node whose keep-alive has not come back within ``fence_timeout`` (the join
  timeout) has a failed rendezvous;
* what a join that found the run closed means: the close's outcome when a look can read it, else
  a failed rendezvous of kind ``closed``.

Pure: time and observations come in as arguments; the effects are the agent's events.
"""

from __future__ import annotations

import enum

from attrs import evolve, field, frozen, validators

from tpelastic.core.agent import events as ag
from tpelastic.core.table import Action, Guard, Row, Step, build_table
from tpelastic.core.values import Duration, Instant, value_eq, value_hash, value_repr


class MemberPhase(enum.Enum):
    WATCHING = "WATCHING"  # a member (or joiner) looking at the rendezvous beyond its round
    # The keep-alive lapsed and the node fenced itself: it waits for a heartbeat to land.
    FENCED = "FENCED"


@frozen(kw_only=True)
class MemberConfig:
    """The rendezvous's heartbeat (the same on every node) and how many failed looks are lost."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    # None: the rendezvous keeps no heartbeat of this node (fixed membership), so it never lapses.
    heartbeat_timeout: Duration | None = field(default=None)
    heartbeat_interval: Duration | None = field(default=None)
    looks_lost: int = field(default=3, validator=validators.ge(1))
    # The store's server runs in this node's process: a beat of it that could not land means
    # the store answered nobody either, so no peer could time it meanwhile (see ``lapsed``).
    hosts_store: bool = False
    # How long a fenced node waits for its keep-alive to come back before its rendezvous fails
    # (the join timeout; None: as long as it takes).
    fence_timeout: Duration | None = None


@frozen(kw_only=True)
class MemberState:
    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: MemberPhase = MemberPhase.WATCHING
    failed_looks: int = field(default=0, validator=validators.ge(0))  # in a row
    fenced_at: Instant | None = None  # FENCED only: when the lapse was read


# -- observations ----------------------------------------------------------------------------


@frozen(kw_only=True)
class LookDone:
    """One look at round ``round``'s surroundings (decoded store replies)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    round: int = field(validator=validators.ge(-1))
    closed: tuple[str, str] | None = None  # (outcome, reason) once the job is over
    next_opened: str | None = None  # why the next round opened
    next_attempt: tuple[int, str] | None = None  # (attempt, why) once our round's next opened
    waiting: int = field(default=0, validator=validators.ge(0))
    running: bool = True  # the workers run (nodes waiting only matter then)


@frozen(kw_only=True)
class LookFailed:
    """A look could not read the store."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    reason: str


@frozen(kw_only=True)
class KeepAliveRead:
    """This node's keep-alive: ``last_beat`` is when its last heartbeat landed (or, before the
    first, when it started), on this node's clock; ``silent_until`` the last instant a look
    proved the store answered nobody until (None: never), when its peers' clocks of this node
    started again."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    last_beat: Instant
    silent_until: Instant | None = None


@frozen(kw_only=True)
class OpenLanded:
    """This node's own open of in-place ``attempt`` of round ``round`` landed in the store; its
    keep-alive then is as in :class:`KeepAliveRead` (``last_beat`` and ``silent_until``, on this
    node's clock). The
    open may have waited out an outage longer than the heartbeat timeout: peers may have found
    this node dead meanwhile, so the attempt's workers start only if the keep-alive held."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    round: int = field(validator=validators.ge(0))
    attempt: int = field(validator=validators.ge(1))
    last_beat: Instant
    silent_until: Instant | None = None
    # When the open was sent (None: not known). An open that waited a lapse long may have
    # hidden a lapse: a beat that landed after the store came back does not undo it.
    asked_at: Instant | None = None


@frozen(kw_only=True)
class JoinClosed:
    """A join reported the run closed (``why``); ``closed`` is what a look then read of the
    close, None when it could not read it (the store may be gone with the job)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    why: str
    closed: tuple[str, str] | None = None


MEMBER_EVENTS: tuple[type, ...] = (LookDone, LookFailed, KeepAliveRead, OpenLanded, JoinClosed)
_OUTCOMES = ("succeeded", "failed")


# -- the arithmetic ------------------------------------------------------------------------------


def keep_alive_since(last_beat: Instant, silent_until: Instant | None) -> Instant:
    """Since when peers may be timing this node's keep-alive: its last landed heartbeat, or,
    when later, the end of a silence in which the store answered nobody (a peer's look that
    waited that long starts its clock of this node again)."""
    return last_beat if silent_until is None else max(last_beat, silent_until)


def keep_alive_lapsed(
    now: Instant,
    last_beat: Instant,
    heartbeat_timeout: Duration,
    heartbeat_interval: Duration,
    silent_until: Instant | None = None,
) -> bool:
    """Has this node's keep-alive lapsed: its last landed heartbeat (or the end of a silence
    that served nobody, see :func:`keep_alive_since`) ``heartbeat_timeout -
    heartbeat_interval`` old or older (a peer may find it dead within one more interval)?"""
    since = keep_alive_since(last_beat, silent_until)
    return now - since >= heartbeat_timeout - heartbeat_interval


# -- guards ------------------------------------------------------------------------------------


def look_closed(state: MemberState, event: LookDone, config: MemberConfig) -> bool:
    """Was the run closed (first in priority: the job is over)?"""
    return event.closed is not None


def look_next_round(state: MemberState, event: LookDone, config: MemberConfig) -> bool:
    """Not closed, and the next round opened (this node is fenced out of its world)?"""
    return event.closed is None and event.next_opened is not None


def look_next_attempt(state: MemberState, event: LookDone, config: MemberConfig) -> bool:
    """Neither closed nor a next round, and our round's next in-place attempt opened? A node
    in no round yet (round -1) has no attempt to follow."""
    quiet = event.closed is None and event.next_opened is None
    return quiet and event.next_attempt is not None and event.round >= 0


def look_nodes_waiting(state: MemberState, event: LookDone, config: MemberConfig) -> bool:
    """Nothing above, the workers run, and nodes wait to join?"""
    quiet = event.closed is None and event.next_opened is None
    follows = event.next_attempt is not None and event.round >= 0
    return quiet and not follows and event.running and event.waiting > 0


def looks_left(state: MemberState, event: LookFailed, config: MemberConfig) -> bool:
    """Fewer than ``looks_lost`` looks failed in a row, this one included?"""
    return state.failed_looks + 1 < config.looks_lost


def looks_lost(state: MemberState, event: LookFailed, config: MemberConfig) -> bool:
    """The ``looks_lost``-th failed look in a row?"""
    return not looks_left(state, event, config)


def lapsed(state: MemberState, event: KeepAliveRead | OpenLanded, config: MemberConfig) -> bool:
    """Has this node's keep-alive lapsed (see :func:`keep_alive_lapsed`)? Never for the node
    that hosts the store: its beats go to its own process, so a lapse is that process paused
    or starved, store included, and peers (whose looks then wait) restart their clocks when it
    answers again; a peer that did find it dead has opened the next round, which its next look
    sees. Fencing would end a world that trained on meanwhile."""
    timeout, interval = config.heartbeat_timeout, config.heartbeat_interval
    if timeout is None or interval is None or config.hosts_store:
        return False
    return keep_alive_lapsed(event.now, event.last_beat, timeout, interval, event.silent_until)


def open_waited_out(state: MemberState, event: OpenLanded, config: MemberConfig) -> bool:
    """Did the node's own open wait ``heartbeat_timeout - heartbeat_interval`` or longer (or is
    the keep-alive lapsed now)? The loop reads no keep-alive while the open waits, and a beat
    that landed once the store answered again hides a lapse peers may have acted on; the store
    host is exempt, as in :func:`lapsed`."""
    if lapsed(state, event, config):
        return True
    timeout, interval = config.heartbeat_timeout, config.heartbeat_interval
    if timeout is None or interval is None or config.hosts_store or event.asked_at is None:
        return False
    return event.now - event.asked_at >= timeout - interval


def still_lapsed(state: MemberState, event: KeepAliveRead, config: MemberConfig) -> bool:
    """Fenced, and the keep-alive is still lapsed, within ``fence_timeout`` of the fence?"""
    return lapsed(state, event, config) and not fence_over(state, event, config)


def fence_over(state: MemberState, event: KeepAliveRead, config: MemberConfig) -> bool:
    """Fenced, the keep-alive still lapsed, and ``fence_timeout`` has passed since the fence?"""
    timeout, since = config.fence_timeout, state.fenced_at
    if timeout is None or since is None or not lapsed(state, event, config):
        return False
    return event.now - since >= timeout


def keep_alive_holds(read: KeepAliveRead, config: MemberConfig) -> bool:
    """This machine's verdict on one read of a watching node's keep-alive: it holds (no
    ``KeepAliveLapsed`` would follow). What the dynamic handler's ``keep_alive_healthy`` and the
    shipped handler harness answer, so neither carries a copy of the rule."""
    return not lapsed(MemberState(), read, config)


def close_readable(state: MemberState, event: JoinClosed, config: MemberConfig) -> bool:
    """Could a look read the close's outcome (succeeded or failed)?"""
    return event.closed is not None and event.closed[0] in _OUTCOMES


# -- actions -----------------------------------------------------------------------------------

Out = tuple[MemberState, tuple[object, ...]]


def _seen(state: MemberState) -> MemberState:
    if state.failed_looks or state.fenced_at is not None:
        return evolve(state, failed_looks=0, fenced_at=None)
    return state


def report_closed(state: MemberState, event: LookDone, config: MemberConfig) -> Out:
    assert event.closed is not None
    outcome, why = event.closed
    known = outcome if outcome in _OUTCOMES else "failed"  # a foreign outcome is not a success
    return _seen(state), (ag.RendezvousClosed(now=event.now, outcome=known, reason=why),)  # type: ignore[arg-type]


def report_next_round(state: MemberState, event: LookDone, config: MemberConfig) -> Out:
    assert event.next_opened is not None
    opened = ag.NextRoundOpened(now=event.now, round=event.round + 1, reason=event.next_opened)
    return _seen(state), (opened,)


def report_attempt(state: MemberState, event: LookDone, config: MemberConfig) -> Out:
    assert event.next_attempt is not None
    attempt, why = event.next_attempt
    seen = ag.AttemptOpened(now=event.now, round=event.round, attempt=attempt, reason=why)
    return _seen(state), (seen,)


def report_waiting(state: MemberState, event: LookDone, config: MemberConfig) -> Out:
    return _seen(state), (ag.NodesWaiting(now=event.now, count=event.waiting),)


def quiet(state: MemberState, event: LookDone, config: MemberConfig) -> Out:
    return _seen(state), ()


def count_failed_look(state: MemberState, event: LookFailed, config: MemberConfig) -> Out:
    return evolve(state, failed_looks=state.failed_looks + 1), ()


def report_lost(state: MemberState, event: LookFailed, config: MemberConfig) -> Out:
    lost = ag.RendezvousFailed(now=event.now, reason=event.reason, kind="connection")
    return evolve(state, failed_looks=0, fenced_at=None), (lost,)


def report_lapse(
    state: MemberState, event: KeepAliveRead | OpenLanded, config: MemberConfig
) -> Out:
    age = event.now - keep_alive_since(event.last_beat, event.silent_until)
    reason = f"no heartbeat landed for {age:.1f}s"
    if (
        isinstance(event, OpenLanded)
        and event.asked_at is not None
        and not lapsed(state, event, config)
    ):
        reason = f"the open of attempt {event.attempt} waited {event.now - event.asked_at:.1f}s"
    fenced = evolve(state, fenced_at=event.now)
    return fenced, (ag.KeepAliveLapsed(now=event.now, reason=reason),)


def report_restored(state: MemberState, event: KeepAliveRead, config: MemberConfig) -> Out:
    restored = ag.KeepAliveRestored(now=event.now)
    return evolve(state, fenced_at=None, failed_looks=0), (restored,)


def report_fence_over(state: MemberState, event: KeepAliveRead, config: MemberConfig) -> Out:
    age = event.now - keep_alive_since(event.last_beat, event.silent_until)
    reason = (
        f"fenced: no heartbeat of this node landed for {age:.1f}s, past the join timeout "
        f"({config.fence_timeout:g}s)"
    )
    failed = ag.RendezvousFailed(now=event.now, reason=reason, kind="timeout")
    return evolve(state, fenced_at=None), (failed,)


def report_own_attempt(state: MemberState, event: OpenLanded, config: MemberConfig) -> Out:
    opened = ag.OwnAttemptOpened(now=event.now, round=event.round, attempt=event.attempt)
    return state, (opened,)


def ignore(state: MemberState, event: object, config: MemberConfig) -> Out:
    return state, ()


def report_close(state: MemberState, event: JoinClosed, config: MemberConfig) -> Out:
    assert event.closed is not None
    outcome, why = event.closed
    return state, (ag.RendezvousClosed(now=event.now, outcome=outcome, reason=why),)  # type: ignore[arg-type]


def report_closed_unread(state: MemberState, event: JoinClosed, config: MemberConfig) -> Out:
    return state, (ag.RendezvousFailed(now=event.now, reason=event.why, kind="closed"),)


W, F = MemberPhase.WATCHING, MemberPhase.FENCED
_JOIN_CLOSED = tuple(
    row
    for src in (W, F)
    for row in (
        Row(src=src, on=JoinClosed, dst=src, guard="close_readable", action="report_close"),
        Row(src=src, on=JoinClosed, dst=src, action="report_closed_unread"),
    )
)
ROWS = (
    Row(src=W, on=LookDone, dst=W, guard="look_closed", action="report_closed"),
    Row(src=W, on=LookDone, dst=W, guard="look_next_round", action="report_next_round"),
    Row(src=W, on=LookDone, dst=W, guard="look_next_attempt", action="report_attempt"),
    Row(src=W, on=LookDone, dst=W, guard="look_nodes_waiting", action="report_waiting"),
    Row(src=W, on=LookDone, dst=W, action="quiet", note="nothing new"),
    Row(src=W, on=LookFailed, dst=W, guard="looks_left", action="count_failed_look"),
    Row(src=W, on=LookFailed, dst=W, guard="looks_lost", action="report_lost"),
    Row(src=W, on=KeepAliveRead, dst=F, guard="lapsed", action="report_lapse"),
    Row(src=W, on=KeepAliveRead, dst=W, note="heartbeats land: nothing to do"),
    Row(
        src=W,
        on=OpenLanded,
        dst=F,
        guard="open_waited_out",
        action="report_lapse",
        note="the open waited out the keep-alive: peers may have found this node dead",
    ),
    Row(src=W, on=OpenLanded, dst=W, action="report_own_attempt", note="start the attempt"),
    Row(
        src=F,
        on=OpenLanded,
        dst=F,
        action="ignore",
        note="fenced meanwhile: the re-join joins whatever forms",
    ),
    Row(
        src=F,
        on=KeepAliveRead,
        dst=F,
        guard="still_lapsed",
        note="no heartbeat landed yet: a re-join now would train while lapsed",
    ),
    Row(
        src=F,
        on=KeepAliveRead,
        dst=W,
        guard="fence_over",
        action="report_fence_over",
        note="the keep-alive did not come back within the join timeout",
    ),
    Row(
        src=F,
        on=KeepAliveRead,
        dst=W,
        action="report_restored",
        note="a heartbeat landed: the store answers this node again, it re-joins",
    ),
    Row(src=F, on=LookDone, dst=W, guard="look_closed", action="report_closed"),
    Row(
        src=F,
        on=LookDone,
        dst=F,
        action="ignore",
        note="the re-join, once the keep-alive is back, joins whatever forms",
    ),
    Row(
        src=F,
        on=LookFailed,
        dst=W,
        action="report_lost",
        note="the store client waited the outage out: with no world to keep, it is lost",
    ),
    *_JOIN_CLOSED,
)
GUARDS: dict[str, Guard] = {
    "look_closed": look_closed,
    "look_next_round": look_next_round,
    "look_next_attempt": look_next_attempt,
    "look_nodes_waiting": look_nodes_waiting,
    "looks_left": looks_left,
    "looks_lost": looks_lost,
    "lapsed": lapsed,
    "still_lapsed": still_lapsed,
    "open_waited_out": open_waited_out,
    "fence_over": fence_over,
    "close_readable": close_readable,
}
ACTIONS: dict[str, Action] = {
    "report_closed": report_closed,
    "report_next_round": report_next_round,
    "report_attempt": report_attempt,
    "report_waiting": report_waiting,
    "quiet": quiet,
    "count_failed_look": count_failed_look,
    "report_lost": report_lost,
    "report_lapse": report_lapse,
    "report_restored": report_restored,
    "report_own_attempt": report_own_attempt,
    "report_fence_over": report_fence_over,
    "ignore": ignore,
    "report_close": report_close,
    "report_closed_unread": report_closed_unread,
}
TABLE = build_table(
    name="membership",
    phases=MemberPhase,
    initial=W,
    events=MEMBER_EVENTS,
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    doc=(
        "What a running member makes of what it sees of the rendezvous; the effects are the "
        "agent's events, fed to the agent table in order. A look means, in priority order: "
        "closed, the next round opened, our round's next attempt opened, nodes waiting (while "
        "the workers run). `looks_lost` failed looks in a row (fenced: one) are a lost "
        "rendezvous. A last "
        "landed heartbeat `heartbeat_timeout - heartbeat_interval` old is a lapsed keep-alive "
        "(FENCED: the agent stops its workers); the first read after a heartbeat landed again "
        "restores it (the agent re-joins), one still lapsed `fence_timeout` after the fence is "
        "a failed rendezvous. The node's own open of an attempt, once landed, starts the "
        "attempt (`OwnAttemptOpened`) only with the keep-alive held, else it is a lapse. "
        "A join that found the run closed reports the close's "
        "outcome when a look can read it, else a failed rendezvous of kind `closed`."
    ),
)


def step(state: MemberState, event: object, config: MemberConfig) -> Step[MemberState]:
    """What one observation means to the agent: the next state and the agent events, in order."""
    return TABLE.step(state, event, config)


__all__ = [
    "MEMBER_EVENTS",
    "TABLE",
    "JoinClosed",
    "KeepAliveRead",
    "LookDone",
    "LookFailed",
    "MemberConfig",
    "MemberPhase",
    "MemberState",
    "OpenLanded",
    "keep_alive_holds",
    "keep_alive_lapsed",
    "keep_alive_since",
    "step",
]
