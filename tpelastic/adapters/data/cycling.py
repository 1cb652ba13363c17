"""CyclingIterator: torch's, chaining the epochs ``start_epoch .. n-1`` of a per-epoch iterator."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class CyclingIterator(Generic[T]):
    """Yields ``generator_fn(epoch)``'s items for epochs ``start_epoch, start_epoch + 1, ...``,
    stopping after epoch ``n - 1`` (as torch's: ``n`` counts epochs from 0, and the first epoch,
    ``start_epoch``, always runs even when it is not below ``n``).

    The epoch number is handed to ``generator_fn`` so it can call ``sampler.set_epoch(epoch)``;
    ``generator_fn(start_epoch)`` is called at construction, as torch does. Empty epochs are
    passed over.

    Args:
        n: the number of epochs of the whole run (not of this iterator when resumed).
        generator_fn: ``epoch -> iterable`` giving that epoch's items.
        start_epoch: the first epoch, e.g. the one restored from a checkpoint.

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
        self._n = n
        self._generator_fn = generator_fn
        self.epoch = start_epoch
        self._current: Iterator[T] = iter(generator_fn(start_epoch))

    def __iter__(self) -> CyclingIterator[T]:
        return self

    def __next__(self) -> T:
        # An epoch may be empty, so keep moving on until an item appears or the epochs run out.
        while True:
            try:
                return next(self._current)
            except StopIteration:
                if self.epoch >= self._n - 1:
                    raise
                self.epoch += 1
                self._current = iter(self._generator_fn(self.epoch))
