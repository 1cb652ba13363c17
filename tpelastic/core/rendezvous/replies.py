"""What the store's replies to a join's request say, as typed facts (pure values).

The join machine asks the store something in every phase; the replies come back as one
``OpsDone`` of raw bytes and counters. Before the table is stepped,
:func:`tpelastic.core.rendezvous.reading.decode` reads them once, for the phase that asked, into
one of the events here: a domain fact (the run is closed; round 4 has a result; these members of
the last round are still expected), whose fields the join table's guards and actions read. A
reply that is not ours decodes to :class:`RepliesUnreadable`, never an exception.
"""

from __future__ import annotations

from attrs import frozen

from tpelastic.core.rendezvous.liveness import LivenessTracker
from tpelastic.core.rendezvous.records import NodeInfo, ProposalRecord, RoundResult
from tpelastic.core.values import Instant, value_eq, value_hash, value_repr


@frozen(kw_only=True)
class RunClosed:
    """The run is closed (its closed record, or a closed result); ``reason`` says why."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    reason: str = ""


@frozen(kw_only=True)
class RepliesUnreadable:
    """A reply under one of our keys is not ours (foreign bytes, a newer schema, a count no
    run can reach); ``reason`` names the key."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    reason: str


@frozen(kw_only=True)
class Located:
    """The run is open; the lowest round that can still be forming is ``round_no`` (the
    published hint, and past the round this node comes from)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    round_no: int


@frozen(kw_only=True)
class RoundTaken:
    """The probed round has a result (``result``): it is complete."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    result: RoundResult


@frozen(kw_only=True)
class NoResults:
    """Neither the probed round nor the one before it has a result."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class RoundForming:
    """The probed round has no result, and the one before has ``previous`` (None: round 0)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    previous: RoundResult | None


@frozen(kw_only=True)
class ArrivedRoundRead:
    """(A retried join) the round it arrived in: its result (``current``, None while it
    forms), the one before (``previous``), whether the round after it was opened; or
    ``forgotten``: the store holds neither result (it started again empty)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    forgotten: bool = False
    previous: RoundResult | None = None
    current: RoundResult | None = None
    next_opened: bool = False


@frozen(kw_only=True)
class ReformChecked:
    """(A member of round R) R's result (``previous``: held or read; None when the store has
    none) and the proposal for R+1 (None: none was made). R+1 has no result yet."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    previous: RoundResult | None = None
    proposal: ProposalRecord | None = None


@frozen(kw_only=True)
class RoundDecided:
    """The round this node reads about already has a result."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


@frozen(kw_only=True)
class Confirmed:
    """The confirmation counter after this survivor's add (None: not a number)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    count: int | None


@frozen(kw_only=True)
class StatusRead:
    """(A closer) the forming round, read once: ``arrivals`` counted; the previous round's
    ranks still expected (``pending``: not arrived, not gone, not dead to this observer); the
    nodes found dead by this read (``dead``) with the liveness judged so far (``liveness``);
    and, when the round was proposed as a re-form the previous round can complete, the
    ``proposal`` with its survivors that can no longer confirm (``lost``)."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    arrivals: int
    pending: tuple[int, ...] = ()
    dead: tuple[str, ...] = ()
    liveness: LivenessTracker = LivenessTracker()
    proposal: ProposalRecord | None = None
    lost: tuple[int, ...] = ()


@frozen(kw_only=True)
class SlotsRead:
    """(A closer) the arrivals' slots: who registered (``registered``), the participants
    chosen from them (``chosen``), the keys of slots counted but unwritten (``missing``), and
    the failures reported in this round."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    chosen: tuple[NodeInfo, ...]
    registered: int
    missing: tuple[str, ...] = ()
    failures: int = 0


@frozen(kw_only=True)
class ResultRead:
    """The round's result (``result``); ``won``: it is the very one this closer offered."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    result: RoundResult
    won: bool = False


@frozen(kw_only=True)
class SlotTaken:
    """This node's arrival counted it into slot ``slot`` of the round."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant
    slot: int


@frozen(kw_only=True)
class Written:
    """The writes asked for are done."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    now: Instant


REPLY_EVENTS: tuple[type, ...] = (
    RunClosed,
    RepliesUnreadable,
    Located,
    RoundTaken,
    NoResults,
    RoundForming,
    ArrivedRoundRead,
    ReformChecked,
    RoundDecided,
    Confirmed,
    StatusRead,
    SlotsRead,
    ResultRead,
    SlotTaken,
    Written,
)
"""Every fact the join's replies decode to (the join table's events besides the request and
the end of a wait)."""

__all__ = [
    "REPLY_EVENTS",
    "ArrivedRoundRead",
    "Confirmed",
    "Located",
    "NoResults",
    "ReformChecked",
    "RepliesUnreadable",
    "ResultRead",
    "RoundDecided",
    "RoundForming",
    "RoundTaken",
    "RunClosed",
    "SlotTaken",
    "SlotsRead",
    "StatusRead",
    "Written",
]
