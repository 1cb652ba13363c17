"""Run a big simulation without Python's cyclic garbage collector.

A large run keeps millions of small objects alive (the simulated store, round results, every
node's state), and the collector's full passes walk all of them again and again: at 10,000 nodes
that is about a fifth of the run's CPU time, and the share grows with N. A simulation makes no
reference cycles that matter (its values are immutable attrs instances, tuples and bytes, freed
by reference counting), so pausing the collector for the run changes nothing but the time.
The collector is process-wide state, which is why this lives in the adapters and not in the
pure simulator.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block; restore its previous state after.

    Never raises by itself; an exception from the block propagates after the collector is
    restored. Nesting is safe: only the outermost block that paused it turns it back on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
