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
over. Guards are named here and read replies through :mod:`tpelastic.core.rendezvous.reading`;
the table does not know which node it runs on.
"""

from __future__ import annotations

from tpelastic.core.rendezvous.config import RendezvousConfig
from tpelastic.core.rendezvous.join_actions import ACTIONS
from tpelastic.core.rendezvous.join_guards import GUARDS
from tpelastic.core.rendezvous.ops import OpsDone, WaitEnded
from tpelastic.core.rendezvous.state import TERMINAL, JoinPhase, JoinRequested, JoinState
from tpelastic.core.table import Row, Step, build_table

# The guards (and the readers they share with the actions) are in join_guards.py, the actions in
# join_actions.py; this module holds the rows and the table. GUARDS, ACTIONS and TERMINAL stay
# importable from here, where the tests and the simulator's explorer take them.
__all__ = ["ACTIONS", "GUARDS", "ROWS", "TABLE", "TERMINAL", "step"]

P = JoinPhase

R = Row
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
    R(
        src=P.REFORMING,
        on=OpsDone,
        dst=P.CLOSED,
        guard="reform_closed",
        action="fail_closed_reform",
    ),
    R(
        src=P.REFORMING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="reform_corrupt",
        action="fail_corrupt_reform",
    ),
    R(
        src=P.REFORMING,
        on=OpsDone,
        dst=P.READING_RESULT,
        guard="reform_decided",
        action="read_reformed",
        note="the next round already has a result: read it",
    ),
    R(
        src=P.REFORMING,
        on=OpsDone,
        dst=P.CONFIRMING,
        guard="proposal_names_me",
        action="confirm",
        note="count itself in, having stopped its old world",
    ),
    R(
        src=P.REFORMING,
        on=OpsDone,
        dst=P.LOCATING,
        action="locate_after_check",
        note="no proposal for it: join as usual",
    ),
    R(
        src=P.CONFIRMING,
        on=OpsDone,
        dst=P.PUBLISHING,
        guard="last_to_confirm",
        action="publish_reformed",
        note="its add completed the count: publish the round (offers race safely)",
    ),
    R(
        src=P.CONFIRMING,
        on=OpsDone,
        dst=P.GATHERING,
        guard="first_to_confirm",
        action="gather",
        note="the first one watches the others, as a closer: gone or dead, it gives up",
    ),
    R(src=P.CONFIRMING, on=OpsDone, dst=P.FOLLOWING, action="follow"),
    R(src=P.RESUMING, on=OpsDone, dst=P.CLOSED, guard="resume_closed", action="fail_closed_resume"),
    R(
        src=P.RESUMING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="resume_corrupt",
        action="fail_corrupt_resume",
    ),
    R(
        src=P.RESUMING,
        on=OpsDone,
        dst=P.COMPLETE,
        guard="still_member",
        action="resume",
        note="its round completed with it, and its world still stands: take up its place",
    ),
    R(
        src=P.RESUMING,
        on=OpsDone,
        dst=P.REGISTERING,
        guard="slot_held",
        action="reclaim",
        note="its round is still forming: write its slot again and wait as before",
    ),
    R(
        src=P.RESUMING,
        on=OpsDone,
        dst=P.LOCATING,
        action="relocate",
        note="nothing to take up: join as usual (as a member of that round, if it is one)",
    ),
    R(
        src=P.LOCATING,
        on=OpsDone,
        dst=P.CLOSED,
        guard="location_closed",
        action="fail_closed_location",
    ),
    R(
        src=P.LOCATING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="location_corrupt",
        action="fail_corrupt_location",
    ),
    R(src=P.LOCATING, on=OpsDone, dst=P.PROBING, action="probe"),
    R(
        src=P.PROBING,
        on=OpsDone,
        dst=P.PROBING,
        guard="probe_taken",
        action="probe_next",
        note="that round is complete: look at the next",
    ),
    R(
        src=P.PROBING,
        on=OpsDone,
        dst=P.PROBING,
        guard="probe_behind",
        action="probe_next",
        note="the published hint ran ahead of the results: scan again from the lowest round",
    ),
    R(
        src=P.PROBING,
        on=OpsDone,
        dst=P.LOCATING,
        guard="probe_forgotten",
        action="locate_as_newcomer",
        note="the store holds no result of this node's round: join what forms as a newcomer",
    ),
    R(src=P.PROBING, on=OpsDone, dst=P.CLOSED, guard="probe_closed", action="fail_closed_probe"),
    R(
        src=P.PROBING,
        on=OpsDone,
        dst=P.RESUMING,
        guard="probe_finds_member",
        action="recheck_previous",
        note="the latest round includes this node, which says it comes from before: a retry",
    ),
    R(src=P.PROBING, on=OpsDone, dst=P.CORRUPT, guard="probe_corrupt", action="fail_corrupt_probe"),
    R(src=P.PROBING, on=OpsDone, dst=P.ARRIVING, action="arrive", note="found the forming round"),
    R(src=P.ARRIVING, on=OpsDone, dst=P.REGISTERING, action="register"),
    R(src=P.REGISTERING, on=OpsDone, dst=P.GATHERING, guard="closer_slot", action="gather"),
    R(src=P.REGISTERING, on=OpsDone, dst=P.FOLLOWING, action="follow"),
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
        on=OpsDone,
        dst=P.CLOSED,
        guard="status_closed",
        action="fail_closed_status",
    ),
    R(
        src=P.GATHERING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="status_corrupt",
        action="fail_corrupt_status",
    ),
    R(
        src=P.GATHERING,
        on=OpsDone,
        dst=P.READING_RESULT,
        guard="result_exists",
        action="read_result",
        note="another closer published first",
    ),
    R(
        src=P.GATHERING,
        on=OpsDone,
        dst=P.PUBLISHING,
        guard="proposal_stalled",
        action="publish_void",
        note="the survivors did not confirm in time: give the round up, the next one re-forms",
    ),
    R(src=P.GATHERING, on=OpsDone, dst=P.COLLECTING, guard="may_close", action="collect"),
    R(
        src=P.GATHERING,
        on=OpsDone,
        dst=P.TIMED_OUT,
        guard="join_window_over",
        action="fail_timeout_status",
    ),
    R(
        src=P.GATHERING,
        on=OpsDone,
        dst=P.WAITING,
        action="wait",
        note="block on the key whose arrival could change the verdict, until the next deadline",
    ),
    R(src=P.WAITING, on=WaitEnded, dst=P.GATHERING, action="gather"),
    R(
        src=P.COLLECTING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="collection_corrupt",
        action="fail_corrupt_collection",
    ),
    R(
        src=P.COLLECTING,
        on=OpsDone,
        dst=P.TIMED_OUT,
        guard="collection_timed_out",
        action="fail_timeout_collection",
        note="counted arrivals never wrote their slots and the join window is over",
    ),
    R(
        src=P.COLLECTING,
        on=OpsDone,
        dst=P.WAITING,
        guard="slots_unwritten",
        action="await_slots",
        note="a counted arrival has not written its slot yet",
    ),
    R(src=P.COLLECTING, on=OpsDone, dst=P.PUBLISHING, action="publish"),
    R(src=P.PUBLISHING, on=OpsDone, dst=P.ANNOUNCING, guard="won_publish", action="announce"),
    R(src=P.PUBLISHING, on=OpsDone, dst=P.COMPLETE, guard="lost_to_mine", action="complete"),
    R(src=P.PUBLISHING, on=OpsDone, dst=P.ARRIVING, guard="lost_to_not_mine", action="move_on"),
    R(
        src=P.PUBLISHING,
        on=OpsDone,
        dst=P.CLOSED,
        guard="lost_to_closed",
        action="fail_closed_result",
    ),
    R(
        src=P.PUBLISHING,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="lost_to_corrupt",
        action="fail_corrupt_result",
    ),
    R(src=P.ANNOUNCING, on=OpsDone, dst=P.COMPLETE, guard="in_draft", action="complete_as_closer"),
    R(
        src=P.ANNOUNCING,
        on=OpsDone,
        dst=P.ARRIVING,
        action="move_on_from_draft",
        note="a closer left out of a full world waits in the next round",
    ),
    R(src=P.READING_RESULT, on=OpsDone, dst=P.COMPLETE, guard="result_mine", action="complete"),
    R(
        src=P.READING_RESULT,
        on=OpsDone,
        dst=P.ARRIVING,
        guard="result_not_mine",
        action="move_on",
        note="left out (late or beyond max_nodes): wait in the next round",
    ),
    R(
        src=P.READING_RESULT,
        on=OpsDone,
        dst=P.CLOSED,
        guard="result_closed",
        action="fail_closed_result",
    ),
    R(
        src=P.READING_RESULT,
        on=OpsDone,
        dst=P.CORRUPT,
        guard="result_corrupt",
        action="fail_corrupt_result",
    ),
)

TABLE = build_table(
    name="rendezvous_join",
    phases=JoinPhase,
    initial=JoinPhase.IDLE,
    events=(JoinRequested, OpsDone, WaitEnded),
    rows=ROWS,
    guards=GUARDS,
    actions=ACTIONS,
    terminal=TERMINAL,
    doc=__doc__ or "",
)


def step(state: JoinState, event: object, config: RendezvousConfig) -> Step[JoinState]:
    """Apply one event to a node's join. Unknown (phase, event) pairs are rejected cleanly."""
    return TABLE.step(state, event, config)
