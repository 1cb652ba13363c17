"""A join that lost the store takes up the place it already holds (pure readings).

A node can lose the store after it took a slot: its round may then complete with it as a member
while it retries. Arriving anew would make it a waiting member of the next round, which no one
opened, while its world trains short of it. So a retried join first reads the round it arrived
in (``arrived_round``, from :class:`~tpelastic.core.rendezvous.state.JoinRequested`):

* that round's result includes the node, the next round is not opened and the node's heartbeats
  held: it *resumes*, with the stored result, as the member it already is;
* that round is still forming and the node knows its slot: it *reclaims* the slot (writes its
  record again, which is idempotent) and waits for the result as before;
* otherwise it joins as usual, as a member of that round when the result includes it (and, when
  its heartbeats may have failed, it opens the next round so its world re-forms around it).

A join whose node turns out to be a member of the latest completed round, although it says it
comes from an earlier round or from none, can only be a retry (by an adapter that knows no more
than its node id): it takes the same look at that round, once. A member of the latest round
that joins *from* it (a failure, a scale-up, a rejoin) is not resuming: it arrives as usual.
"""

from __future__ import annotations

from tpelastic.core.copying import evolve
from tpelastic.core.rendezvous.ops import Get, Op, OpsDone
from tpelastic.core.rendezvous.reading import _bytes
from tpelastic.core.rendezvous.records import (
    RoundResult,
    StateCorrupt,
    decode_closed,
    decode_result,
)
from tpelastic.core.rendezvous.replies import ArrivedRoundRead, RepliesUnreadable, RunClosed
from tpelastic.core.rendezvous.state import JoinState


def resume_ops(state: JoinState, round_no: int) -> tuple[Op, ...]:
    """Read the closed flag, results ``round_no - 1`` and ``round_no``, and whether the round
    after it was opened."""
    keys = state.keys
    before = (Get(keys.result(round_no - 1)),) if round_no > 0 else ()
    return (
        Get(keys.closed()),
        *before,
        Get(keys.result(round_no)),
        Get(keys.opened(round_no + 1)),
    )


def read_resume(state: JoinState, event: OpsDone) -> object:
    """Replies to :func:`resume_ops` for ``state.round_no``: the round this node arrived in,
    the one before and whether the next was opened; or the run is closed, or unreadable."""
    r, now = state.round_no, event.now
    try:
        raws = [_bytes(reply) for reply in event.replies]
        if raws[0] is not None:
            return RunClosed(now=now, reason=decode_closed(raws[0]).reason or "closed")
        if r > 0 and raws[1] is None and raws[-2] is None:
            return ArrivedRoundRead(now=now, forgotten=True)
        previous = _previous(raws, r)
        current = decode_result(raws[-2]) if raws[-2] is not None else None
    except (StateCorrupt, ValueError) as error:
        return RepliesUnreadable(now=now, reason=str(error))
    for result in (previous, current):
        if result is not None and result.closed:
            return RunClosed(now=now, reason="the rendezvous was closed")
    if current is not None and current.round_no != r:
        why = f"result of round {current.round_no} under {r}'s key"
        return RepliesUnreadable(now=now, reason=why)
    return ArrivedRoundRead(
        now=now, previous=previous, current=current, next_opened=raws[-1] is not None
    )


def in_its_round(state: JoinState, read: ArrivedRoundRead) -> bool:
    """The round it arrived in completed with it as a participant."""
    return read.current is not None and read.current.rank_of(state.node.node) is not None


def world_stands(state: JoinState, read: ArrivedRoundRead) -> bool:
    """That round's world still trains: the next round is not opened and it is not void."""
    return read.current is not None and not read.next_opened and not read.current.void


def relocated(state: JoinState, from_round: int | None, reason: str) -> JoinState:
    """The join from its start, as a node from ``from_round`` joining for ``reason``."""
    node = state.node
    if from_round != state.from_round and node.prev_attempt:
        # The in-place attempt it reported was of the round it named; it never trained in
        # ``from_round`` (it lost the store while joining it), so it ran no attempt of it.
        node = evolve(node, prev_attempt=0)
    return evolve(
        state,
        node=node,
        from_round=from_round,
        reason=reason,
        round_no=0,
        arrived_slot=None,
        may_resume=False,
    )


def _previous(raws: list[bytes | None], round_no: int) -> RoundResult | None:
    if round_no == 0:
        return None
    if raws[1] is None:
        raise StateCorrupt(f"round {round_no - 1} has no result but a later one is due")
    return decode_result(raws[1])


def finds_member(state: JoinState, previous: RoundResult | None) -> bool:
    """``previous`` (the latest completed round) includes this node, although the node says it
    comes from an earlier round (or from none): it joined ``previous`` in a join it lost."""
    if not state.may_resume or previous is None or previous.rank_of(state.node.node) is None:
        return False
    return state.from_round is None or state.from_round < previous.round_no
