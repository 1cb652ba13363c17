"""A tiny deterministic random number generator for simulations (pure: no ``random`` module).

SplitMix64: a 64-bit state advanced by a constant and mixed by two multiply-xorshift rounds. It is
small, fast enough in Python, and its output depends only on the seed, on every platform and
every Python version, so a scenario's seed fixes its whole trace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from attrs import define

MASK = (1 << 64) - 1
T = TypeVar("T")


@define
class SplitMix64:
    """A seeded stream of 64-bit numbers; the helpers draw floats, choices and waiting times."""

    state: int = 0

    def __attrs_post_init__(self) -> None:
        self.state &= MASK

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self) -> float:
        """A float in [0, 1) with 53 random bits."""
        return (self.next_u64() >> 11) / float(1 << 53)

    def exponential(self, rate: float) -> float:
        """The waiting time to the next event of a Poisson process with ``rate`` per second."""
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        return -math.log(1.0 - self.uniform()) / rate

    def choice(self, items: Sequence[T]) -> T:
        """One of ``items``, uniformly. Raises IndexError on an empty sequence."""
        if not items:
            raise IndexError("choice from an empty sequence")
        return items[self.next_u64() % len(items)]
