"""The rendezvous join's guards, and the readers that its guards and actions share.

Each reader reads one step's store replies through :mod:`tpelastic.core.rendezvous.reading`
(or :mod:`~tpelastic.core.rendezvous.resuming`) into a verdict, once per step; each guard is one
named yes/no question about the state, the event or a verdict. ``GUARDS`` maps the names the rows
of :mod:`tpelastic.core.rendezvous.join` use to them. All pure.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from tpelastic.core.rendezvous import reading, reform, resuming
from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.ops import OpsDone, WaitEnded
from tpelastic.core.rendezvous.records import encode_result
from tpelastic.core.rendezvous.state import JoinRequested, JoinState
from tpelastic.core.table import Guard

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
location = reading.once_per_step(_without_config(reading.read_location))
probe_verdict = reading.once_per_step(_without_config(reading.read_probe))
resume_verdict = reading.once_per_step(_without_config(resuming.read_resume))
status = reading.once_per_step(reform.read_status)
reform_check = reading.once_per_step(reform.read_check)
confirmation = reading.once_per_step(_without_config(reform.read_confirm))
collection = reading.once_per_step(reading.read_collection)
result_verdict = reading.once_per_step(_without_config(reform.read_any_result))


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


def _from_a_round(state: JoinState, event: JoinRequested, config: RendezvousConfig) -> bool:
    """A member of a round joins the next one, which another member opened."""
    return (
        event.from_round is not None
        and event.arrived_round is None
        and event.reason in reform.CONFIRMING_REASONS
    )


def _probe_finds_member(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
    """The forming round is found, and this node, which may resume, is in the round before."""
    verdict = probe_verdict(state, event, config)
    return verdict.kind == "open" and resuming.finds_member(state, verdict.previous)


def _closer_slot(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
    """This node took slot 0, so it closes the round."""
    return state.is_closer


@reading.once_per_step
def won_publish(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
    """The stored result is exactly the one this node offered."""
    # Remembered per step like the readers: five guards and an action ask, and encoding the
    # draft is O(world size).
    return state.draft is not None and event.replies[0] == encode_result(state.draft)


def _in_draft(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
    """The result this closer published includes this node, and is not void."""
    draft = state.draft
    return draft is not None and not draft.void and draft.rank_of(state.node.node) is not None


def _lost(kind: str) -> Guard:
    def guard(state: JoinState, event: OpsDone, config: RendezvousConfig) -> bool:
        return (
            not won_publish(state, event, config)
            and result_verdict(state, event, config).kind == kind
        )

    guard.__doc__ = f"another closer's result landed first and reads as {kind!r}"
    return guard


GUARDS: dict[str, Guard] = {
    "location_closed": _verdict_is(location, "closed"),
    "location_corrupt": _verdict_is(location, "corrupt"),
    "probe_taken": _verdict_is(probe_verdict, "taken"),
    "probe_closed": _verdict_is(probe_verdict, "closed"),
    "probe_corrupt": _verdict_is(probe_verdict, "corrupt"),
    "probe_behind": _verdict_is(probe_verdict, "behind"),
    "probe_forgotten": _verdict_is(probe_verdict, "forgotten"),
    "closer_slot": _closer_slot,
    "from_a_round": _from_a_round,
    "reform_closed": _verdict_is(reform_check, "closed"),
    "reform_corrupt": _verdict_is(reform_check, "corrupt"),
    "reform_decided": _verdict_is(reform_check, "decided"),
    "proposal_names_me": _verdict_is(reform_check, "confirm"),
    "last_to_confirm": _verdict_is(confirmation, "last"),
    "first_to_confirm": _verdict_is(confirmation, "first"),
    "proposal_stalled": _verdict_is(status, "void"),
    "retrying": _retrying,
    "probe_finds_member": _probe_finds_member,
    "resume_closed": _verdict_is(resume_verdict, "closed"),
    "resume_corrupt": _verdict_is(resume_verdict, "corrupt"),
    "still_member": _verdict_is(resume_verdict, "member"),
    "slot_held": _verdict_is(resume_verdict, "slot"),
    "may_close": _verdict_is(status, "close"),
    "result_exists": _verdict_is(status, "decided"),
    "status_closed": _verdict_is(status, "closed"),
    "status_corrupt": _verdict_is(status, "corrupt"),
    "join_window_over": _verdict_is(status, "timeout"),
    "slots_unwritten": _verdict_is(collection, "unwritten"),
    "collection_corrupt": _verdict_is(collection, "corrupt"),
    "collection_timed_out": _verdict_is(collection, "timeout"),
    "won_publish": won_publish,
    "in_draft": _in_draft,
    "lost_to_mine": _lost("mine"),
    "lost_to_not_mine": _lost("not_mine"),
    "lost_to_closed": _lost("closed"),
    "lost_to_corrupt": _lost("corrupt"),
    "result_mine": _verdict_is(result_verdict, "mine"),
    "result_not_mine": _verdict_is(result_verdict, "not_mine"),
    "result_closed": _verdict_is(result_verdict, "closed"),
    "result_corrupt": _verdict_is(result_verdict, "corrupt"),
    "keys_present": _wait_present,
    "deadline_passed": _deadline_passed,
}
