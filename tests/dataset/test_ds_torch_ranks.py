"""Feeding PyTorch: every sample exactly once per epoch across ranks and DataLoader workers,
equal counts per rank, a reproducible order per seed and epoch, every dtype as torch's.

The distributed test runs real ranks: two processes joined by ``torch.distributed`` with the
gloo backend on 127.0.0.1, each with a DataLoader of two worker processes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from tensorfile import dataset
from tensorfile.dataset.feed.torch_state import Split
from tensorfile.dataset.layout.manifest import ShardEntry
from tensorfile.dataset.torch import FeedDataset, FeedOptions, TorchIterable, TorchMap
from tensorfile.errors import InvalidArgumentError, InvalidTypeError

N = 103  # not a multiple of anything used below


@pytest.fixture(scope="module")
def ds_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("torch") / "ds")
    dataset.write(
        {
            "id": np.arange(N, dtype=np.int64),
            "x": np.arange(N * 3, dtype=np.float32).reshape(N, 3),
            "h": np.arange(N * 2, dtype=np.float32).reshape(N, 2),
        },
        out,
        batch_size=7,
        shapes={"h": [2]},
        dtype="BF16",
        columns=None,
    )
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 500),
    st.integers(0, 500),
    st.integers(1, 6),
    st.integers(1, 9),
    st.sampled_from([True, "pad", False]),
)
def test_steps_cover_each_position_once(
    total: int, base: int, world: int, unit: int, even: Any
) -> None:
    """The lockstep steps from any resume point: each rank's pieces, concatenated step by
    step, are exactly the positions left (the even= tail apart), and after s steps the
    positions consumed are a prefix."""
    base = min(base, total)
    split = Split(total, base, world, unit, even)
    left = total - base
    per_rank = [0] * world
    seen: list[int] = []
    for t in range(split.steps):
        for rank in range(world):
            lo, hi = split.piece(t, rank)
            assert hi - lo <= unit
            seen += [p % total for p in range(lo, hi)] if total else []
            per_rank[rank] += hi - lo
        if t < split.steps - 1:
            assert seen == list(range(base, base + split.consumed(t + 1)))
    assert split.consumed(split.steps) == left
    if even is True:
        assert per_rank == [left // world] * world
        assert seen == list(range(base, base + left // world * world))
    elif even == "pad":
        assert len(set(per_rank)) == 1 and per_rank[0] * world >= left
        assert set(range(base, total)) <= set(seen)
    else:
        assert max(per_rank) - min(per_rank) <= 1
        assert seen == list(range(base, total))


def _ids(it: Any) -> list[int]:
    return [int(s["id"]) for s in it]


def test_ranks_and_workers_in_process(ds_path: str) -> None:
    ds = dataset.open(ds_path)
    for shuffle in (False, True):
        for world in (1, 2, 3):
            got: list[int] = []
            for rank in range(world):
                it = ds.to_torch(shuffle=shuffle, seed=5, rank=rank, world_size=world)
                ids = _ids(it)
                assert len(ids) == len(it) == N // world
                got += ids
            assert len(got) == len(set(got)) == N // world * world
    # shuffled: the same order for the same seed and epoch, another for another epoch
    a = ds.to_torch(shuffle=True, seed=1, rank=0, world_size=1)
    b = ds.to_torch(shuffle=True, seed=1, rank=0, world_size=1)
    assert _ids(a) == _ids(b)
    b.set_epoch(1)
    assert _ids(a) != _ids(b) and sorted(_ids(a)) == sorted(_ids(b)) == list(range(N))
    c = ds.to_torch(shuffle=True, seed=2, rank=0, world_size=1)
    assert _ids(c) != _ids(a)
    assert _ids(ds.to_torch()) == list(range(N))  # no shuffle: the dataset's order


def test_pad_and_uneven(ds_path: str) -> None:
    ds = dataset.open(ds_path)
    pad = [_ids(ds.to_torch(rank=r, world_size=4, even="pad")) for r in range(4)]
    assert [len(p) for p in pad] == [26] * 4
    assert set().union(*pad) == set(range(N))
    uneven = [_ids(ds.to_torch(rank=r, world_size=4, even=False)) for r in range(4)]
    assert sorted(i for ids in uneven for i in ids) == list(range(N))
    with pytest.raises(InvalidArgumentError):
        ds.to_torch(even="maybe")
    with pytest.raises(InvalidArgumentError):
        ds.to_torch(rank=2, world_size=2)
    with pytest.raises(InvalidArgumentError):
        ds.to_torch(seed=-1)


def test_dataloader_workers_and_bf16_collate(ds_path: str) -> None:
    ds = dataset.open(ds_path)
    it = ds.to_torch(shuffle=True, seed=9)
    loader = DataLoader(it, batch_size=8, num_workers=2)
    batches = list(loader)
    ids = torch.cat([b["id"] for b in batches]).tolist()
    assert sorted(ids) == list(range(N))
    assert batches[0]["h"].dtype == torch.bfloat16
    assert batches[0]["x"].dtype == torch.bfloat16  # (dtype= applies to every array column)
    assert batches[0]["id"].dtype == torch.int64
    # the map-style dataset with the default collate and a sampler
    m = ds.to_torch(map_style=True)
    loader = DataLoader(m, batch_size=10, num_workers=2, shuffle=True)
    got = list(loader)
    assert sorted(torch.cat([b["id"] for b in got]).tolist()) == list(range(N))
    assert got[0]["h"].dtype == torch.bfloat16 and got[0]["h"].shape[1:] == (2,)
    row = m[4]
    assert row["x"].tolist() == [12.0, 13.0, 14.0] and row["h"].tolist() == [8.0, 9.0]


def test_kv_dataset_to_torch(tmp_path: Path) -> None:
    out = str(tmp_path / "kv")
    keys = [f"k{i:02d}" for i in range(20)]
    dataset.write(
        {"name": keys, "v": np.eye(20, dtype=np.float32)},
        out,
        name_col="name",
        target_shard_size_mb=0.0005,
    )
    ds = dataset.open(out)
    got = []
    for r in range(2):
        got += [s["key"] for s in ds.to_torch(shuffle=True, seed=3, rank=r, world_size=2)]
    assert sorted(got) == keys


_RANK_SCRIPT = r"""
import datetime, json, sys
import torch, torch.distributed as dist
from torch.utils.data import DataLoader
from tensorfile import dataset


def main():
    rank, store, path, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    # rendezvous through a file (no port to race for); gloo itself talks over 127.0.0.1
    # (GLOO_SOCKET_IFNAME=lo); a rank that dies makes the other fail within a minute
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    ds = dataset.open(path)
    it = ds.to_torch(shuffle=True, seed=11)  # rank and world size from torch.distributed
    epochs = {}
    # workers forked from a fork server (a fresh process that imported this script, so torch
    # once, not once per worker as spawned ones do): forking a process that runs gloo's
    # threads can deadlock a child; kept for both epochs (set_epoch reaches persistent
    # workers at their next pass)
    loader = DataLoader(it, batch_size=4, num_workers=2, multiprocessing_context="forkserver",
                        persistent_workers=True)
    for epoch in range(2):
        it.set_epoch(epoch)
        ids, steps = [], 0
        for batch in loader:
            ids += batch["id"].tolist()
            assert batch["h"].dtype == torch.bfloat16
            steps += 1
        # every rank takes the same number of steps: a collective per epoch does not hang
        t = torch.tensor([steps])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        assert t.item() == steps, (t.item(), steps)
        epochs[epoch] = ids
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(epochs, f)


if __name__ == "__main__":
    main()
"""


def _run_ranks(ds_path: str, tmp_path: Path) -> list[dict[str, list[int]]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "rank.py"
    script.write_text(_RANK_SCRIPT)
    store = tmp_path / "rendezvous"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    logs = [open(tmp_path / f"{r}.log", "wb") for r in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(store), ds_path, str(tmp_path / f"{r}.json")],
            env=env,
            stdout=logs[r],
            stderr=subprocess.STDOUT,
        )
        for r in range(2)
    ]
    deadline = time.monotonic() + 300
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in logs:
            f.close()
    said = "\n".join((tmp_path / f"{r}.log").read_text(errors="replace")[-3000:] for r in range(2))
    assert [p.returncode for p in procs] == [0, 0], said
    return [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(2)]


def test_two_gloo_ranks_with_two_workers_each(ds_path: str, tmp_path: Path) -> None:
    first = _run_ranks(ds_path, tmp_path / "a")
    for epoch in ("0", "1"):
        per_rank = [r[epoch] for r in first]
        assert [len(ids) for ids in per_rank] == [N // 2, N // 2]  # equal counts
        every = per_rank[0] + per_rank[1]
        assert len(set(every)) == len(every) == N - N % 2  # each sample once; 1 dropped
    assert first[0]["0"] != first[0]["1"]  # another order in another epoch
    # the same seed and epochs give the same order on every rank in another run: here this
    # process, each rank named explicitly, with the ranks' loader (two workers kept for both
    # epochs); a second group of ranks would cost two more interpreters that import torch
    again = []
    for rank in range(2):
        it = dataset.open(ds_path).to_torch(shuffle=True, seed=11, rank=rank, world_size=2)
        loader = DataLoader(it, batch_size=4, num_workers=2, persistent_workers=True)
        epochs = {}
        for epoch in range(2):
            it.set_epoch(epoch)
            epochs[str(epoch)] = [i for batch in loader for i in batch["id"].tolist()]
        again.append(epochs)
    assert again == first


def test_to_torch_checks_its_arguments(ds_path: str) -> None:
    ds = dataset.open(ds_path)
    with pytest.raises(InvalidArgumentError, match="shuffle_block must be between 1"):
        ds.to_torch(shuffle_block=0)
    with pytest.raises(TypeError):
        ds.to_torch(batch_size=2.0)  # type: ignore[arg-type]
    it = TorchIterable(ds)
    with pytest.raises(InvalidArgumentError):
        it.set_epoch(-1)
    for even in (0, 1, 0.0, "bogus"):  # only True, False, "drop", "pad" (bools by identity)
        with pytest.raises(InvalidArgumentError, match="even"):
            ds.to_torch(even=even)  # type: ignore[arg-type]
    # out of range: refused when made, not when iterated, with the bound
    for kw in ({"partitions": 0}, {"partitions": 2**25}, {"shuffle_block": 2**70}):
        with pytest.raises(InvalidArgumentError, match="between"):
            ds.to_torch(shuffle=True, **kw)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="rank 2 is not below world_size 2"):
        ds.to_torch(rank=2, world_size=2)
    with pytest.raises(InvalidArgumentError, match="rank 1 is not below world_size 1"):
        ds.to_torch(rank=1)  # the world size torch.distributed has: 1 here
    with pytest.raises(InvalidTypeError, match="options must be a FeedOptions"):
        TorchIterable(ds, {"batch_size": 2})  # type: ignore[arg-type]


def test_feed_options_are_checked_once_and_carried_whole(ds_path: str) -> None:
    """to_torch's keywords become one frozen FeedOptions, checked when made (the same checks
    and messages whether it is made by to_torch or by hand), which the feed keeps and its
    DataLoader workers get (pickled, with the rank and world size resolved)."""
    ds = dataset.open(ds_path)
    it = ds.to_torch(batch_size=4, shuffle=True, seed=5, even="drop", shuffle_block=64)
    want = FeedOptions(batch_size=4, shuffle=True, seed=5, even=True, shuffle_block=64)
    assert it.options == want
    assert (want.batched, want.unit, want.even) == (True, 4, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        want.seed = 6  # type: ignore[misc]
    for bad in (
        {"seed": -1},
        {"partitions": 0},
        {"per_sample": False},
        {"rank": 3, "world_size": 2},
    ):
        with pytest.raises(InvalidArgumentError) as by_hand:
            FeedOptions(**bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError) as by_keywords:
            ds.to_torch(**bad)  # type: ignore[arg-type]
        assert str(by_hand.value) == str(by_keywords.value)
    again = pickle.loads(pickle.dumps(it))
    assert again.options == dataclasses.replace(want, rank=0, world_size=1)
    assert [b["id"].tolist() for b in again] == [b["id"].tolist() for b in it]


def test_the_legacy_aliases_are_gone(ds_path: str) -> None:
    """The 0.1 package's names went (the changelog says what to use): ``shuffle_buffer=`` is
    an unknown keyword, ``ShardedIterable`` no name of the feed."""
    import tensorfile.dataset.torch as face

    with pytest.raises(TypeError, match="shuffle_buffer"):
        dataset.open(ds_path).to_torch(shuffle_buffer=64)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="shuffle_buffer"):
        FeedOptions(shuffle_buffer=64)  # type: ignore[call-arg]
    assert "ShardedIterable" not in dir(face)


class _Rows:
    """A dataset of its own making, fed through the protocol only (no ``Dataset``): the
    first ``n`` samples of ``ds``, counting how often the feed asked for a prefetch."""

    def __init__(self, ds: dataset.Dataset) -> None:
        self._ds = ds
        self.path = "rows"
        self.manifest = ds.manifest
        self.mode = ds.mode
        self.predownload = 10
        self.asked: list[str] = []

    def prefetch(self, shards: Sequence[ShardEntry]) -> None:
        self.asked.extend(s.shard_path for s in shards)

    def shard_arrays(self, shard: ShardEntry) -> dict[str, Any]:
        return self._ds.shard_arrays(shard)

    def __len__(self) -> int:
        return len(self._ds)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self._ds[index]


def test_the_feed_needs_only_its_protocol(ds_path: str) -> None:
    rows = _Rows(dataset.open(ds_path))
    assert isinstance(rows, FeedDataset)
    ids = [b["id"].tolist() for b in TorchIterable(rows, FeedOptions(batch_size=50))]
    assert ids == [list(range(50)), list(range(50, 100)), list(range(100, N))]
    assert rows.asked and set(rows.asked) <= {s.shard_path for s in rows.manifest.shards}
    assert len(TorchMap(rows)) == N and TorchMap(rows)[3]["id"].item() == 3


@pytest.mark.parametrize(
    ("dtype", "want"),
    [
        ("F8_E4M3", torch.float8_e4m3fn),
        ("F8_E5M2", torch.float8_e5m2),
        ("BF16", torch.bfloat16),
        ("F16", torch.float16),
        ("U16", torch.uint16),
        ("I8", torch.int8),
    ],
)
def test_every_dtype_arrives_as_torch_dtype(tmp_path: Path, dtype: str, want: Any) -> None:
    out = str(tmp_path / dtype)
    values = np.arange(12, dtype=np.float32).reshape(6, 2)
    dataset.write({"v": values}, out, batch_size=4, shapes={"v": [2]}, dtype=dtype)
    ds = dataset.open(out)
    got = list(DataLoader(ds.to_torch(), batch_size=3))
    assert got[0]["v"].dtype == want
    from tensorfile.core.dtypes import from_safetensors

    stored = values.astype(from_safetensors(dtype).numpy).astype(np.float32)  # as written
    assert torch.cat([b["v"] for b in got]).to(torch.float32).tolist() == stored.tolist()
    mapped = list(DataLoader(ds.to_torch(map_style=True), batch_size=6))
    assert mapped[0]["v"].dtype == want
