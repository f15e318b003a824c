"""The epoch order: a permutation of every sample for any shard sizes and parameters, random
access equal to the full order, a function of (seed, epoch) only, and cheap to seek into
(no cost in proportion to the samples)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfile.dataset.order import EpochOrder, epoch_order, partition_count
from tensorfile.errors import InvalidArgumentError

params = st.fixed_dictionaries(
    {
        "counts": st.lists(st.integers(0, 40), min_size=0, max_size=12),
        "partitions": st.integers(1, 9),
        "shuffle_block": st.integers(1, 50),
        "unit": st.integers(1, 8),
        "seed": st.integers(0, 2**32),
        "epoch": st.integers(0, 5),
    }
)


@settings(max_examples=150, deadline=None)
@given(params, st.data())
def test_a_permutation_with_random_access(p: dict, data: st.DataObject) -> None:
    full = epoch_order(shuffle=True, **p)
    n = sum(p["counts"])
    assert sorted(full.tolist()) == list(range(n))
    order = EpochOrder(shuffle=True, **p)
    assert len(order) == n
    a = data.draw(st.integers(0, n))
    b = data.draw(st.integers(a, n))
    assert order.ids(a, b).tolist() == full[a:b].tolist()
    # locate: back to (shard, row) of the manifest order
    shard, row = order.locate(full)
    starts = np.concatenate([[0], np.cumsum(p["counts"])]).astype(np.int64)
    assert (starts[shard] + row == full).all()
    assert all(0 <= r < p["counts"][s] for s, r in zip(shard.tolist(), row.tolist(), strict=True))


@settings(max_examples=100, deadline=None)
@given(params)
def test_unshuffled_is_the_manifest_order(p: dict) -> None:
    assert epoch_order(**p).tolist() == list(range(sum(p["counts"])))


def test_same_seed_and_epoch_same_order_other_epoch_other_order() -> None:
    counts = [100] * 20
    a = epoch_order(counts, seed=7, epoch=3, shuffle=True)
    assert a.tolist() == epoch_order(counts, seed=7, epoch=3, shuffle=True).tolist()
    assert a.tolist() != epoch_order(counts, seed=7, epoch=4, shuffle=True).tolist()
    assert a.tolist() != epoch_order(counts, seed=8, epoch=3, shuffle=True).tolist()


def test_a_block_shuffle_stays_in_its_block_and_partitions_interleave() -> None:
    counts = [10] * 8  # N = 80, P = 4: partitions of 20, blocks of 5, unit 2
    o = EpochOrder(counts, seed=1, shuffle=True, partitions=4, shuffle_block=5, unit=2)
    full = o.ids(0, 80)
    perm = np.random.default_rng([1, 0, 0]).permutation(8)
    q = np.concatenate([np.arange(s * 10, s * 10 + 10) for s in perm])  # shards permuted
    where = {int(v): i for i, v in enumerate(q)}  # id -> position in Q
    for k in range(10):  # round k: partitions 0..3, two positions each
        for p in range(4):
            got = full[k * 8 + p * 2 : k * 8 + p * 2 + 2]
            for off, v in zip(range(k * 2, k * 2 + 2), got.tolist(), strict=True):
                qpos = where[v]
                assert qpos // 20 == p  # its partition
                assert (qpos % 20) // 5 == off // 5  # its block inside it


def test_seeking_near_the_end_of_a_huge_epoch_is_cheap() -> None:
    """10**12 samples in 1,000 shards: the last stretch draws only the blocks it touches
    (one per partition in the last round), never the full order."""
    o = EpochOrder([10**9] * 1000, seed=3, shuffle=True, partitions=64, shuffle_block=1 << 12)
    ids = o.ids(10**12 - 1000, 10**12)
    assert ids.size == 1000 and len(set(ids.tolist())) == 1000
    assert o.permutations <= 64
    assert ((ids >= 0) & (ids < 10**12)).all()
    mid = o.ids(5 * 10**11, 5 * 10**11 + 64)  # a full round: one block of each partition
    assert o.permutations <= 128 and mid.size == 64


def test_hostile_arguments() -> None:
    with pytest.raises(InvalidArgumentError):
        EpochOrder([3, -1])
    with pytest.raises(TypeError):
        EpochOrder([[1, 2]])
    with pytest.raises(TypeError):
        EpochOrder(["a"])
    with pytest.raises(InvalidArgumentError):
        EpochOrder([3], partitions=0)
    with pytest.raises(TypeError):
        EpochOrder([3], unit=1.5)  # type: ignore[arg-type]
    o = EpochOrder([3, 4], shuffle=True)
    with pytest.raises(InvalidArgumentError):
        o.ids(0, 8)
    with pytest.raises(InvalidArgumentError):
        o.ids(5, 4)
    with pytest.raises(InvalidArgumentError):
        o.locate(np.array([7]))
    assert EpochOrder([], shuffle=True).ids(0, 0).tolist() == []


def test_a_dataset_smaller_than_a_shuffle_block_is_shuffled_whole() -> None:
    """Regression: with the defaults (64 partitions, blocks of 2**18) a small dataset was cut
    into 64 partitions, so a batch was B positions of one partition and the batches held the
    same samples every epoch. Partitions are never finer than the shuffle block now."""
    counts = [100] * 10  # N = 1000 < 2**18: one partition, one block, a true permutation
    assert partition_count(1000, 64, 1 << 18) == 1
    batches = [
        [frozenset(b) for b in epoch_order(counts, seed=5, epoch=e, shuffle=True, unit=10)
         .reshape(-1, 10).tolist()]
        for e in range(2)
    ]  # fmt: skip
    assert not set(batches[0]) & set(batches[1])  # no batch repeats between epochs
    first = np.array(sorted(batches[0][0]))
    assert len(set((first // 100).tolist())) > 3  # a batch draws from many shards
    # partitions appear only for datasets of many blocks, and stay a function of N, P, L
    assert partition_count(10 << 18, 64, 1 << 18) == 10
    assert partition_count(1 << 40, 64, 1 << 18) == 64
    assert partition_count(0, 64, 1 << 18) == 1


def test_hostile_sizes_are_refused_with_a_bound() -> None:
    with pytest.raises(InvalidArgumentError, match="at most"):
        EpochOrder([2**62] * 3, shuffle=True)  # the sum overflows int64
    with pytest.raises(InvalidArgumentError, match="at most"):
        EpochOrder(np.array([2**64 - 1], np.uint64))
    with pytest.raises(InvalidArgumentError, match="between"):
        EpochOrder([3], shuffle_block=2**70)
    with pytest.raises(InvalidArgumentError, match="between"):
        EpochOrder([3], partitions=2**25)
    o = EpochOrder([3])
    with pytest.raises(InvalidArgumentError, match="integers"):
        o.locate(np.array([1.7]))
    with pytest.raises(InvalidArgumentError, match=r"\[0, 3\)"):
        o.locate([2**70])  # type: ignore[arg-type]
    # a unit far larger than the epoch, and huge claimed shards: exact int64 arithmetic
    big = EpochOrder([2**61, 2**61 - 1], shuffle=True, unit=2**62, partitions=8, shuffle_block=8)
    assert big.ids(2**62 - 3, 2**62 - 1).size == 2
