"""Time bounds that carry the machine's load.

A test that bounds how long something takes (a heartbeat judged late, a round formed within a
last call, a job done within N seconds) states the bound for a quiet machine and multiplies it
by :func:`factor`. CI runs on two cores shared with the suite's own second worker, and a
developer's machine may be busier still: a bound that passes only when the machine is quiet is
a flaky test, not a check.

Importable from every test module (pytest puts ``tests/`` on ``sys.path`` for its conftest).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

# Beyond this the machine is too busy for any bound to mean much; the test still runs, with
# bounds this many times a quiet machine's.
MOST = 4.0


_pinned: list[float] = []


def factor() -> float:
    """How many times slower than a quiet machine this one may run now: the 1-minute load
    average per core, at least 1 and at most :data:`MOST`. Within a test it is the value read
    when the test started (:func:`pinned`), so every node a test starts gets the same times."""
    if _pinned:
        return _pinned[-1]
    cores = os.cpu_count() or 1
    return min(MOST, max(1.0, os.getloadavg()[0] / cores))


@contextlib.contextmanager
def pinned() -> Iterator[float]:
    """Hold :func:`factor` at its value now (tests/conftest.py does it around every test)."""
    _pinned.append(factor())
    try:
        yield _pinned[-1]
    finally:
        _pinned.pop()


def scaled(seconds: float) -> float:
    """A quiet machine's bound of ``seconds``, for this machine now."""
    return seconds * factor()
