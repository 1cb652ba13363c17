"""Where a run keeps its shared facts in the store: one small key per fact.

Every fact is written with an atomic store operation (add, set-if-absent, set of a key only its
owner writes), so no node ever rewrites a blob that others write too: a join costs a constant
number of store operations, however many nodes there are.

Everything a round's agents and workers write lives under that round's prefix (``work``), so no
later attempt can read what an earlier attempt left behind.
"""

from __future__ import annotations

from attrs import frozen

from tpelastic.core.values import value_eq, value_hash, value_repr

SCHEMA_PREFIX = "tpelastic/v1"


@frozen
class RunKeys:
    """Key names for one run. ``run_id`` is used verbatim: keep it free of ``/``."""

    __repr__ = value_repr
    __eq__ = value_eq
    __hash__ = value_hash

    run_id: str

    @property
    def namespace(self) -> str:
        return f"{SCHEMA_PREFIX}/{self.run_id}"

    def closed(self) -> str:
        """Set once, with the terminal outcome: nobody is admitted afterwards."""
        return f"{self.namespace}/closed"

    def published_rounds(self) -> str:
        """Counter of published round results: a hint where to start looking, never trusted."""
        return f"{self.namespace}/published"

    def heartbeat(self, node: str) -> str:
        """Counter a node's keep-alive increments; observers time it on their own clocks. With
        leased liveness: a key under the node's lease, present exactly while the node lives."""
        return f"{self.namespace}/hb/{node}"

    def round_prefix(self, round_no: int) -> str:
        return f"{self.namespace}/r{round_no}"

    def arrivals(self, round_no: int) -> str:
        """Counter: how many nodes arrived at the round (each arrival gets a slot)."""
        return f"{self.round_prefix(round_no)}/arrivals"

    def slot(self, round_no: int, slot: int) -> str:
        """The node that arrived in this slot (written only by that node)."""
        return f"{self.round_prefix(round_no)}/slot/{slot}"

    def member_arrived(self, round_no: int, prev_rank: int) -> str:
        """Marks that the previous round's rank ``prev_rank`` arrived; the closer waits on it."""
        return f"{self.round_prefix(round_no)}/member/{prev_rank}"

    def gone(self, round_no: int, prev_rank: int) -> str:
        """The previous round's rank ``prev_rank`` will not come: it left, or was found dead."""
        return f"{self.round_prefix(round_no)}/gone/{prev_rank}"

    def opened(self, round_no: int) -> str:
        """Set once when the previous round's world must end; its members see it and rejoin."""
        return f"{self.round_prefix(round_no)}/opened"

    def proposal(self, round_no: int) -> str:
        """Set once, with the opening: round R-1's members minus the one gone, which the
        survivors confirm instead of joining anew (see :mod:`tpelastic.core.rendezvous.reform`)."""
        return f"{self.round_prefix(round_no)}/proposal"

    def confirmed(self, round_no: int) -> str:
        """Counter: how many survivors named by the proposal have stopped their old world."""
        return f"{self.round_prefix(round_no)}/confirmed"

    def formed(self, round_no: int) -> str:
        """Set by the node that published a proposed round (or gave it up): who published it
        and what it holds, in a few bytes, so survivors build the round from the proposal
        instead of reading the O(N) result."""
        return f"{self.round_prefix(round_no)}/formed"

    def failures(self, round_no: int) -> str:
        """Counter of worker failures reported for this round (one budget unit if any)."""
        return f"{self.round_prefix(round_no)}/failures"

    def result(self, round_no: int) -> str:
        """The round's membership and ranks, set once by whichever closer wins."""
        return f"{self.round_prefix(round_no)}/result"

    def work_prefix(self, round_no: int, attempt: int = 0) -> str:
        """Namespace for everything agents and workers write while the round's ``attempt``
        trains (attempt 0 is the round's first start; see attempt())."""
        if attempt:
            return f"{self.round_prefix(round_no)}/a{attempt}/work"
        return f"{self.round_prefix(round_no)}/work"

    def attempt(self, round_no: int, attempt: int) -> str:
        """Set once (first writer wins) when the round's members restart their workers in place
        as ``attempt`` (1, 2, ...) after a worker failure, instead of forming a new round."""
        return f"{self.round_prefix(round_no)}/attempt/{attempt}"
