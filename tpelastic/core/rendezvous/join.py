"""Every transition of one node's join of a rendezvous round is in this table.

A node joins by taking an arrival slot in the round still forming (an atomic counter), writing who
it is into that slot, and waiting for the round's result. The node in slot 0 is the *closer*: it
watches arrivals, the previous round's members and their heartbeats, and publishes the result
with set-if-absent once the round may complete; whoever's offer lands first wins, so a race
between closers is an ordinary transition. A node the result leaves out moves on to the next
round, where it counts as waiting. A join retried after losing the store first looks at the
round it arrived in (``RESUMING``, :mod:`tpelastic.core.rendezvous.resuming`) and takes up the place
it holds there, instead of arriving anew. A member of the last round whose peer left or died
finds the next round proposed as the last one without that peer, and only confirms it
(``REFORMING``, ``CONFIRMING``, :mod:`tpelastic.core.rendezvous.reform`).

A round may complete only when (one world at a time) every member of the previous round has
arrived, left, or been found dead (by the closer's own clock, or with leases by its heartbeat key
being gone); at least ``min_nodes`` arrived; and
either ``max_nodes`` arrived or the last call (``last_call_timeout`` after min was reached) is
over. Before each step the store's replies are decoded, once, into the typed fact they hold for
the phase that asked (:mod:`tpelastic.core.rendezvous.join_decode`, events of
:mod:`tpelastic.core.rendezvous.replies`); the rows are keyed by those facts, and the guards,
named here, read their fields. The table does not know which node it runs on.
"""

from __future__ import annotations

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.join_actions import ACTIONS
from tpelastic.core.rendezvous.join_decode import decode
from tpelastic.core.rendezvous.join_guards import GUARDS
from tpelastic.core.rendezvous.ops import WaitEnded
from tpelastic.core.rendezvous.replies import (
    REPLY_EVENTS,
    ArrivedRoundRead,
    Confirmed,
    Located,
    NoResults,
    ReformChecked,
    RepliesUnreadable,
    ResultRead,
    RoundDecided,
    RoundForming,
    RoundTaken,
    RunClosed,
    SlotsRead,
    SlotTaken,
    StatusRead,
    Written,
)
from tpelastic.core.rendezvous.state import TERMINAL, JoinPhase, JoinRequested, JoinState
from tpelastic.core.table import Row, Step, Table, build_table

# The guards (and the readers they share with the actions) are in join_guards.py, the actions in
# join_actions.py; this module holds the rows and the table. GUARDS, ACTIONS and TERMINAL stay
# importable from here, where the tests and the simulator's explorer take them.
__all__ = ["ACTIONS", "GUARDS", "ROWS", "TABLE", "TERMINAL", "decode", "step"]

P = JoinPhase

R = Row
_READS = (P.RESUMING, P.LOCATING, P.PROBING, P.REFORMING, P.GATHERING, P.PUBLISHING)
ROWS = (
    R(
        src=P.IDLE,
        on=JoinRequested,
        dst=P.RESUMING,
        guard="retrying",
        action="recheck",
        note="a retry: first look at the round it arrived in",
    ),
    R(
        src=P.IDLE,
        on=JoinRequested,
        dst=P.REFORMING,
        guard="from_a_round",
        action="check_reform",
        note="a member of the last round: first see whether a proposal names it",
    ),
    R(src=P.IDLE, on=JoinRequested, dst=P.LOCATING, action="locate"),
    *(
        R(src=p, on=RunClosed, dst=P.CLOSED, action="fail_closed")
        for p in (*_READS, P.READING_RESULT)
    ),
    *(
        R(src=p, on=RepliesUnreadable, dst=P.CORRUPT, action="fail_corrupt")
        for p in (*_READS, P.ARRIVING, P.COLLECTING, P.READING_RESULT)
    ),
    R(
        src=P.REFORMING,
        on=RoundDecided,
        dst=P.READING_RESULT,
        action="read_reformed",
        note="the next round already has a result: read it",
    ),
    R(
        src=P.REFORMING,
        on=ReformChecked,
        dst=P.CONFIRMING,
        guard="proposal_names_me",
        action="confirm",
        note="count itself in, having stopped its old world",
    ),
    R(
        src=P.REFORMING,
        on=ReformChecked,
        dst=P.LOCATING,
        action="locate_after_check",
        note="no proposal for it: join as usual",
    ),
    R(
        src=P.CONFIRMING,
        on=Confirmed,
        dst=P.PUBLISHING,
        guard="last_to_confirm",
        action="publish_reformed",
        note="its add completed the count: publish the round (offers race safely)",
    ),
    R(
        src=P.CONFIRMING,
        on=Confirmed,
        dst=P.GATHERING,
        guard="first_to_confirm",
        action="gather",
        note="the first one watches the others, as a closer: gone or dead, it gives up",
    ),
    R(src=P.CONFIRMING, on=Confirmed, dst=P.FOLLOWING, action="follow"),
    R(
        src=P.RESUMING,
        on=ArrivedRoundRead,
        dst=P.COMPLETE,
        guard="still_member",
        action="resume",
        note="its round completed with it, and its world still stands: take up its place",
    ),
    R(
        src=P.RESUMING,
        on=ArrivedRoundRead,
        dst=P.REGISTERING,
        guard="slot_held",
        action="reclaim",
        note="its round is still forming: write its slot again and wait as before",
    ),
    R(
        src=P.RESUMING,
        on=ArrivedRoundRead,
        dst=P.LOCATING,
        guard="store_forgot",
        action="relocate_as_newcomer",
        note="the store started again empty: join what forms as a newcomer",
    ),
    R(
        src=P.RESUMING,
        on=ArrivedRoundRead,
        dst=P.LOCATING,
        guard="world_ended",
        action="rejoin_after_its_world",
        note="its round completed with it, but the next one opened (or it is void): rejoin",
    ),
    R(
        src=P.RESUMING,
        on=ArrivedRoundRead,
        dst=P.LOCATING,
        guard="maybe_found_dead",
        action="reform_around_it",
        note="its heartbeats may have failed: end its world so everyone re-forms around it",
    ),
    R(
        src=P.RESUMING,
        on=ArrivedRoundRead,
        dst=P.LOCATING,
        action="relocate",
        note="nothing to take up: join as usual (as a member of that round, if it is one)",
    ),
    R(src=P.LOCATING, on=Located, dst=P.PROBING, action="probe"),
    R(
        src=P.PROBING,
        on=RoundTaken,
        dst=P.PROBING,
        action="probe_next",
        note="that round is complete: look at the next",
    ),
    R(
        src=P.PROBING,
        on=NoResults,
        dst=P.LOCATING,
        guard="own_round_forgotten",
        action="locate_as_newcomer",
        note="the store holds no result of this node's round: join what forms as a newcomer",
    ),
    R(
        src=P.PROBING,
        on=NoResults,
        dst=P.PROBING,
        action="probe_back",
        note="the published hint ran ahead of the results: scan again from the lowest round",
    ),
    R(
        src=P.PROBING,
        on=RoundForming,
        dst=P.RESUMING,
        guard="probe_finds_member",
        action="recheck_previous",
        note="the latest round includes this node, which says it comes from before: a retry",
    ),
    R(
        src=P.PROBING,
        on=RoundForming,
        dst=P.ARRIVING,
        action="arrive",
        note="found the forming round",
    ),
    R(src=P.ARRIVING, on=SlotTaken, dst=P.REGISTERING, action="register"),
    R(src=P.REGISTERING, on=Written, dst=P.GATHERING, guard="closer_slot", action="gather"),
    R(src=P.REGISTERING, on=Written, dst=P.FOLLOWING, action="follow"),
    R(
        src=P.FOLLOWING,
        on=WaitEnded,
        dst=P.READING_RESULT,
        guard="keys_present",
        action="read_result",
    ),
    R(src=P.FOLLOWING, on=WaitEnded, dst=P.TIMED_OUT, guard="deadline_passed", action="time_out"),
    R(
        src=P.FOLLOWING,
        on=WaitEnded,
        dst=P.GATHERING,
        action="gather",
        note="the closer is slow or gone: close the round too (offers race safely)",
    ),
    R(
        src=P.GATHERING,
        on=RoundDecided,
        dst=P.READING_RESULT,
        action="read_result",
        note="another closer published first",
    ),
    R(
        src=P.GATHERING,
        on=StatusRead,
        dst=P.PUBLISHING,
        guard="proposal_stalled",
        action="publish_void",
        note="the survivors did not confirm in time: give the round up, the next one re-forms",
    ),
    R(src=P.GATHERING, on=StatusRead, dst=P.COLLECTING, guard="may_close", action="collect"),
    R(
        src=P.GATHERING,
        on=StatusRead,
        dst=P.TIMED_OUT,
        guard="join_window_over",
        action="fail_timeout_status",
    ),
    R(
        src=P.GATHERING,
        on=StatusRead,
        dst=P.WAITING,
        action="wait",
        note="block on the key whose arrival could change the verdict, until the next deadline",
    ),
    R(src=P.WAITING, on=WaitEnded, dst=P.GATHERING, action="gather"),
    R(
        src=P.COLLECTING,
        on=SlotsRead,
        dst=P.TIMED_OUT,
        guard="collection_timed_out",
        action="fail_timeout_collection",
        note="counted arrivals never wrote their slots and the join window is over",
    ),
    R(
        src=P.COLLECTING,
        on=SlotsRead,
        dst=P.WAITING,
        guard="slots_unwritten",
        action="await_slots",
        note="a counted arrival has not written its slot yet",
    ),
    R(src=P.COLLECTING, on=SlotsRead, dst=P.PUBLISHING, action="publish"),
    R(src=P.PUBLISHING, on=ResultRead, dst=P.ANNOUNCING, guard="won_publish", action="announce"),
    R(src=P.PUBLISHING, on=ResultRead, dst=P.COMPLETE, guard="result_mine", action="complete"),
    R(
        src=P.PUBLISHING,
        on=ResultRead,
        dst=P.ARRIVING,
        action="move_on",
        note="another closer's result landed first, without this node: wait in the next round",
    ),
    R(src=P.ANNOUNCING, on=Written, dst=P.COMPLETE, guard="in_draft", action="complete_as_closer"),
    R(
        src=P.ANNOUNCING,
        on=Written,
        dst=P.ARRIVING,
        action="move_on_from_draft",
        note="a closer left out of a full world waits in the next round",
    ),
    R(src=P.READING_RESULT, on=ResultRead, dst=P.COMPLETE, guard="result_mine", action="complete"),
    R(
        src=P.READING_RESULT,
        on=ResultRead,
        dst=P.ARRIVING,
        action="move_on",
        note="left out (late or beyond max_nodes): wait in the next round",
    ),
)

TABLE = build_table(
    name="rendezvous_join",
    phases=JoinPhase,
    initial=JoinPhase.IDLE,
    events=(JoinRequested, *REPLY_EVENTS, WaitEnded),
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    terminal=TERMINAL,
    doc=__doc__ or "",
)


def step(
    state: JoinState, event: object, config: RendezvousConfig, table: Table = TABLE
) -> Step[JoinState]:
    """Apply one event to a node's join: replies (``OpsDone``) are first decoded into the fact
    they hold for the phase that asked (:func:`~tpelastic.core.rendezvous.join_decode.decode`),
    then ``table`` is stepped with it. Unknown (phase, event) pairs are rejected cleanly."""
    return table.step(state, decode(state, event, config), config)
