"""Mixtures of datasets (``dataset.mix``): every epoch's draws counted sample id by sample id
(each dataset drawn exactly as the apportionment says, each whole pass of a dataset a
permutation of it), the order a function of the seed, the epoch and the datasets, random
access equal to the whole order, resumes mid-epoch across a change of world size (ranks in
one process) and of DataLoader worker count (forked workers) that see every id of the epoch
exactly once, a resume after several epochs, and hostile inputs refused.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tensorfile import dataset
from tensorfile.dataset.feed.mix_order import MixtureOrder, apportion
from tensorfile.dataset.torch import FeedOptions
from tensorfile.errors import InvalidArgumentError, InvalidTypeError

SIZES = {"a": (37, 8), "b": (20, 6), "c": (9, 4)}  # samples, shard size
WEIGHTS = [1, 3, 2]
N = 100  # an epoch's draws: a 17, b 50 (2.5 passes), c 33 (3.7 passes)
B = 4
ORDER = {"shuffle": True, "seed": 5, "shuffle_block": 16, "partitions": 2}


def _write(path: Path, first: int, n: int, shard: int, **kw: Any) -> str:
    ids = np.arange(first, first + n, dtype=np.int64)
    cols = {"id": ids, "v": np.stack([ids, -ids], axis=1).astype(np.float32), **kw}
    dataset.write(cols, str(path), batch_size=shard)
    return str(path)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Datasets whose ``id`` column is the sample's global id in the mixture a, b, c."""
    root = tmp_path_factory.mktemp("mix")
    out, first = {}, 0
    for name, (n, shard) in SIZES.items():
        out[name] = dataset.open(_write(root / name, first, n, shard))
        first += n
    return out


def _mix(parts: dict[str, Any], **kw: Any) -> dataset.Mixture:
    return dataset.mix(parts, kw.pop("weights", WEIGHTS), samples=kw.pop("samples", N))


def _ids(batches: Any) -> list[int]:
    return [i for b in batches for i in b["id"].tolist()]


def _full(m: dataset.Mixture, epoch: int = 0, batch: int = B) -> list[int]:
    order = m.order(epoch, batch_size=batch, **ORDER)
    return [int(i) for i in order.ids(0, len(order))]


def test_each_epoch_draws_each_dataset_as_apportioned(parts: dict[str, Any]) -> None:
    m = _mix(parts)
    assert m.draws == [17, 50, 33] == apportion(N, WEIGHTS)  # 16.7, 50, 33.3: a's remainder
    for epoch in range(3):
        it = m.to_torch(batch_size=B, **ORDER)
        it.set_epoch(epoch)
        seen = _ids(it)
        assert seen == _full(m, epoch)  # the feed yields the order, batch by batch
        which, _ = m.source(seen)
        assert Counter(which.tolist()) == {0: 17, 1: 50, 2: 33}
        for d, (n, _) in enumerate(SIZES.values()):
            draws = [i for i, w in zip(seen, which.tolist(), strict=True) if w == d]
            whole, left = divmod(len(draws), n)
            ids = list(range(m.offsets[d], m.offsets[d] + n))
            for p in range(whole):  # each whole pass visits each sample once
                assert sorted(draws[p * n : (p + 1) * n]) == ids
            rest = draws[whole * n :]
            assert len(set(rest)) == left and set(rest) <= set(ids)
    assert _full(m, 1) != _full(m, 0)


def test_draws_are_spread_over_the_epoch() -> None:
    """``C_i(p)``, the draws of dataset ``i`` among the first ``p`` positions: never
    decreasing, exact at the end, within a few draws of ``p * n_i / N`` everywhere."""
    draws = [17, 50, 33, 0, 1]
    order = MixtureOrder([[20], [30], [40], [0], [1]], draws)
    prev = [0] * len(draws)
    for p in range(sum(draws) + 1):
        c = order.cumulative(p)
        assert sum(c) == p and all(x >= y for x, y in zip(c, prev, strict=True))
        assert all(abs(x - p * n / 101) < len(draws) for x, n in zip(c, draws, strict=True))
        prev = c
    assert prev == draws


def test_order_is_a_function_of_seed_epoch_and_datasets(parts: dict[str, Any]) -> None:
    assert _full(_mix(parts), 2) == _full(_mix(parts), 2)
    assert _full(_mix(parts), 2) != _full(_mix(parts), 3)
    other = _mix(parts).order(0, **{**ORDER, "seed": 6})
    assert other.ids(0, N).tolist() != _full(_mix(parts), 0, batch=1)
    plain = _mix(parts).order(4)  # without shuffle: the same smooth interleave every epoch
    assert plain.ids(0, N).tolist() == _mix(parts).order(0).ids(0, N).tolist()
    head = plain.ids(0, 6).tolist()
    assert [int(w) for w in _mix(parts).source(head)[0]] == [1, 2, 0, 1, 2, 1]


def test_one_dataset_alone_is_that_datasets_order(parts: dict[str, Any]) -> None:
    kw = {**ORDER, "batch_size": B}
    alone = _ids(parts["a"].to_torch(**kw))
    assert _ids(dataset.mix([parts["a"]], [1]).to_torch(**kw)) == alone
    # weight 0 for the others, one pass: the same again (dataset 0's first pass)
    zero = dataset.mix([parts["a"], parts["b"]], [1, 0], samples=37)
    assert _ids(zero.to_torch(**kw)) == alone


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=4),
    data=st.data(),
    shuffle=st.booleans(),
    block=st.integers(1, 40),
    unit=st.integers(1, 5),
)
def test_any_stretch_equals_the_whole_order(
    lengths: list[int], data: st.DataObject, shuffle: bool, block: int, unit: int
) -> None:
    weights = [data.draw(st.integers(0, 5)) if n else 0 for n in lengths]
    if not any(weights):
        weights = [1 if n else 0 for n in lengths]
        if not any(weights):
            return
    total = data.draw(st.integers(0, 120))
    draws = apportion(total, weights)
    opts = FeedOptions(seed=3, shuffle=shuffle, shuffle_block=block, batch_size=unit)
    kw: dict[str, Any] = {"epoch": 2, "options": opts}
    counts = [[n // 2, n - n // 2] for n in lengths]
    whole = MixtureOrder(counts, draws, **kw).ids(0, total).tolist()
    cuts = sorted(data.draw(st.lists(st.integers(0, total), max_size=6)))
    bounds = [0, *cuts, total]
    order = MixtureOrder(counts, draws, **kw)  # fresh caches, read in pieces
    pieces = [order.ids(lo, hi).tolist() for lo, hi in pairwise(bounds)]
    assert [i for p in pieces for i in p] == whole
    lo = data.draw(st.integers(0, total))
    hi = data.draw(st.integers(lo, total))
    assert MixtureOrder(counts, draws, **kw).ids(lo, hi).tolist() == whole[lo:hi]
    assert order.ids(lo, hi).tolist() == whole[lo:hi]  # warm caches, read backwards too
    starts = np.cumsum([0, *lengths])
    which = np.searchsorted(starts[1:], whole, side="right")
    assert np.bincount(which, minlength=len(lengths)).tolist() == draws
    quotas = [total * w / sum(weights) for w in weights]  # the largest remainder's bounds
    assert sum(draws) == total and all(abs(n - q) < 1 for n, q in zip(draws, quotas, strict=True))


def test_resume_with_another_world_size(parts: dict[str, Any]) -> None:
    """2 ranks take 3 steps, 3 ranks resume from one rank's state: every position of the
    epoch once (even=True drops the last (N - 24) % 3)."""
    m, epoch = _mix(parts), 1
    full = _full(m, epoch)
    two = [m.to_torch(batch_size=B, rank=r, world_size=2, **ORDER) for r in range(2)]
    seen: list[int] = []
    streams = []
    for it in two:
        it.set_epoch(epoch)
        streams.append(iter(it))
    for _ in range(3):
        for s in streams:
            seen += next(s)["id"].tolist()
    state = json.loads(json.dumps(two[1].state_dict()))
    assert state["samples"] == 3 * 2 * B and state["epoch"] == epoch
    rest: list[list[int]] = []
    for r in range(3):
        it = m.to_torch(batch_size=B, rank=r, world_size=3, **ORDER)
        it.load_state_dict(state)
        rest.append(_ids(it))
    kept = 24 + (N - 24) // 3 * 3
    assert Counter(seen + [i for r in rest for i in r]) == Counter(full[:kept])
    assert rest[0][:B] == full[24 : 24 + B] and rest[2][:B] == full[24 + 2 * B : 24 + 3 * B]


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_resume_with_another_worker_count(parts: dict[str, Any]) -> None:
    """A DataLoader of 2 forked workers stops after 5 batches (the trainer's count saved),
    one of 3 workers resumes: the two runs together are the epoch's order, exactly."""
    m = _mix(parts)
    full = _full(m)
    it = m.to_torch(batch_size=B, **ORDER)
    head: list[int] = []
    for k, batch in enumerate(DataLoader(it, batch_size=None, num_workers=2,
                                         multiprocessing_context="fork")):  # fmt: skip
        head += batch["id"].tolist()
        if k == 4:
            break
    state = it.state_dict(samples=5 * B)
    again = m.to_torch(batch_size=B, **ORDER)
    again.load_state_dict(state)
    loader = DataLoader(again, batch_size=None, num_workers=3, multiprocessing_context="fork")
    assert head + _ids(loader) == full


def test_stateful_loader_resumes_on_other_ranks_and_workers(parts: dict[str, Any]) -> None:
    """StatefulDataLoader with 2 forked workers on each of 2 ranks, at epoch 2 after two
    whole epochs; resumed by 1 rank with 1 worker: the rest of epoch 2, every id once."""
    m = _mix(parts)
    full = _full(m, 2)
    saved, seen = [], []
    for r in range(2):
        it = m.to_torch(batch_size=B, rank=r, world_size=2, **ORDER)
        loader = StatefulDataLoader(it, batch_size=None, num_workers=2,
                                    multiprocessing_context="fork")  # fmt: skip
        for epoch in range(3):
            it.set_epoch(epoch)
            for k, batch in enumerate(loader):
                if epoch == 2:
                    seen += batch["id"].tolist()
                    if k == 2:
                        break
        saved.append(loader.state_dict())
    it = m.to_torch(batch_size=B, rank=0, world_size=1, **ORDER)
    it.load_state_dict(saved)
    rest = _ids(StatefulDataLoader(it, batch_size=None, num_workers=1))
    assert Counter(seen + rest) == Counter(full) and rest == full[3 * 2 * B :]
    assert it.epoch == 2
    it.set_epoch(3)
    assert _ids(it) == _full(m, 3)


def test_mismatched_datasets_are_refused(parts: dict[str, Any], tmp_path: Path) -> None:
    other = {
        "dtype": {"id": np.arange(4, dtype=np.int32), "v": np.zeros((4, 2), np.float32)},
        "shape": {"id": np.arange(4, dtype=np.int64), "v": np.zeros((4, 3), np.float32)},
        "column": {"id": np.arange(4, dtype=np.int64), "w": np.zeros((4, 2), np.float32)},
    }
    for what, cols in other.items():
        dataset.write(cols, str(tmp_path / what), batch_size=2)
        with pytest.raises(InvalidArgumentError) as exc:
            dataset.mix({"a": parts["a"], what: dataset.open(str(tmp_path / what))})
        assert what in str(exc.value), str(exc.value)
        assert ("'id'" if what == "dtype" else "'v'" if what == "shape" else "'w'") in str(
            exc.value
        )
    kv = str(tmp_path / "kv")
    names = [f"k{i}" for i in range(2)]
    dataset.write({"name": names, "id": np.arange(2), "v": np.zeros((2, 2), np.float32)}, kv,
                  name_col="name")  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="'kv' dataset"):
        dataset.mix({"a": parts["a"], "kv": dataset.open(kv)})


def test_bad_weights_and_sizes_are_refused(parts: dict[str, Any], tmp_path: Path) -> None:
    two = [parts["a"], parts["b"]]
    for weights, err, match in [
        ([1, -1], InvalidArgumentError, "dataset 1 must be finite and at least 0"),
        ([1, float("nan")], InvalidArgumentError, "finite"),
        ([float("inf"), 1], InvalidArgumentError, "finite"),
        ([0, 0], InvalidArgumentError, "must not all be 0"),
        ([1], InvalidArgumentError, "1 weights for 2 datasets"),
        ([1, True], InvalidTypeError, "not a number"),
        ([1, "2"], InvalidTypeError, "not a number"),
        ("12", InvalidTypeError, "a sequence of numbers, got str"),
        (np.array([[1.0], [2.0]]), None, None),
    ]:
        if err is None:  # (an array: its values, flattened)
            assert dataset.mix(two, weights, samples=3).draws == [1, 2]  # type: ignore[arg-type]
            continue
        with pytest.raises(err, match=match):
            dataset.mix(two, weights)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="samples must be"):
        dataset.mix(two, samples=-1)
    with pytest.raises(InvalidTypeError, match="samples must be an integer"):
        dataset.mix(two, samples=2.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="at least one dataset"):
        dataset.mix([])
    with pytest.raises(InvalidTypeError, match="not a dataset"):
        dataset.mix([parts["a"], "b"])  # type: ignore[list-item]
    with pytest.raises(InvalidTypeError, match="map_style"):
        dataset.mix(two).to_torch(map_style=True)
    empty = str(tmp_path / "empty")
    dataset.write({"id": np.zeros(0, np.int64), "v": np.zeros((0, 2), np.float32)}, empty,
                  batch_size=2)  # fmt: skip
    with pytest.raises(
        InvalidArgumentError, match="dataset 'e' has no samples but a weight above 0"
    ):
        dataset.mix({"a": parts["a"], "e": dataset.open(empty)}, [1, 1e-9])
    zero = dataset.mix({"e": dataset.open(empty), "a": parts["a"]}, [0, 1], samples=5)
    assert zero.draws == [0, 5] and len(_ids(zero.to_torch(batch_size=2))) == 5


def test_a_state_of_another_mixture_is_refused(parts: dict[str, Any]) -> None:
    state = _mix(parts).to_torch(batch_size=B, **ORDER).state_dict(samples=8)
    for other, match in [
        (dataset.mix(parts, [1, 3, 3], samples=N), "another weights"),
        (dataset.mix([parts["a"], parts["c"], parts["b"]], [1, 2, 3], samples=N), "mixture"),
        (dataset.mix(parts, WEIGHTS, samples=N + 1), "total"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            other.to_torch(batch_size=B, **ORDER).load_state_dict(state)
    with pytest.raises(InvalidArgumentError, match="shards digest"):
        parts["a"].to_torch(batch_size=B, **ORDER).load_state_dict(
            dataset.mix([parts["a"]], [1]).to_torch(batch_size=B, **ORDER).state_dict()
        )
    with pytest.raises(InvalidArgumentError, match="another mixture"):
        dataset.mix([parts["a"]], [1]).to_torch(batch_size=B, **ORDER).load_state_dict(
            parts["a"].to_torch(batch_size=B, **ORDER).state_dict()
        )
    with pytest.raises(InvalidArgumentError, match="another seed"):
        _mix(parts).to_torch(batch_size=B, **{**ORDER, "seed": 9}).load_state_dict(state)


def test_key_value_datasets_mix(tmp_path: Path) -> None:
    """Key-value datasets: batches carry the keys, each dataset drawn as apportioned."""
    kv = {}
    for name, n in (("c", 5), ("d", 3)):
        path = str(tmp_path / name)
        keys = [f"{name}{i}" for i in range(n)]
        dataset.write({"k": keys, "v": np.arange(n, dtype=np.float32)}, path, name_col="k")
        kv[name] = dataset.open(path)
    m = dataset.mix(kv, [1, 3], samples=12)
    batches = list(m.to_torch(batch_size=4, shuffle=True, seed=1))
    keys = [k for b in batches for k in b["key"]]
    assert m.draws == [3, 9] and len(keys) == 12
    assert Counter(k[0] for k in keys) == {"c": 3, "d": 9}
    assert Counter(k for k in keys if k[0] == "d") == {"d0": 3, "d1": 3, "d2": 3}
    values = [(k, float(v)) for b in batches for k, v in zip(b["key"], b["v"], strict=True)]
    assert all(v == int(k[1:]) for k, v in values)


@pytest.mark.parametrize("even", [True, False, "pad"])
def test_ranks_split_the_mixture_as_one_dataset(parts: dict[str, Any], even: Any) -> None:
    """3 ranks, single samples with the batch hint: the ranks' samples together are the
    order's positions each split keeps (even=True drops N % 3, "pad" repeats the start)."""
    m = _mix(parts)
    full = _full(m)
    kw = {"batch_size": B, "per_sample": True, "even": even, "world_size": 3, **ORDER}
    got = [[int(s["id"]) for s in m.to_torch(rank=r, **kw)] for r in range(3)]
    kept = {True: full[: N - N % 3], False: full, "pad": full + full[: -N % 3]}[even]
    assert Counter(i for g in got for i in g) == Counter(kept)
    assert len({len(g) for g in got}) == (2 if even is False else 1)


def test_the_feeds_own_loader_runs_a_mixture(parts: dict[str, Any]) -> None:
    """FeedLoader (threads, reused buffers) over a mixture: the mixture's order; its state
    after 4 batches resumes on 2 ranks with the rest of the epoch, every id once."""
    m = _mix(parts)
    full = _full(m, 1)
    loader = m.to_torch(batch_size=B, **ORDER).loader(threads=2)
    loader.set_epoch(1)
    assert _ids(loader) == full
    head: list[int] = []
    for k, batch in enumerate(loader):
        head += batch["id"].tolist()
        if k == 3:
            break
    state = loader.state_dict()
    assert state["samples"] == 4 * B and state["epoch"] == 1
    rest = []
    for r in range(2):
        it = m.to_torch(batch_size=B, rank=r, world_size=2, **ORDER)
        it.load_state_dict(state)
        rest += _ids(it.loader(threads=1))
    assert Counter(head + rest) == Counter(full) and head == full[: 4 * B]
