"""Every decision of a finished agent's departure is in this table: who waits, for what, how long.

Once the agent is terminal, its store may still be needed: the node whose process runs the
rendezvous store's server is where every peer learns how the job ended. So before the store
goes down with it, a finished host waits (bounded) until every peer of its world has said it
is done, or, with no world joined (the job ended in its first join), until no peer is
connected any more. A node that hosts nothing only says it is done. Which ends wait at all:

* the job ended for everyone (exit 0, or 1: failed and closed): every node says so, the host
  waits for the others;
* a rendezvous failure (exit 3) on the host: it may have closed the run for corrupt state,
  which its peers can only read from its store, so it waits too; elsewhere it only goes;
* a signal (exit 128 + signum): the node leaves at once, and waits for nobody.

The wait lasts at most ``wait`` (``min(DEPART_WAIT, exit_barrier_timeout)``) from its start,
read in slices; a stop signal, or a store that cannot be reached (the peers' host is gone:
nothing is left to wait for), ends it at once.

Pure: the driver carries out ``MarkDeparted`` (add this node to the round's departed counter:
its outcome is ``DepartedRead`` with the counter, or ``DepartFailed``), ``ReadDeparted``
(read the counter again at ``at``), ``AwaitAlone`` (wait until no peer is connected, at most
until ``until``: ``PeersRead``) and feeds back what happened; the machine is terminal
(``DEPARTED``) when nothing is left to wait for.
"""

from __future__ import annotations

import enum

from attrs import evolve, field, frozen, validators

from tpelastic.core.agent.states import EXIT_OK, EXIT_RENDEZVOUS_FAILED, EXIT_WORKERS_FAILED
from tpelastic.core.table import Action, Guard, Row, Step, build_table
from tpelastic.core.values import Duration, Instant, _positive, value_eq, value_hash, value_repr

# How long a finished store host keeps its store up for peers still closing (seconds).
DEPART_WAIT = 10.0
# How often the departed counter is read while the host waits.
DEPARTED_POLL = 0.02
# The longest slice of the wait for the peers' disconnect (a stop signal is seen between them).
ALONE_SLICE = 0.1


class DepartPhase(enum.Enum):
    IDLE = "IDLE"  # the agent is not finished yet
    MARKING = "MARKING"  # this node is adding itself to the departed counter
    WAITING = "WAITING"  # the host waits for the rest of its world to depart
    AWAITING_ALONE = "AWAITING_ALONE"  # the host, with no world, waits for peers to disconnect
    DEPARTED = "DEPARTED"  # terminal: the teardown goes on


TERMINAL = frozenset({DepartPhase.DEPARTED})


@frozen(kw_only=True)
class DepartureConfig:
    """``wait``: the longest the host waits; ``poll``: between counter reads; ``alone_slice``:
    the longest one wait for the peers' disconnect."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    wait: Duration = field(default=DEPART_WAIT, validator=validators.ge(0.0))
    poll: Duration = field(default=DEPARTED_POLL, validator=_positive)
    alone_slice: Duration = field(default=ALONE_SLICE, validator=_positive)


def departure_config(exit_barrier_timeout: Duration) -> DepartureConfig:
    """The departure of an agent whose exit barrier waits ``exit_barrier_timeout``: the host
    waits no longer than the barrier would, and at most :data:`DEPART_WAIT`."""
    return DepartureConfig(wait=min(DEPART_WAIT, exit_barrier_timeout))


@frozen(kw_only=True)
class DepartureState:
    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: DepartPhase = DepartPhase.IDLE
    hosts_store: bool = False
    world: int = field(default=0, validator=validators.ge(0))  # 0: no world joined
    until: Instant = 0.0  # the wait's deadline, on the driver's clock
    reason: str = ""  # DEPARTED: why nothing more is waited for


# -- events ------------------------------------------------------------------------------------


@frozen(kw_only=True)
class DepartureStarted:
    """The agent finished with ``exit_code``; ``world``: its round's size (None: it joined no
    round); ``hosts_store``: this process runs the rendezvous store's server."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    exit_code: int
    hosts_store: bool
    world: int | None = field(default=None, validator=validators.optional(validators.ge(1)))


@frozen(kw_only=True)
class DepartedRead:
    """``departed`` nodes of the round have said they are done (the counter, decoded)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    departed: int = field(validator=validators.ge(0))


@frozen(kw_only=True)
class PeersRead:
    """Whether any peer is still connected to this host's store (``alone``: none)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    alone: bool


@frozen(kw_only=True)
class DepartFailed:
    """The store could not be reached (its host is gone, or this node's store closed)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    reason: str


@frozen(kw_only=True)
class DepartStopped:
    """A stop signal came while departing: the teardown goes on at once."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


DEPART_EVENTS: tuple[type, ...] = (
    DepartureStarted,
    DepartedRead,
    PeersRead,
    DepartFailed,
    DepartStopped,
)

# -- effects -----------------------------------------------------------------------------------


@frozen(kw_only=True)
class MarkDeparted:
    """Add this node to the round's departed counter; the outcome is the counter's value."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash


@frozen(kw_only=True)
class ReadDeparted:
    """Read the departed counter at ``at`` (the driver's clock)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    at: Instant


@frozen(kw_only=True)
class AwaitAlone:
    """Wait until no peer is connected to this host's store, at most until ``until``."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    until: Instant


DEPART_EFFECTS: tuple[type, ...] = (MarkDeparted, ReadDeparted, AwaitAlone)

# -- guards ------------------------------------------------------------------------------------


def _ended_for_everyone(event: DepartureStarted) -> bool:
    if event.exit_code in (EXIT_OK, EXIT_WORKERS_FAILED):
        return True
    return event.exit_code == EXIT_RENDEZVOUS_FAILED and event.hosts_store


def goes_at_once(state: DepartureState, event: DepartureStarted, config: DepartureConfig) -> bool:
    """Nobody waits on this node's end: a signal, a rendezvous failure elsewhere than on the
    host, or no world joined and no store hosted?"""
    if not _ended_for_everyone(event):
        return True
    return event.world is None and not event.hosts_store


def says_done(state: DepartureState, event: DepartureStarted, config: DepartureConfig) -> bool:
    """The job ended for everyone and this node has a world to say it is done in?"""
    return _ended_for_everyone(event) and event.world is not None


def host_alone_wait(
    state: DepartureState, event: DepartureStarted, config: DepartureConfig
) -> bool:
    """The job ended for everyone in its first join, and this node hosts the store its peers
    may still be reading the close from?"""
    return _ended_for_everyone(event) and event.world is None and event.hosts_store


def host_waits(state: DepartureState, event: DepartedRead, config: DepartureConfig) -> bool:
    """This node hosts the store, short of the whole world departed, within the wait?"""
    return state.hosts_store and event.departed < state.world and event.now < state.until


def all_departed(state: DepartureState, event: DepartedRead, config: DepartureConfig) -> bool:
    """Not the host, or the whole world departed, or the wait is over?"""
    return not host_waits(state, event, config)


def alone_or_over(state: DepartureState, event: PeersRead, config: DepartureConfig) -> bool:
    """No peer is connected any more, or the wait is over?"""
    return event.alone or event.now >= state.until


def peers_left(state: DepartureState, event: PeersRead, config: DepartureConfig) -> bool:
    """A peer is still connected, within the wait?"""
    return not alone_or_over(state, event, config)


# -- actions -----------------------------------------------------------------------------------

Out = tuple[DepartureState, tuple[object, ...]]


def go(state: DepartureState, event: DepartureStarted, config: DepartureConfig) -> Out:
    reason = "nobody waits on this node's end"
    return evolve(state, hosts_store=event.hosts_store, reason=reason), ()


def mark(state: DepartureState, event: DepartureStarted, config: DepartureConfig) -> Out:
    assert event.world is not None
    new = evolve(
        state, hosts_store=event.hosts_store, world=event.world, until=event.now + config.wait
    )
    return new, (MarkDeparted(),)


def await_alone(state: DepartureState, event: DepartureStarted, config: DepartureConfig) -> Out:
    new = evolve(state, hosts_store=True, until=event.now + config.wait)
    return new, (AwaitAlone(until=min(new.until, event.now + config.alone_slice)),)


def read_again(state: DepartureState, event: DepartedRead, config: DepartureConfig) -> Out:
    return state, (ReadDeparted(at=min(state.until, event.now + config.poll)),)


def departed(state: DepartureState, event: DepartedRead, config: DepartureConfig) -> Out:
    if not state.hosts_store:
        reason = "said done; the store is not this node's"
    elif event.departed >= state.world:
        reason = f"all {state.world} nodes departed"
    else:
        reason = f"{event.departed} of {state.world} nodes departed within {config.wait:g}s"
    return evolve(state, reason=reason), ()


def alone(state: DepartureState, event: PeersRead, config: DepartureConfig) -> Out:
    reason = "no peer connected" if event.alone else f"peers still connected after {config.wait:g}s"
    return evolve(state, reason=reason), ()


def await_again(state: DepartureState, event: PeersRead, config: DepartureConfig) -> Out:
    return state, (AwaitAlone(until=min(state.until, event.now + config.alone_slice)),)


def store_gone(state: DepartureState, event: DepartFailed, config: DepartureConfig) -> Out:
    return evolve(state, reason=f"the store is gone: {event.reason}"), ()


def stopped(state: DepartureState, event: DepartStopped, config: DepartureConfig) -> Out:
    return evolve(state, reason="a stop signal came"), ()


D = DepartPhase
_LIVE = (D.MARKING, D.WAITING, D.AWAITING_ALONE)
ROWS = (
    Row(src=D.IDLE, on=DepartureStarted, dst=D.DEPARTED, guard="goes_at_once", action="go"),
    Row(src=D.IDLE, on=DepartureStarted, dst=D.MARKING, guard="says_done", action="mark"),
    Row(
        src=D.IDLE,
        on=DepartureStarted,
        dst=D.AWAITING_ALONE,
        guard="host_alone_wait",
        action="await_alone",
        note="no world to count departures in: the peers' disconnect says they read the end",
    ),
    *(
        row
        for src in (D.MARKING, D.WAITING)
        for row in (
            Row(src=src, on=DepartedRead, dst=D.WAITING, guard="host_waits", action="read_again"),
            Row(
                src=src,
                on=DepartedRead,
                dst=D.DEPARTED,
                guard="all_departed",
                action="departed",
                note="a guest only says it is done; the host waited for all, or long enough",
            ),
        )
    ),
    Row(
        src=D.AWAITING_ALONE,
        on=PeersRead,
        dst=D.AWAITING_ALONE,
        guard="peers_left",
        action="await_again",
    ),
    Row(
        src=D.AWAITING_ALONE,
        on=PeersRead,
        dst=D.DEPARTED,
        guard="alone_or_over",
        action="alone",
    ),
    *(
        Row(
            src=src,
            on=DepartFailed,
            dst=D.DEPARTED,
            action="store_gone",
            note="the peers' host is gone: nothing is left to wait for",
        )
        for src in _LIVE
    ),
    *(Row(src=src, on=DepartStopped, dst=D.DEPARTED, action="stopped") for src in _LIVE),
)
GUARDS: dict[str, Guard] = {
    "goes_at_once": goes_at_once,
    "says_done": says_done,
    "host_alone_wait": host_alone_wait,
    "host_waits": host_waits,
    "all_departed": all_departed,
    "alone_or_over": alone_or_over,
    "peers_left": peers_left,
}
ACTIONS: dict[str, Action] = {
    "go": go,
    "mark": mark,
    "await_alone": await_alone,
    "read_again": read_again,
    "departed": departed,
    "alone": alone,
    "await_again": await_again,
    "store_gone": store_gone,
    "stopped": stopped,
}
TABLE = build_table(
    name="departure",
    phases=DepartPhase,
    initial=D.IDLE,
    events=DEPART_EVENTS,
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    terminal=TERMINAL,
    doc=(
        "How a finished agent departs. A job that ended for everyone (exit 0 or 1), or a "
        "rendezvous failure on the store's host (exit 3: it may have closed the run for "
        "corrupt state), makes the node say it is done (`MarkDeparted`); the host then reads "
        "the departed counter every `poll` until its whole world departed, or, with no world "
        "joined, waits for its peers to disconnect (`AwaitAlone`), for at most `wait` "
        "(`min(DEPART_WAIT, exit_barrier_timeout)`). A signal, or a rendezvous failure "
        "elsewhere, waits for nobody; a stop signal or a store that cannot be reached ends "
        "the wait at once."
    ),
)


def step(state: DepartureState, event: object, config: DepartureConfig) -> Step[DepartureState]:
    """Apply one observation to the departure (unknown pairs are rejected cleanly)."""
    return TABLE.step(state, event, config)


__all__ = [
    "ALONE_SLICE",
    "DEPARTED_POLL",
    "DEPART_EFFECTS",
    "DEPART_EVENTS",
    "DEPART_WAIT",
    "TABLE",
    "TERMINAL",
    "AwaitAlone",
    "DepartFailed",
    "DepartPhase",
    "DepartStopped",
    "DepartedRead",
    "DepartureConfig",
    "DepartureStarted",
    "DepartureState",
    "MarkDeparted",
    "PeersRead",
    "ReadDeparted",
    "departure_config",
    "step",
]
