"""CyclingIterator: run a finite per-epoch iterator for a fixed number of epochs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class CyclingIterator(Generic[T]):
    """Chains ``n`` epochs, each a fresh iterable from ``generator_fn(epoch)``.

    Useful when a node's local data is finite but the loop should run for several passes; the
    epoch number is handed to ``generator_fn`` so it can call ``sampler.set_epoch(epoch)``.

    Args:
        n: number of epochs to run, counted from ``start_epoch`` (>= 0).
        generator_fn: ``epoch -> iterable`` giving that epoch's items.
        start_epoch: the first epoch (>= 0), e.g. the one restored from a checkpoint.

    Raises:
        ValueError: on a negative ``n`` or ``start_epoch``.
    """

    def __init__(
        self, n: int, generator_fn: Callable[[int], Iterable[T]], start_epoch: int = 0
    ) -> None:
        if n < 0:
            raise ValueError(f"n (number of epochs) must be >= 0, got {n}")
        if start_epoch < 0:
            raise ValueError(f"start_epoch must be >= 0, got {start_epoch}")
        self._end = start_epoch + n
        self._generator_fn = generator_fn
        self._current: Iterator[T] | None = None
        self.epoch = start_epoch

    def __iter__(self) -> CyclingIterator[T]:
        return self

    def __next__(self) -> T:
        # An epoch may be empty, so keep moving on until an item appears or the epochs run out.
        while self.epoch < self._end:
            if self._current is None:
                self._current = iter(self._generator_fn(self.epoch))
            try:
                return next(self._current)
            except StopIteration:
                self._current = None
                self.epoch += 1
        raise StopIteration
