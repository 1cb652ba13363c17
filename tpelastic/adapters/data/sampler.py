"""ElasticDistributedSampler: a world-size independent epoch order, sharded over the current ranks.

The order of an epoch is a function of ``(seed, epoch, len(dataset))`` only. The *remaining* part
of that order (everything from ``start_index`` on) is dealt round-robin to the ranks: rank ``r``
takes positions ``r, r + W, r + 2W, ...`` of the remainder. Dealing round-robin is what makes a
resize safe: after every rank has taken ``k`` samples, exactly the first ``k * W`` positions of the
remainder are consumed, so the new ``start_index`` is ``start_index + k * W`` whatever ``W`` was,
and the next world continues from there without repeating or skipping a sample.

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


def epoch_order(*, length: int, seed: int, epoch: int, shuffle: bool) -> list[int]:
    """The global sample order of one epoch; depends only on the arguments, never on the world.

    Args:
        length: number of samples in the dataset (>= 0).
        seed: the job's seed; the same seed on every rank gives the same order.
        epoch: the epoch number (>= 0).
        shuffle: False gives ``0 .. length-1`` in order.

    Raises:
        ValueError: on a negative length, seed or epoch.
    """
    if length < 0 or seed < 0 or epoch < 0:
        raise ValueError(f"length, seed and epoch must be >= 0, got {length}, {seed}, {epoch}")
    if not shuffle:
        return list(range(length))
    # A generator seeded by (seed, epoch) alone: numpy's SeedSequence mixes both words, so
    # neighbouring epochs are unrelated and no rank or world size can influence the order.
    rng = np.random.default_rng([seed, epoch])
    return [int(i) for i in rng.permutation(length)]


class ElasticDistributedSampler(Sampler[int]):
    """Shards an epoch over the current ranks so that a resize neither repeats nor skips samples.

    Usable wherever tensorplay's ``DataLoader`` takes a ``sampler``. Call :meth:`set_epoch` at the
    start of every epoch. After a resize, build a new sampler for the new world with
    ``start_index`` set to the number of samples of the epoch already consumed (checkpoint
    :meth:`position_after` or count ``steps * batch_size * world_size`` yourself).

    Args:
        dataset: anything with ``len()``.
        num_replicas: world size; default from ``WORLD_SIZE`` or the process group.
        rank: this rank, ``0 <= rank < num_replicas``; default from ``RANK`` or the process group.
        shuffle: shuffle the epoch order with ``(seed, epoch)``.
        seed: must be the same on every rank.
        drop_last: drop the tail of the remainder that does not fill a whole round of ranks,
            instead of padding it with repeated samples (see docs/data.md).
        start_index: positions of the epoch order already consumed, ``0 <= start_index <= len``.

    Raises:
        ValueError: on a rank outside ``[0, num_replicas)``, a non-positive world size, a
            ``start_index`` outside ``[0, len(dataset)]``, or no way to learn the world.
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        start_index: int = 0,
    ) -> None:
        if num_replicas is None or rank is None:
            env_world, env_rank = _world_from_environment()
            num_replicas = env_world if num_replicas is None else num_replicas
            rank = env_rank if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
        length = len(dataset)
        if not 0 <= start_index <= length:
            raise ValueError(f"start_index must be in [0, {length}], got {start_index}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.start_index = start_index
        self.epoch = 0

    @property
    def remaining(self) -> int:
        """Samples of the epoch not yet consumed: ``len(dataset) - start_index``."""
        return len(self.dataset) - self.start_index

    @property
    def total_size(self) -> int:
        """Positions dealt to all ranks together: remainder trimmed or padded to a multiple of W."""
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
        """The ``start_index`` to resume from once every rank has taken ``samples_per_rank``.

        Capped at ``len(dataset)``: samples taken from the padding consume nothing new.

        Raises:
            ValueError: on a negative count or one larger than :attr:`num_samples`.
        """
        if not 0 <= samples_per_rank <= self.num_samples:
            raise ValueError(
                f"samples_per_rank must be in [0, {self.num_samples}], got {samples_per_rank}"
            )
        length = len(self.dataset)
        return min(length, self.start_index + samples_per_rank * self.num_replicas)

    def global_indices(self) -> list[int]:
        """Every position dealt this epoch, padding included, before it is split by rank."""
        order = epoch_order(
            length=len(self.dataset),
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
        )
        rest = order[self.start_index :]
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
