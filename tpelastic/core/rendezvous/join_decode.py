"""The typed decoding of a join's store replies, before the join table is stepped (pure).

Every phase that asks the store something has one reader; :func:`decode` applies it to the
``OpsDone`` that answers, once, and the table is stepped with the fact it returns (an event of
:mod:`tpelastic.core.rendezvous.replies`). Replies in a phase that asked nothing are passed on
as they are, for the table to reject.
"""

from __future__ import annotations

from collections.abc import Callable

from tpelastic.core.rendezvous import reading, reform, resuming
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.ops import OpsDone
from tpelastic.core.rendezvous.records import encode_result
from tpelastic.core.rendezvous.replies import (
    Confirmed,
    RepliesUnreadable,
    ResultRead,
    SlotTaken,
    Written,
)
from tpelastic.core.rendezvous.state import JoinPhase, JoinState

Reader = Callable[[JoinState, OpsDone, RendezvousConfig], object]


def _confirmed(state: JoinState, event: OpsDone, config: RendezvousConfig) -> object:
    count = event.replies[0]
    return Confirmed(now=event.now, count=count if isinstance(count, int) else None)


def _slot_taken(state: JoinState, event: OpsDone, config: RendezvousConfig) -> object:
    try:
        slot = int(event.replies[0] or 0) - 1
    except (TypeError, ValueError):
        key = state.keys.arrivals(state.round_no)
        return RepliesUnreadable(now=event.now, reason=f"corrupt arrival counter at {key!r}")
    return SlotTaken(now=event.now, slot=slot)


def _written(state: JoinState, event: OpsDone, config: RendezvousConfig) -> object:
    return Written(now=event.now)


def _offer_settled(state: JoinState, event: OpsDone, config: RendezvousConfig) -> object:
    """The stored result after this closer's offer: its own draft (won), or another's."""
    draft = state.draft
    if draft is not None and event.replies[0] == encode_result(draft):
        return ResultRead(now=event.now, result=draft, won=True)
    return reform.read_any_result(state, event)


def _ignoring_config(reader: Callable[[JoinState, OpsDone], object]) -> Reader:
    def read(state: JoinState, event: OpsDone, config: RendezvousConfig) -> object:
        return reader(state, event)

    return read


READERS: dict[JoinPhase, Reader] = {
    JoinPhase.LOCATING: _ignoring_config(reading.read_location),
    JoinPhase.PROBING: _ignoring_config(reading.read_probe),
    JoinPhase.RESUMING: _ignoring_config(resuming.read_resume),
    JoinPhase.REFORMING: reform.read_check,
    JoinPhase.CONFIRMING: _confirmed,
    JoinPhase.ARRIVING: _slot_taken,
    JoinPhase.REGISTERING: _written,
    JoinPhase.GATHERING: reform.read_status,
    JoinPhase.COLLECTING: reading.read_collection,
    JoinPhase.PUBLISHING: _offer_settled,
    JoinPhase.ANNOUNCING: _written,
    JoinPhase.READING_RESULT: _ignoring_config(reform.read_any_result),
}
"""Phase -> the reader of the replies to the request that phase made."""


def decode(state: JoinState, event: object, config: RendezvousConfig) -> object:
    """``event`` as the join table takes it: the replies of an ``OpsDone`` read into the fact
    they hold for ``state``'s phase; any other event (or replies no phase asked for) as it is."""
    if type(event) is not OpsDone:
        return event
    reader = READERS.get(state.phase)
    return event if reader is None else reader(state, event, config)


__all__ = ["READERS", "decode"]
