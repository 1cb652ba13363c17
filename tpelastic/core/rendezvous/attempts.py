"""Restarting a round's workers in place: attempts within one round (all pure).

A worker failure with budget left does not need a new rendezvous when nobody joined or left:
the round's members, ranks and world size stay valid. The failed node *opens* the next attempt
of the round instead (one set-if-absent of a key every member already watches), and every
member stops its workers and starts them again under the attempt's own namespace. At 10,000
nodes that is one store write and one wake-up per node, not 10,000 joins.

Rules (specs/rendezvous_join.md, R16 and R17):

* Attempts of a round are numbered 1, 2, ... (0 is the round's first start). Attempt ``n + 1``
  is opened only by a member that runs attempt ``n`` (or saw it opened), so the opened keys
  are a prefix of 1, 2, ...; two members failing at once open the same key: one unit spent.
* The job-wide restart count of attempt ``n`` of a round is the round's own count plus ``n``:
  every member computes it alike. The next round's closer carries the highest attempt its
  members report (``NodeInfo.prev_attempt``) into that round's count.
* Every attempt has its own namespace (``RunKeys.work_prefix(round, attempt)``): nothing an
  earlier attempt wrote is read again.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpelastic.core.rendezvous.keys import RunKeys
from tpelastic.core.rendezvous.ops import Get, Op, Reply, SetIfAbsent
from tpelastic.core.rendezvous.records import RoundResult, StateCorrupt, encode_reason

# How many attempt keys one read of the newest attempt covers (one round trip where the store
# reads many keys at once); a job rarely spends more restarts than this.
NEWEST_SCAN = 16


def open_attempt_ops(keys: RunKeys, round_no: int, attempt: int, reason: str) -> tuple[Op, ...]:
    """Open ``attempt`` of round ``round_no`` (first writer wins; the reply is the stored reason).

    Raises:
        ValueError: ``attempt`` is not positive.
    """
    if attempt < 1:
        raise ValueError(f"an in-place attempt is numbered from 1, got {attempt!r}")
    return (SetIfAbsent(keys.attempt(round_no, attempt), encode_reason(reason)),)


def attempt_restart_count(result: RoundResult, attempt: int) -> int:
    """The job-wide restart count while ``attempt`` of ``result``'s round runs.

    Raises:
        ValueError: ``attempt`` is negative.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt!r}")
    return result.restart_count + attempt


def next_attempt_key(keys: RunKeys, round_no: int, attempt: int) -> str:
    """The key a member running ``attempt`` watches to learn that the next one opened."""
    return keys.attempt(round_no, attempt + 1)


def newest_attempt_ops(keys: RunKeys, round_no: int, after: int) -> tuple[Op, ...]:
    """Read the :data:`NEWEST_SCAN` attempt keys of round ``round_no`` after ``after``."""
    return tuple(Get(keys.attempt(round_no, after + n)) for n in range(1, NEWEST_SCAN + 1))


def newest_attempt(after: int, replies: Sequence[Reply]) -> tuple[int, bool]:
    """The newest attempt the replies to :func:`newest_attempt_ops` show opened, and whether
    to read on (every key read was present). Opened keys are a prefix of 1, 2, ... (R17), so
    the first absent key ends the scan.

    Raises:
        StateCorrupt: a reply is not bytes.
    """
    newest = after
    for reply in replies:
        if reply is None:
            return newest, False
        if not isinstance(reply, bytes):
            raise StateCorrupt("an attempt flag is not bytes")
        newest += 1
    return newest, True


__all__ = [
    "NEWEST_SCAN",
    "attempt_restart_count",
    "newest_attempt",
    "newest_attempt_ops",
    "next_attempt_key",
    "open_attempt_ops",
]
