"""ElasticDistributedSampler: torch's sampler, plus a resize-safe position within the epoch.

Called as torch's (``dataset, num_replicas, rank, start_index``) it deals exactly torch's lists:
the epoch order is a permutation of ``start_index .. len-1`` drawn the way ``torch.randperm`` draws
it from a generator seeded with ``seed + epoch`` (the Mersenne Twister and Fisher-Yates swaps that
torch's CPU ``randperm`` uses), padded and dealt round-robin.

The order depends on ``(seed, epoch, len(dataset), start_index)`` only; ``position`` counts the
places of that order already consumed. Dealing round-robin is what makes a resize safe: after every
rank has taken ``k`` samples, exactly the first ``k * W`` places of the order from ``position``
on are consumed, so the next ``position`` is ``position + k * W`` whatever ``W`` was, and the
next world continues from there without repeating or skipping a sample.

See docs/data.md for the padding rule (``drop_last=False``) and a worked example.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sized

import numpy as np
from tensorplay.utils.data import Sampler


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None


def _world_from_environment() -> tuple[int, int]:
    """(num_replicas, rank) from WORLD_SIZE/RANK, else from an initialised process group."""
    world, rank = _env_int("WORLD_SIZE"), _env_int("RANK")
    if world is not None and rank is not None:
        return world, rank
    try:
        import tensorplay.distributed as dist

        # is_initialized alone: this tensorplay reports is_available() False even where the
        # gloo backend works, so asking it first would hide a live process group.
        if dist.is_initialized():
            return dist.get_world_size(), dist.get_rank()
    except (ImportError, AttributeError):  # a tensorplay build without distributed support
        pass
    raise ValueError(
        "ElasticDistributedSampler needs num_replicas and rank: pass them, set WORLD_SIZE and "
        "RANK, or initialise tensorplay.distributed first"
    )


def randperm(n: int, seed: int) -> list[int]:
    """``torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()`` on CPU.

    torch seeds a 32-bit Mersenne Twister with the low 32 bits of ``seed`` and, for ``n`` below
    ``2**32 / 20``, swaps ``r[i]`` with ``r[i + draw % (n - i)]`` for each ``i``; numpy's legacy
    ``RandomState`` is the same generator, so its full-range 32-bit draws are the same numbers.
    """
    if n < 0 or seed < 0:
        raise ValueError(f"n and seed must be >= 0, got {n}, {seed}")
    if n >= 2**32 // 20:
        raise ValueError(f"a permutation of {n} samples is beyond what is reproduced here")
    order = list(range(n))
    if n < 2:
        return order
    draws = np.random.RandomState(seed & 0xFFFFFFFF).randint(0, 2**32, size=n - 1, dtype=np.uint64)
    steps = np.arange(n - 1, dtype=np.uint64)
    targets = (steps + draws % (np.uint64(n) - steps)).tolist()
    # The swaps depend on each other, so they run in order; the draws above are vectorised.
    for i, j in enumerate(targets):
        order[i], order[j] = order[j], order[i]
    return order


def epoch_order(
    *, length: int, seed: int, epoch: int, shuffle: bool, start_index: int = 0
) -> list[int]:
    """The order of one epoch over samples ``start_index .. length-1``; never depends on the world.

    Args:
        length: number of samples in the dataset (>= 0).
        seed: the job's seed; the same seed on every rank gives the same order.
        epoch: the epoch number (>= 0).
        shuffle: False gives ``start_index .. length-1`` in order; True torch's permutation of
            them from the seed ``seed + epoch``.
        start_index: the first sample of the dataset the epoch covers.

    Raises:
        ValueError: on a negative length, seed or epoch, or a start index outside [0, length].
    """
    if length < 0 or seed < 0 or epoch < 0:
        raise ValueError(f"length, seed and epoch must be >= 0, got {length}, {seed}, {epoch}")
    if not 0 <= start_index <= length:
        raise ValueError(f"start_index must be in [0, {length}], got {start_index}")
    if not shuffle:
        return list(range(start_index, length))
    return [start_index + i for i in randperm(length - start_index, seed + epoch)]


class ElasticDistributedSampler(Sampler[int]):
    """Shards an epoch over the current ranks so that a resize neither repeats nor skips samples.

    Usable wherever tensorplay's ``DataLoader`` takes a ``sampler``. Call :meth:`set_epoch` at the
    start of every epoch. After a resize, build a new sampler for the new world with ``position``
    set to the places of the epoch already consumed (checkpoint :meth:`position_after`, or count
    ``steps * batch_size * world_size`` yourself).

    Args:
        dataset: anything with ``len()``.
        num_replicas: world size; default from ``WORLD_SIZE`` or the process group.
        rank: this rank, ``0 <= rank < num_replicas``; default from ``RANK`` or the process group.
        start_index: as torch's: the epoch covers samples ``start_index .. len-1`` only.
        shuffle: shuffle the epoch order with ``seed + epoch`` (torch's sampler always does).
        seed: must be the same on every rank; 0 gives torch's lists.
        drop_last: drop the tail that does not fill a whole round of ranks, instead of padding
            it with repeated samples (see docs/data.md).
        position: places of the epoch order already consumed,
            ``0 <= position <= len(dataset) - start_index``.

    Raises:
        ValueError: on a rank outside ``[0, num_replicas)``, a non-positive world size, a
            ``start_index`` not below ``len(dataset)`` (as torch), a ``position`` outside its
            range, or no way to learn the world.
        TypeError: a dataset without ``len()``.
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        start_index: int = 0,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        position: int = 0,
    ) -> None:
        if not isinstance(dataset, Sized):
            raise TypeError("Dataset must be an instance of collections.abc.Sized")
        if num_replicas is None or rank is None:
            env_world, env_rank = _world_from_environment()
            num_replicas = env_world if num_replicas is None else num_replicas
            rank = env_rank if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
        length = len(dataset)
        if not 0 <= start_index < length:
            raise ValueError(
                f"start_index must be in [0, {length}) (below the dataset size), got {start_index}"
            )
        if not 0 <= position <= length - start_index:
            raise ValueError(f"position must be in [0, {length - start_index}], got {position}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.start_index = start_index
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.position = position
        self.epoch = 0

    @property
    def remaining(self) -> int:
        """Samples of the epoch not yet consumed: ``len(dataset) - start_index - position``."""
        return len(self.dataset) - self.start_index - self.position

    @property
    def total_size(self) -> int:
        """Places dealt to all ranks together: remainder trimmed or padded to a multiple of W."""
        if self.drop_last:
            return self.remaining - self.remaining % self.num_replicas
        return -(-self.remaining // self.num_replicas) * self.num_replicas

    @property
    def num_samples(self) -> int:
        """Samples this rank yields in the epoch (the same on every rank)."""
        return self.total_size // self.num_replicas

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order is dealt; call before iterating each epoch.

        Raises:
            ValueError: on a negative epoch.
        """
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.epoch = epoch

    def position_after(self, samples_per_rank: int) -> int:
        """The ``position`` to resume from once every rank has taken ``samples_per_rank``.

        Capped at ``len(dataset) - start_index``: samples taken from the padding consume nothing.

        Raises:
            ValueError: on a negative count or one larger than :attr:`num_samples`.
        """
        if not 0 <= samples_per_rank <= self.num_samples:
            raise ValueError(
                f"samples_per_rank must be in [0, {self.num_samples}], got {samples_per_rank}"
            )
        covered = len(self.dataset) - self.start_index
        return min(covered, self.position + samples_per_rank * self.num_replicas)

    def global_indices(self) -> list[int]:
        """Every sample dealt this epoch, padding included, before it is split by rank."""
        order = epoch_order(
            length=len(self.dataset),
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
            start_index=self.start_index,
        )
        rest = order[self.position :]
        size = self.total_size
        if size <= len(rest):
            return rest[:size]
        # Padding repeats the remainder from its own start (cycling if it is shorter than the
        # padding needed), so every padded sample is one this world also sees for real.
        padded = list(rest)
        while len(padded) < size:
            padded.extend(rest[: size - len(padded)])
        return padded

    def __iter__(self) -> Iterator[int]:
        return iter(self.global_indices()[self.rank :: self.num_replicas])
