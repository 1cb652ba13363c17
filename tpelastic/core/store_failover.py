"""Moving the rendezvous store to the next candidate host, guarded by a majority of the last round.

With ``--rdzv-endpoint h1:p,h2:p,h3:p`` (candidates, in that order) and no etcd, a node whose
store host is lost moves to the next candidate, and a round may form there only with a strict
majority of the latest round any of its arrivals knows. Two strict majorities of one round share
a member, and a member is in one round at a time, so two sides of a partition can never both
form a successor of the same round (see specs/store_failover.md).

Rules, per node:

* Before its first round a node uses the first candidate only (it waits there, never moves),
  and round 0 needs a strict majority of ``max_nodes``: there is one round 0.
* ``StoreLost`` (its store host is gone or unreachable): stop the workers, try the next
  candidate. ``CandidateDown``: try the one after. ``CandidateUp``: join there, announcing the
  latest round this node knows.
* ``ArrivalsSeen`` (who has arrived at this candidate, and the latest round each knows): with a
  strict majority of the latest known round's members among them, the round after it forms
  with every arrival; otherwise wait. ``NoQuorumYet`` (waited a while): try the next candidate,
  where the others may be.
* ``PeersLost`` (a member of the round is found dead while the store holds): stop the workers
  and join again on the same candidate.

Pure: the adapter carries out ``ConnectTo``, ``JoinAt``, ``StopWorkers``, ``StartRound`` and
``AwaitMajority``, and feeds back what it observed. This table is not yet stepped by the agent:
the launcher refuses a list of store hosts on the c10d/tcp backends (one line naming etcd).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from attrs import evolve, field, frozen, validators

from tpelastic.core.table import Action, Guard, Row, Step, build_table
from tpelastic.core.values import Instant, value_eq, value_hash, value_repr


class FailoverPhase(enum.Enum):
    JOINING = "joining"  # arrived at a candidate's store, waiting for a round there
    TRAINING = "training"  # in a formed round, workers running
    SEEKING = "seeking"  # store lost: trying a candidate


def _candidates(_instance: object, _attribute: object, value: tuple[str, ...]) -> None:
    if not value or len(set(value)) != len(value):
        raise ValueError(f"store candidates must be one or more distinct hosts, got {value!r}")


@frozen(kw_only=True)
class FailoverConfig:
    """``candidates``: the store hosts in the order nodes move through them; ``max_nodes``: the
    job's most nodes (no more are started), of which round 0 needs a strict majority."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    candidates: tuple[str, ...] = field(validator=_candidates)
    max_nodes: int = field(validator=validators.ge(1))


@frozen(kw_only=True)
class KnownRound:
    """A formed round: its number and its members."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    round: int
    members: frozenset[str]


@frozen(kw_only=True)
class Arrival:
    """A node at a candidate, and the latest round it knows (None: it was in none yet)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    node: str
    known: KnownRound | None


@frozen(kw_only=True)
class FailoverState:
    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    phase: FailoverPhase = FailoverPhase.JOINING
    node: str
    at: int = 0  # index of the candidate in use or being tried
    known: KnownRound | None = None


# -- events ------------------------------------------------------------------------------------


@frozen(kw_only=True)
class StoreLost:
    """The store host in use is gone or cannot be reached."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class CandidateDown:
    """The candidate being tried cannot be reached."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class CandidateUp:
    """The candidate being tried answers."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class ArrivalsSeen:
    """Who waits at this node's candidate (this node among them), and the latest round result
    that candidate's store holds (None: none, e.g. a host that came back empty)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    arrivals: tuple[Arrival, ...]
    stored: KnownRound | None = None


@frozen(kw_only=True)
class NoQuorumYet:
    """No majority arrived at this candidate for a while."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class PeersLost:
    """A member of this node's round is found dead; the store holds."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


FAILOVER_EVENTS: tuple[type, ...] = (
    StoreLost,
    CandidateDown,
    CandidateUp,
    ArrivalsSeen,
    NoQuorumYet,
    PeersLost,
)


# -- effects -----------------------------------------------------------------------------------


@frozen(kw_only=True)
class ConnectTo:
    """Effect: try to reach candidate ``candidate`` (an index into the config's candidates)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    candidate: int


@frozen(kw_only=True)
class JoinAt:
    """Effect: arrive at the candidate's store, announcing the latest round this node knows."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    candidate: int
    known: KnownRound | None


@frozen(kw_only=True)
class StopWorkers:
    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash


@frozen(kw_only=True)
class StartRound:
    """Effect: the round formed here; start the workers in it."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    known: KnownRound


@frozen(kw_only=True)
class AwaitMajority:
    """Effect: keep waiting; ``have`` of the ``of`` members of the latest round arrived."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    have: int
    of: int


# -- the quorum rule ---------------------------------------------------------------------------


def latest(arrivals: Iterable[Arrival], stored: KnownRound | None = None) -> KnownRound | None:
    """The latest round any arrival knows or the store holds (None when there is none)."""
    known = [a.known for a in arrivals if a.known is not None]
    known += [stored] if stored is not None else []
    return max(known, key=lambda k: k.round) if known else None


def next_round(
    arrivals: tuple[Arrival, ...], max_nodes: int, stored: KnownRound | None = None
) -> KnownRound | None:
    """The round that may form from ``arrivals`` at a store holding ``stored``, or None: every
    arrival is a member, and a strict majority of the latest known round's members must be
    among them; with no round known anywhere, round 0 needs a strict majority of
    ``max_nodes`` (two such sets of at most ``max_nodes`` nodes share one)."""
    if not arrivals:
        return None
    nodes = frozenset(a.node for a in arrivals)
    base = latest(arrivals, stored)
    if base is None:
        return KnownRound(round=0, members=nodes) if 2 * len(nodes) > max_nodes else None
    if 2 * len(nodes & base.members) <= len(base.members):
        return None
    return KnownRound(round=base.round + 1, members=nodes)


# -- guards ------------------------------------------------------------------------------------


def majority(state: FailoverState, event: ArrivalsSeen, config: FailoverConfig) -> bool:
    """A strict majority of the latest known round arrived here (this node among them)."""
    here = state.node in {a.node for a in event.arrivals}
    return here and next_round(event.arrivals, config.max_nodes, event.stored) is not None


def no_majority(state: FailoverState, event: ArrivalsSeen, config: FailoverConfig) -> bool:
    """Too few of the latest known round's members arrived here: wait."""
    return not majority(state, event, config)


def knows_a_round(state: FailoverState, event: object, config: FailoverConfig) -> bool:
    """Only a node that was in a round moves: round 0 forms on the first candidate alone."""
    return state.known is not None


def first_round_pending(state: FailoverState, event: object, config: FailoverConfig) -> bool:
    """This node was in no round yet: it stays on the first candidate."""
    return state.known is None


# -- actions -----------------------------------------------------------------------------------

Out = tuple[FailoverState, tuple[object, ...]]


def _next(state: FailoverState, config: FailoverConfig) -> Out:
    at = (state.at + 1) % len(config.candidates)
    return evolve(state, at=at), (ConnectTo(candidate=at),)


def leave_store(state: FailoverState, event: StoreLost, config: FailoverConfig) -> Out:
    new, effects = _next(state, config)
    stop = (StopWorkers(),) if state.phase is FailoverPhase.TRAINING else ()
    return new, stop + effects


def try_next(state: FailoverState, event: object, config: FailoverConfig) -> Out:
    return _next(state, config)


def retry_first(state: FailoverState, event: object, config: FailoverConfig) -> Out:
    return state, (ConnectTo(candidate=0),)


def join_here(state: FailoverState, event: CandidateUp, config: FailoverConfig) -> Out:
    return state, (JoinAt(candidate=state.at, known=state.known),)


def form(state: FailoverState, event: ArrivalsSeen, config: FailoverConfig) -> Out:
    formed = next_round(event.arrivals, config.max_nodes, event.stored)
    assert formed is not None  # the guard held
    return evolve(state, known=formed), (StartRound(known=formed),)


def wait_majority(state: FailoverState, event: ArrivalsSeen, config: FailoverConfig) -> Out:
    base = latest(event.arrivals, event.stored)
    of = len(base.members) if base is not None else config.max_nodes
    came = {a.node for a in event.arrivals}
    have = len(came & base.members) if base is not None else len(came)
    return state, (AwaitMajority(have=have, of=of),)


def rejoin(state: FailoverState, event: PeersLost, config: FailoverConfig) -> Out:
    return state, (StopWorkers(), JoinAt(candidate=state.at, known=state.known))


P = FailoverPhase
ROWS = (
    Row(src=P.JOINING, on=ArrivalsSeen, dst=P.TRAINING, guard="majority", action="form"),
    Row(src=P.JOINING, on=ArrivalsSeen, dst=P.JOINING, guard="no_majority", action="wait_majority"),
    Row(
        src=P.JOINING,
        on=NoQuorumYet,
        dst=P.SEEKING,
        guard="knows_a_round",
        action="try_next",
        note="the others may have moved on: look for them at the next candidate",
    ),
    Row(src=P.JOINING, on=StoreLost, dst=P.SEEKING, guard="knows_a_round", action="leave_store"),
    Row(
        src=P.JOINING,
        on=StoreLost,
        dst=P.SEEKING,
        guard="first_round_pending",
        action="retry_first",
        note="before round 0 only the first candidate is used",
    ),
    Row(src=P.TRAINING, on=StoreLost, dst=P.SEEKING, action="leave_store"),
    Row(src=P.TRAINING, on=PeersLost, dst=P.JOINING, action="rejoin"),
    Row(src=P.SEEKING, on=CandidateDown, dst=P.SEEKING, guard="knows_a_round", action="try_next"),
    Row(
        src=P.SEEKING,
        on=CandidateDown,
        dst=P.SEEKING,
        guard="first_round_pending",
        action="retry_first",
    ),
    Row(src=P.SEEKING, on=CandidateUp, dst=P.JOINING, action="join_here"),
)
GUARDS: dict[str, Guard] = {
    "majority": majority,
    "no_majority": no_majority,
    "knows_a_round": knows_a_round,
    "first_round_pending": first_round_pending,
}
ACTIONS: dict[str, Action] = {
    "leave_store": leave_store,
    "try_next": try_next,
    "retry_first": retry_first,
    "join_here": join_here,
    "form": form,
    "wait_majority": wait_majority,
    "rejoin": rejoin,
}
TABLE = build_table(
    name="store_failover",
    phases=FailoverPhase,
    initial=P.JOINING,
    events=FAILOVER_EVENTS,
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    terminal=frozenset(),
    doc=__doc__ or "",
)


def step(state: FailoverState, event: object, config: FailoverConfig) -> Step[FailoverState]:
    """Apply one event to one node's failover state (unknown pairs are rejected cleanly)."""
    return TABLE.step(state, event, config)


__all__ = [
    "FAILOVER_EVENTS",
    "TABLE",
    "Arrival",
    "ArrivalsSeen",
    "AwaitMajority",
    "CandidateDown",
    "CandidateUp",
    "ConnectTo",
    "FailoverConfig",
    "FailoverPhase",
    "FailoverState",
    "JoinAt",
    "KnownRound",
    "NoQuorumYet",
    "PeersLost",
    "StartRound",
    "StopWorkers",
    "StoreLost",
    "latest",
    "next_round",
    "step",
]
