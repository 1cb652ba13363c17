"""The restart count arithmetic: what the next round's count is and whether one more restart fits.

Split from :mod:`tpelastic.core.restart_budget` (which re-exports these) because the agent's
guards and the rendezvous join need only these four functions, and importing the budget module
also builds its table and six attrs classes: about 1.3 ms of every ``tpelastic run`` before its
first worker starts (issue 5, docs/benchmarks-launcher.md). The rules themselves are explained
in restart_budget's docstring and specs/restart_budget.md.
"""

from __future__ import annotations


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

    A round's workers may restart in place (attempts 1, 2, ... of the round, see
    :mod:`tpelastic.core.rendezvous.attempts`); attempt ``n`` runs with the job-wide count
    ``prev + n``. Those units are spent, so the next round starts from the previous round's
    count plus the highest attempt its members reached, and :func:`next_restart_count` adds one
    unit if a failure was reported for the new round.

    Args:
        prev: the previous round's restart count.
        attempts: the highest in-place attempt of the previous round any member reports (0: none).
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
    if restart_count < 0 or max_restarts < 0:
        raise ValueError(
            f"restart_count and max_restarts must be >= 0, got {restart_count!r}, {max_restarts!r}"
        )
    return restart_count < max_restarts


def attempts_allowed(max_restarts: int) -> int:
    """How many attempts (worker starts that spend budget) a job may make: the first plus restarts.

    Raises:
        ValueError: ``max_restarts`` is negative.
    """
    if max_restarts < 0:
        raise ValueError(f"max_restarts must be >= 0, got {max_restarts!r}")
    return max_restarts + 1


__all__ = ["attempts_allowed", "can_restart", "next_restart_count", "round_restart_count"]
