"""The feed's own loader (issue 39): ``feed.loader()`` gathers batches in threads of this
process into reused buffers. It must hand out exactly the batches ``DataLoader`` over the
same feed delivers (same order, same split), resume exactly from its own state with another
world size, number of threads or a ``DataLoader`` (and the other way round), never
overwrite a batch the caller still holds (whole, sliced or as numpy), stop its threads
when a pass ends, breaks off or fails, and refuse what it cannot do, clearly.

Oracles: ``DataLoader`` over the same feed (real worker processes), the written values and
:func:`~tensorfile.dataset.order.epoch_order`.
"""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tensorfile import dataset
from tensorfile.dataset.order import epoch_order
from tensorfile.dataset.torch import FeedLoader
from tensorfile.errors import InvalidArgumentError, InvalidTypeError, TensorFileError

N, SHARD, B, SEED = 203, 16, 7, 5
COUNTS = [SHARD] * (N // SHARD) + [N % SHARD]


@pytest.fixture(scope="module")
def ds_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("loader") / "ds")
    ids = np.arange(N, dtype=np.int64)
    x = np.stack([ids * 2, ids * 3, -ids], axis=1).astype(np.float32)
    dataset.write({"id": ids, "x": x}, out, batch_size=SHARD)
    return out


def _feed(path: str, **kw: Any) -> Any:
    opts = {"batch_size": B, "shuffle": True, "seed": SEED, "partitions": 4, "shuffle_block": 32}
    return dataset.open(path).to_torch(**{**opts, **kw})


def _order(epoch: int = 0) -> list[int]:
    return epoch_order(
        COUNTS, seed=SEED, epoch=epoch, shuffle=True, partitions=4, shuffle_block=32, unit=B
    ).tolist()


def _ids(batches: Any) -> list[list[int]]:
    return [b["id"].tolist() for b in batches]


def _feed_threads() -> list[threading.Thread]:
    """The loader threads alive (of this test: each test starts with none, below)."""
    return [t for t in threading.enumerate() if t.name.startswith("tensorfile-feed")]


@pytest.fixture(autouse=True)
def _no_feed_threads_before() -> None:
    if _feed_threads():
        gc.collect()  # a pass another test dropped ends when collected (a full collection
        # costs seconds in a worker holding a large heap: only when needed)
    assert not _feed_threads()


@pytest.mark.parametrize("threads", [0, 3])  # (1 thread: the resume test below)
@pytest.mark.parametrize(
    ("world", "even", "drop_last"),
    [(1, True, False), (3, True, True), (2, "pad", False), (4, False, False)],
)
def test_the_same_batches_as_dataloader(
    ds_path: str, threads: int, world: int, even: Any, drop_last: bool
) -> None:
    for rank in range(world):
        kw = {"rank": rank, "world_size": world, "even": even, "drop_last": drop_last}
        want = _ids(DataLoader(_feed(ds_path, **kw), batch_size=None, num_workers=0))
        loader = _feed(ds_path, **kw).loader(threads=threads, depth=2)
        got = [{k: v.clone() for k, v in b.items()} for b in loader]
        assert _ids(got) == want
        assert len(loader) == len(want)
        for b in got:
            ids = b["id"].numpy()
            assert np.array_equal(b["x"].numpy(), np.stack([ids * 2, ids * 3, -ids], 1))
    assert not _feed_threads()


def test_with_dataloader_worker_processes_as_oracle(ds_path: str) -> None:
    feed = _feed(ds_path, world_size=2, rank=1)
    want = _ids(DataLoader(feed, batch_size=None, num_workers=2))
    assert _ids(_feed(ds_path, world_size=2, rank=1).loader(threads=2)) == want


def test_batches_kept_by_the_caller_are_never_overwritten(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=2, depth=2)
    kept = list(loader)  # every batch held at once: the ring must make new buffers
    assert _ids(kept) == [_order()[i : i + B] for i in range(0, N, B)]
    slices, arrays, ptrs = [], [], set()
    for b in loader:  # a slice and a numpy view outlive their batch
        slices.append(b["id"][1:3])
        arrays.append(b["x"].numpy())
        ptrs.add(b["x"].data_ptr())
    order = _order()
    for i, (s, a) in enumerate(zip(slices, arrays, strict=True)):
        assert s.tolist() == order[i * B + 1 : i * B + 3]
        assert a[:, 0].tolist() == [2.0 * j for j in order[i * B : i * B + a.shape[0]]]
    assert len(ptrs) == len(slices)  # all held: no buffer handed out twice


def test_buffers_are_reused_once_dropped(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=2, depth=3)
    ptrs = []
    for b in loader:
        ptrs.append(b["x"].data_ptr())
        del b
    assert len(set(ptrs)) <= 3 + 3  # depth in flight, the one held, the ring's slack
    assert len(ptrs) == -(-N // B)


@pytest.mark.parametrize(("world2", "threads2"), [(3, 1), (1, 4), (2, 2)])
def test_resume_with_another_world_size_and_threads(
    ds_path: str, world2: int, threads2: int
) -> None:
    # 2 ranks take 4 steps each with the loader, then stop: the state is exact
    loaders = [_feed(ds_path, rank=r, world_size=2).loader(threads=2) for r in range(2)]
    seen: list[int] = []
    states = []
    for loader in loaders:
        it = iter(loader)
        for _ in range(4):
            seen += next(it)["id"].tolist()
        states.append(loader.state_dict())
        loader.close()
    assert {s["samples"] for s in states} == {4 * 2 * B}
    assert sorted(seen) == sorted(_order()[: 8 * B])
    # resumed by world2 ranks, each with threads2 threads: exactly the rest of the epoch
    rest: list[int] = []
    for r in range(world2):
        loader = _feed(ds_path, rank=r, world_size=world2, even=False).loader(threads=threads2)
        loader.load_state_dict(states)
        rest += [i for b in loader for i in b["id"].tolist()]
    assert sorted(seen + rest) == sorted(_order())
    assert len(set(seen + rest)) == N


def test_state_moves_between_the_loader_and_dataloader(ds_path: str) -> None:
    loader = _feed(ds_path).loader()
    it = iter(loader)
    head = [next(it)["id"].tolist() for _ in range(5)]
    state = loader.state_dict()
    assert state["samples"] == 5 * B
    feed = _feed(ds_path)
    feed.load_state_dict(state)
    tail = _ids(DataLoader(feed, batch_size=None, num_workers=2))
    assert [i for b in head + tail for i in b] == _order()
    # and back: a DataLoader run's count resumes the loader
    again = _feed(ds_path).loader(threads=2)
    again.load_state_dict(feed.state_dict(samples=10 * B))
    assert [i for b in again for i in b["id"].tolist()] == _order()[10 * B :]


def test_epochs_and_passes(ds_path: str) -> None:
    loader = _feed(ds_path).loader()
    assert [i for b in loader for i in b["id"].tolist()] == _order(0)
    loader.set_epoch(2)
    it = iter(loader)
    first = next(it)["id"].tolist()
    assert first == _order(2)[:B]
    assert loader.state_dict()["epoch"] == 2
    loader.close()  # broken off: the next pass is the whole epoch again
    assert [i for b in loader for i in b["id"].tolist()] == _order(2)
    # a pass run to its end uses a loaded resume point up
    loader.load_state_dict(loader.state_dict(samples=3 * B))
    assert len(list(loader)) == -(-(N - 3 * B) // B)
    assert len(list(loader)) == -(-N // B)


def test_a_new_pass_ends_the_one_under_way(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=2)
    first = iter(loader)
    next(first)
    second = iter(loader)
    assert next(second)["id"].tolist() == _order()[:B]
    with pytest.raises(StopIteration):
        next(first)
    loader.close()
    gc.collect()
    assert not _feed_threads()


def test_a_loop_broken_off_stops_its_threads_at_once(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=3)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    assert not _feed_threads()  # the dropped pass ended (no gc, no close)
    assert loader.state_dict()["samples"] == 3 * B


def test_keys_and_packed_dtypes(tmp_path: Path) -> None:
    kv = str(tmp_path / "kv")
    names = [f"k{i:03d}" for i in range(20)]
    dataset.write({"name": names, "v": np.arange(40, dtype=np.float32).reshape(20, 2)}, kv,
                  name_col="name")  # fmt: skip
    got = list(dataset.open(kv).to_torch(batch_size=6).loader())
    assert [k for b in got for k in b["key"]] == sorted(names)
    assert torch.cat([b["v"] for b in got]).tolist() == [[2.0 * i, 2.0 * i + 1] for i in range(20)]
    packed = str(tmp_path / "f4")
    values = np.array([[0.5, -1.0, 2.0, 6.0]] * 10, np.float32).astype(ml_dtypes.float4_e2m1fn)
    dataset.write({"x": values}, packed, batch_size=4)
    plain = [
        b["x"] for b in DataLoader(dataset.open(packed).to_torch(batch_size=3), batch_size=None)
    ]
    mine = [b["x"] for b in dataset.open(packed).to_torch(batch_size=3).loader()]
    assert [t.dtype for t in mine] == [t.dtype for t in plain]
    assert all(
        torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        for a, b in zip(mine, plain, strict=True)
    )


def test_bad_arguments_are_refused(ds_path: str) -> None:
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        dataset.open(ds_path).to_torch().loader()
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        dataset.open(ds_path).to_torch(batch_size=4, per_sample=True).loader()
    feed = _feed(ds_path)
    for bad in (-1, 10_000):
        with pytest.raises(InvalidArgumentError, match="threads"):
            feed.loader(threads=bad)
    with pytest.raises(InvalidTypeError, match="threads"):
        feed.loader(threads="2")
    with pytest.raises(InvalidArgumentError, match="depth"):
        feed.loader(depth=0)
    with pytest.raises(InvalidTypeError, match="pin_memory"):
        feed.loader(pin_memory="yes")
    with pytest.raises(InvalidArgumentError, match="device"):
        feed.loader(device="no-such-device")
    if not torch.cuda.is_available():
        with pytest.raises(InvalidArgumentError, match="CUDA"):
            feed.loader(pin_memory=True)
        with pytest.raises(InvalidArgumentError, match="CUDA"):
            feed.loader(device="cuda")
    assert isinstance(feed.loader(device="cpu"), FeedLoader)  # cpu: nothing to copy


def test_a_shard_damaged_under_the_loader_fails_clearly_and_stops(tmp_path: Path) -> None:
    out = str(tmp_path / "ds")
    dataset.write({"x": np.ones((64, 4), np.float32)}, out, batch_size=16)
    loader = dataset.open(out).to_torch(batch_size=8).loader(threads=2, depth=2)
    it = iter(loader)
    assert next(it)["x"].shape == (8, 4)
    shard = sorted(p for p in os.listdir(out) if p.endswith(".safetensors"))[-1]
    with open(os.path.join(out, shard), "r+b") as f:
        f.truncate(8)  # a later shard loses its header: opened only when reached
    with pytest.raises(TensorFileError) as err:
        for _ in it:
            pass
    assert shard in str(err.value)
    gc.collect()
    assert not _feed_threads()


def test_an_empty_rank_and_an_empty_dataset(tmp_path: Path) -> None:
    out = str(tmp_path / "empty")
    dataset.write({"x": np.zeros((0, 2), np.float32)}, out, batch_size=4)
    assert list(dataset.open(out).to_torch(batch_size=4).loader()) == []
    tiny = str(tmp_path / "tiny")
    dataset.write({"x": np.zeros((2, 2), np.float32)}, tiny, batch_size=4)
    feed = dataset.open(tiny).to_torch(batch_size=4, rank=3, world_size=4)  # even: 2 // 4 each
    assert len(feed) == 0
    assert list(feed.loader()) == []
