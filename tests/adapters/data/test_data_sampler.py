"""ElasticDistributedSampler: the epoch is dealt exactly once however the world resizes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
import tensorplay as tp
from hypothesis import given
from hypothesis import strategies as st
from tensorplay.utils.data import DataLoader, Sampler, TensorDataset

from tpelastic.data import ElasticDistributedSampler, epoch_order, get_socket_with_port

# (world size, samples each rank takes before the next resize)
segments = st.lists(st.tuples(st.integers(1, 8), st.integers(0, 40)), min_size=0, max_size=6)


def run_epoch(length, seed, epoch, shuffle, drop_last, plan, final_world):
    """Consume one epoch under a sequence of world sizes; return what was taken and the last W."""
    data = range(length)
    start, taken = 0, []
    for world, per_rank in [*plan, (final_world, None)]:
        samplers = [
            ElasticDistributedSampler(
                data,
                world,
                rank,
                shuffle=shuffle,
                seed=seed,
                drop_last=drop_last,
                position=start,
            )
            for rank in range(world)
        ]
        for s in samplers:
            s.set_epoch(epoch)
        k = samplers[0].num_samples if per_rank is None else min(per_rank, samplers[0].num_samples)
        for s in samplers:
            taken.extend(list(s)[:k])
        start = samplers[0].position_after(k)
    return taken, start


@given(
    length=st.integers(1, 150),
    seed=st.integers(0, 2**32 - 1),
    epoch=st.integers(0, 1000),
    shuffle=st.booleans(),
    plan=segments,
    final_world=st.integers(1, 8),
)
def test_padded_epoch_is_every_sample_once_plus_less_than_one_round_of_padding(
    length, seed, epoch, shuffle, plan, final_world
):
    taken, end = run_epoch(length, seed, epoch, shuffle, False, plan, final_world)
    counts = Counter(taken)
    assert set(counts) == set(range(length))  # nothing skipped
    extra = len(taken) - length
    # Padding only happens in the round that finishes the epoch, and fills at most W-1 slots.
    assert 0 <= extra < max(w for w, _ in [*plan, (final_world, 0)])
    assert end == length


@given(
    length=st.integers(1, 150),
    seed=st.integers(0, 1000),
    shuffle=st.booleans(),
    plan=segments,
    final_world=st.integers(1, 8),
)
def test_drop_last_never_repeats_and_drops_only_the_tail_of_the_order(
    length, seed, shuffle, plan, final_world
):
    taken, end = run_epoch(length, seed, 3, shuffle, True, plan, final_world)
    assert len(taken) == len(set(taken))  # nothing repeated
    order = epoch_order(length=length, seed=seed, epoch=3, shuffle=shuffle)
    assert set(taken) == set(order[:end])  # everything before the stop point, exactly
    assert length - end < final_world


@given(
    length=st.integers(1, 100),
    seed=st.integers(0, 1000),
    epoch=st.integers(0, 50),
    world=st.integers(1, 9),
    start=st.integers(0, 100),
)
def test_order_depends_only_on_seed_epoch_and_length(length, seed, epoch, world, start):
    start = min(start, length)
    order = epoch_order(length=length, seed=seed, epoch=epoch, shuffle=True)
    assert sorted(order) == list(range(length))
    shards = []
    for rank in range(world):
        sampler = ElasticDistributedSampler(range(length), world, rank, seed=seed, position=start)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    # Interleaving the shards back gives the epoch order from position on (then padding).
    dealt = [shards[i % world][i // world] for i in range(sum(map(len, shards)))]
    assert dealt[: length - start] == order[start:]


def test_epochs_differ_and_repeat_with_the_seed():
    a = epoch_order(length=50, seed=7, epoch=0, shuffle=True)
    assert a == epoch_order(length=50, seed=7, epoch=0, shuffle=True)
    assert a != epoch_order(length=50, seed=7, epoch=1, shuffle=True)
    assert a != epoch_order(length=50, seed=8, epoch=0, shuffle=True)


def test_worked_example_from_docs():
    # docs/data.md: 10 samples, no shuffle, 3 ranks take 2 each, then the world shrinks to 2.
    data = range(10)
    first = [list(ElasticDistributedSampler(data, 3, r, shuffle=False))[:2] for r in range(3)]
    assert first == [[0, 3], [1, 4], [2, 5]]
    start = ElasticDistributedSampler(data, 3, 0, shuffle=False).position_after(2)
    assert start == 6
    second = [
        list(ElasticDistributedSampler(data, 2, r, shuffle=False, position=start)) for r in range(2)
    ]
    assert second == [[6, 8], [7, 9]]
    padded = [
        list(ElasticDistributedSampler(data, 4, r, shuffle=False, position=start + 1))
        for r in range(4)
    ]
    assert padded == [[7], [8], [9], [7]]


def test_is_a_tensorplay_sampler_and_feeds_a_data_loader():
    dataset = TensorDataset(tp.arange(20))
    sampler = ElasticDistributedSampler(dataset, num_replicas=2, rank=1, seed=3)
    sampler.set_epoch(2)
    assert isinstance(sampler, Sampler)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    seen = [int(x) for (batch,) in loader for x in batch.tolist()]
    assert seen == list(sampler)
    assert len(seen) == len(sampler) == 10


def test_world_from_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    sampler = ElasticDistributedSampler(range(8), shuffle=False)
    assert (sampler.num_replicas, sampler.rank, list(sampler)) == (4, 3, [3, 7])


def test_without_a_world_the_error_says_what_to_do(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="WORLD_SIZE and RANK"):
        ElasticDistributedSampler(range(8))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_replicas": 0, "rank": 0}, "num_replicas must be >= 1"),
        ({"num_replicas": 2, "rank": 2}, r"rank must be in \[0, 2\)"),
        ({"num_replicas": 2, "rank": 0, "start_index": 10}, r"start_index must be in \[0, 10\)"),
        ({"num_replicas": 2, "rank": 0, "position": 11}, r"position must be in \[0, 10\]"),
        ({"num_replicas": 2, "rank": 0, "seed": -1}, "seed must be >= 0"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ElasticDistributedSampler(range(10), **kwargs)


def test_bad_epoch_and_position():
    sampler = ElasticDistributedSampler(range(10), 2, 0)
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        sampler.set_epoch(-1)
    with pytest.raises(ValueError, match=r"samples_per_rank must be in \[0, 5\]"):
        sampler.position_after(6)


PROCESS_GROUP_SCRIPT = """
import sys
import tensorplay.distributed as dist
from tpelastic.data import ElasticDistributedSampler
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], world_size=1, rank=0)
sampler = ElasticDistributedSampler(range(5), shuffle=False)
print(sampler.num_replicas, sampler.rank, list(sampler))
dist.destroy_process_group()
"""


def test_world_from_an_initialised_process_group():
    sock = get_socket_with_port("127.0.0.1")
    port = sock.getsockname()[1]
    sock.close()  # the process group's store binds it next
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    out = subprocess.run(
        [sys.executable, "-c", PROCESS_GROUP_SCRIPT, str(port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "1 0 [0, 1, 2, 3, 4]"
