"""The restart budget's arithmetic: every count and budget check the agent and rendezvous make.

The budget is a job-wide fact, not a per-agent counter. Each completed rendezvous round carries
``restart_count``, computed once by the node that closes the round (:func:`round_restart_count`)::

    restart_count(next round) = restart_count(previous round)
                              + the highest in-place attempt of the previous round its members
                                report as spent
                              + (1 if any node reported a worker failure for the next round)

so every node of a round agrees on it, and a round spends at most one unit however many nodes
failed at once. In-place attempt ``n`` of a round runs with the count ``restart_count(round) +
n`` (:func:`attempt_count`). A membership change (a node joins, leaves or dies) spends nothing.
A job with ``max_restarts = k`` runs at most ``k + 1`` attempts (:func:`attempts_allowed`).

A worker failure caused by a peer's loss is a membership change, not a unit: an in-place
attempt started within ``collateral_window`` before this node's round is superseded is reported
as not spent at the next join (:func:`charged_attempt`), so the next round's count leaves it out.

The decisions that use these (restart, hold or fail; which attempt a join reports) are rows of
the agent table (:mod:`tpelastic.core.agent`), whose state holds the node's view of the budget;
specs/restart_budget.md explains the rules. Plain functions over counts: importing this module
builds nothing, so the launch path pays nothing for it.
"""

from __future__ import annotations

from tpelastic.core.values import Duration, Instant


def _nonneg(**values: int) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")


def next_restart_count(prev: int, failure_reported: bool) -> int:
    """The restart count of the next round, as the round's closer computes it.

    Args:
        prev: the previous round's restart count (0 for the first round).
        failure_reported: whether any joining node reported a worker failure for this round.

    Returns:
        ``prev + 1`` if a failure was reported, else ``prev``: at most one unit per round.

    Raises:
        ValueError: ``prev`` is negative.
    """
    if prev < 0:
        raise ValueError(f"restart_count must be >= 0, got {prev!r}")
    return prev + (1 if failure_reported else 0)


def round_restart_count(prev: int, attempts: int, failure_reported: bool) -> int:
    """The restart count of the next round when the previous one restarted in place.

    Attempt ``n`` of a round runs with the job-wide count ``prev + n``. Those units are spent,
    so the next round starts from the previous round's count plus the highest attempt its
    members report as spent, and :func:`next_restart_count` adds one unit if a failure was
    reported for the new round.

    Args:
        prev: the previous round's restart count.
        attempts: the highest in-place attempt of the previous round any member reports as
            spent (0: none).
        failure_reported: whether any joining node reported a worker failure for this round.

    Raises:
        ValueError: ``prev`` or ``attempts`` is negative.
    """
    if attempts < 0:
        raise ValueError(f"attempts must be >= 0, got {attempts!r}")
    return next_restart_count(prev, failure_reported) + attempts


def can_restart(restart_count: int, max_restarts: int) -> bool:
    """Whether the job may restart once more after an attempt that used ``restart_count``.

    Raises:
        ValueError: either argument is negative.
    """
    _nonneg(restart_count=restart_count, max_restarts=max_restarts)
    return restart_count < max_restarts


def within_budget(restart_count: int, max_restarts: int) -> bool:
    """Whether workers may run with ``restart_count`` (at most ``max_restarts`` used)."""
    return restart_count <= max_restarts


def attempt_count(restart_count: int, attempt: int, other: int) -> int:
    """The job-wide count of attempt ``other`` of a round, from a node that runs ``attempt`` of
    it with ``restart_count``: the round's count plus ``other``."""
    return restart_count - attempt + other


def attempts_allowed(max_restarts: int) -> int:
    """How many attempts (worker starts that spend budget) a job may make: the first plus restarts.

    Raises:
        ValueError: ``max_restarts`` is negative.
    """
    _nonneg(max_restarts=max_restarts)
    return max_restarts + 1


AttemptStart = tuple[int, Instant]
"""An in-place attempt a node started (opened, or followed) and when, on its own clock."""


def recent_starts(
    starts: tuple[AttemptStart, ...], now: Instant, window: Duration
) -> tuple[AttemptStart, ...]:
    """The attempt starts a peer's loss seen at ``now`` may still have caused: those at most
    ``window`` seconds old (a start after ``now`` is a clock the caller mixed up, kept)."""
    return tuple(start for start in starts if now - start[1] <= window)


def charged_attempt(
    attempt: int, starts: tuple[AttemptStart, ...], now: Instant, window: Duration
) -> int:
    """The highest in-place attempt of its round a node reports as spent when, at ``now``, a
    peer's loss supersedes the round while it runs ``attempt``.

    The attempts it started within ``window`` before ``now`` were caused by that loss (a peer's
    death fails the survivors' workers at once, and is reported up to the window later): they
    are not spent, so it reports the attempt before the earliest of them. Attempts are started
    in order, so the recent ones are the newest.
    """
    recent = [number for number, _at in recent_starts(starts, now, window)]
    return min(recent) - 1 if recent else attempt


__all__ = [
    "AttemptStart",
    "attempt_count",
    "attempts_allowed",
    "can_restart",
    "charged_attempt",
    "next_restart_count",
    "recent_starts",
    "round_restart_count",
    "within_budget",
]
