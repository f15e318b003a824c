"""Issue 38's "with 4 gloo ranks, each rank's slices equal the reference's ``get_slice``
results for every dtype, for basic and interleaved plans; the storage bytes counted meet the
target": ``tensorfile.distributed.load`` in 4 real gloo processes, alone and cooperatively.

The checkpoint is written by the reference (``safetensors.torch.save_file``) as a sharded
hub checkpoint (two files and an index, by ``huggingface_hub``'s split) holding a small
tensor-parallel model: row-split and column-split weights (one big enough to be cut into
several blocks), a fused QKV weight loaded as interleaved intervals, replicated norms and
embeddings, per-rank experts, a 0-d scalar, an empty tensor, and one tensor of every dtype.
Each rank's plan is :func:`plan_for`; the oracle for every entry is the reference's own
``get_slice`` (a step, which the reference ignores, is applied to its whole ``get_tensor``),
and an interleaved entry is the concatenation of the reference's slices. One group of 4
processes runs every load and the refusals that leave the group usable (:func:`local_loads`),
then, in the same processes, the remote loads of ``test_rank_load_remote`` (the two modules
share the group: the ``rank_load`` fixture of ``tests/distributed/conftest.py``); the rank
killed mid-load is in ``test_rank_load_kill``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch
from huggingface_hub import save_torch_state_dict

from tests.distributed._ranks import Group, Rank, raw

WORLD = 4
TARGET = 1.05  # all ranks together read at most this times the checkpoint's tensor bytes
HIDDEN = 64

DTYPES = [
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2,
    torch.uint16, torch.uint32, torch.uint64,
]  # fmt: skip


def full_tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(38)
    out = {
        "embed.weight": torch.randn(96, HIDDEN, generator=g).to(torch.bfloat16),
        "layers.0.norm.weight": torch.randn(HIDDEN, generator=g),
        "layers.0.qkv.weight": torch.randn(3 * HIDDEN, HIDDEN, generator=g).to(torch.float16),
        "layers.0.o_proj.weight": torch.randn(HIDDEN, HIDDEN, generator=g),  # rows split in
        "layers.0.up.weight": torch.randn(768, 1024, generator=g),  # 3 MiB: several blocks
        "layers.0.down.weight": torch.randn(1024, 200, generator=g),  # columns: one run per row
        "scale": torch.tensor(0.5),
        "empty": torch.zeros(0, 7),
    }
    for e in range(WORLD):
        out[f"experts.{e}.weight"] = torch.randn(16, 16, generator=g).to(torch.bfloat16)
    for k, dt in enumerate(DTYPES):
        base = torch.randint(-100, 100, (12, 5), generator=g)
        if dt.is_floating_point:
            out[f"dtype.{k}"] = (torch.randn(12, 5, generator=g) * 4).to(dt)
        elif dt == torch.bool:
            out[f"dtype.{k}"] = base > 0
        else:
            out[f"dtype.{k}"] = base.abs().to(dt)
    return out


def _qkv(rank: int) -> list[tuple[int, int]]:
    per = HIDDEN // WORLD
    return [(part * HIDDEN + rank * per, part * HIDDEN + (rank + 1) * per) for part in range(3)]


def plan_for(rank: int) -> dict[str, Any]:
    """Rank ``rank``'s plan: a tensor-parallel layout, plus basic indices of every kind."""
    from tensorfile.distributed import Intervals

    rows = 768 // WORLD
    cols = 200 // WORLD
    plan: dict[str, Any] = {
        "embed.weight": None,  # replicated
        "layers.0.norm.weight": None,
        "layers.0.qkv.weight": Intervals(0, _qkv(rank)),  # fused, column parallel
        "layers.0.o_proj.weight": (slice(None), slice(rank * 16, rank * 16 + 16)),
        "layers.0.up.weight": (slice(rank * rows, (rank + 1) * rows),),
        "layers.0.down.weight": (slice(None), [slice(rank * cols, (rank + 1) * cols)]),
        "scale": None,
        "empty": (slice(None),),
        f"experts.{rank}.weight": None,  # expert parallel: only its own
    }
    for k in range(len(DTYPES)):
        plan[f"dtype.{k}"] = [
            (slice(rank * 3, rank * 3 + 3),),
            (slice(None, None, -2), rank % 5),
            (None, ..., slice(1, 4)),
            (rank, slice(None)),
        ][k % 4]
    return plan


def expected(path: Path, name: str, entry: Any) -> torch.Tensor:
    """The reference's result for one plan entry: its ``get_slice`` where it can express the
    index (and the concatenation of its slices for intervals), else its ``get_tensor``
    indexed by numpy (steps, which its ``get_slice`` ignores; ``None``; ``...``)."""
    from tensorfile.distributed import Intervals

    shard = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"][name]
    with safetensors.safe_open(str(path / shard), framework="pt") as f:
        if entry is None:
            return f.get_tensor(name)
        if isinstance(entry, Intervals):
            lead = (slice(None),) * entry.dim
            return torch.cat([f.get_slice(name)[(*lead, slice(a, b))] for a, b in entry.intervals],
                             dim=entry.dim)  # fmt: skip
        items = list(entry)
        if all(isinstance(i, int) or (isinstance(i, slice) and i.step in (None, 1)) for i in items):
            return f.get_slice(name)[tuple(items)]
        whole = f.get_tensor(name)
    arr = whole.contiguous().view(torch.uint8).reshape(*whole.shape, whole.element_size()).numpy()
    for d, item in enumerate(items):
        if isinstance(item, list):
            arr = np.concatenate([arr[(slice(None),) * d + (s,)] for s in item], axis=d)
            items[d] = slice(None)
    out = np.ascontiguousarray(arr[(*items, slice(None))])
    return torch.from_numpy(out).view(whole.dtype).reshape(out.shape[:-1])


def local_loads(ctx: Rank) -> None:
    """Every load of the module, in one group: alone and cooperative, then the refusals
    that leave the group usable (``args``: ``path``, the checkpoint, and ``other``, the same
    tensors split otherwise)."""
    import torch.distributed as dist

    from tensorfile.distributed import LoadCounters, load
    from tensorfile.errors import PeerError, TensorNotFoundError

    path = ctx.args["path"]
    plan = plan_for(ctx.rank)
    alone_counts = LoadCounters()
    alone = load(path, plan, counters=alone_counts)
    ctx.record("alone", {n: (str(t.dtype), tuple(t.shape), raw(t)) for n, t in alone.items()})
    ctx.record("alone_bytes", alone_counts.bytes_read)
    counts = LoadCounters()
    together = load(path, plan, group=dist.group.WORLD, counters=counts)
    ctx.record("together", {n: (str(t.dtype), tuple(t.shape), raw(t)) for n, t in together.items()})
    ctx.record("counts", counts)
    everything = load(path, group=dist.group.WORLD)  # no plan: every tensor, on every rank
    ctx.record("everything", sorted(everything))
    # a rank whose plan names a tensor the checkpoint lacks: every rank fails
    bad = dict(plan, nope=None) if ctx.rank == 2 else plan
    try:
        load(path, bad, group=dist.group.WORLD)
        ctx.record("unknown", "loaded")
    except (PeerError, TensorNotFoundError) as exc:
        ctx.record("unknown", f"{type(exc).__name__}: {exc}")
    # a rank that opened another checkpoint: every rank fails
    other = ctx.args["other"] if ctx.rank == 3 else path
    try:
        load(other, plan, group=dist.group.WORLD)
        ctx.record("other", "loaded")
    except PeerError as exc:
        ctx.record("other", f"{type(exc).__name__}: {exc}")
    dist.barrier()


def write_checkpoints(folder: Path) -> tuple[Path, Path]:
    """The checkpoint the ranks load (``folder/ckpt``: two files and an index) and the same
    tensors split otherwise (``folder/other``: three files)."""
    ckpt, other = folder / "ckpt", folder / "other"
    ckpt.mkdir(parents=True)
    other.mkdir()
    save_torch_state_dict(full_tensors(), ckpt, max_shard_size="2MB")
    save_torch_state_dict(full_tensors(), other, max_shard_size="500KB")
    return ckpt, other


@pytest.fixture(scope="module")
def ckpt(rank_load: Any) -> Path:
    path: Path = rank_load.ckpt
    return path


@pytest.fixture(scope="module")
def group(rank_load: Any) -> Group:
    g: Group = rank_load.group
    return g


def _check(g: Group, key: str, ckpt: Path) -> None:
    for rank, got in enumerate(g.get(key)):
        plan = plan_for(rank)
        assert sorted(got) == sorted(plan), rank
        for name, entry in plan.items():
            want = expected(ckpt, name, entry)
            dtype, shape, data = got[name]
            assert (dtype, shape) == (str(want.dtype), tuple(want.shape)), (rank, name)
            assert data == raw(want), (rank, name, entry)


def test_each_rank_alone_gets_the_references_slices(group: Group, ckpt: Path) -> None:
    _check(group, "alone", ckpt)


def test_cooperative_ranks_get_the_references_slices(group: Group, ckpt: Path) -> None:
    _check(group, "together", ckpt)


def _tensor_bytes() -> int:
    return sum(t.numel() * t.element_size() for t in full_tensors().values())


def test_cooperative_ranks_read_each_byte_once(group: Group) -> None:
    """All ranks together read at most TARGET times the checkpoint's tensors; alone, each
    rank reads the replicated tensors again."""
    counts = group.get("counts")
    together = sum(c.bytes_read for c in counts)
    assert together <= TARGET * _tensor_bytes(), together
    t = full_tensors()
    replicated = sum(t[n].numel() * t[n].element_size() for n in ("embed.weight", "scale"))
    from tensorfile.distributed._regions import SAMPLE_BYTES, SAMPLES

    sampled = WORLD * 2 * SAMPLES * SAMPLE_BYTES  # (the identity's samples of the two files)
    assert sum(group.get("alone_bytes")) >= together - sampled + (WORLD - 1) * replicated
    assert all(c.bytes_read > 0 for c in counts)  # every rank reads its share
    sent = sum(c.bytes_sent for c in counts)
    assert sent > 0 and sum(c.messages_received for c in counts) > 0


def test_no_plan_loads_every_tensor_on_every_rank(group: Group) -> None:
    names = sorted(full_tensors())
    assert group.get("everything") == [names] * WORLD


def test_a_plan_naming_a_missing_tensor_fails_every_rank(group: Group) -> None:
    got = group.get("unknown")
    assert got[2].startswith("TensorNotFoundError") and "'nope'" in got[2]
    for r in (0, 1, 3):
        assert got[r].startswith("PeerError") and "rank 2" in got[r] and "nope" in got[r]


def test_a_rank_on_another_checkpoint_fails_every_rank(group: Group) -> None:
    for r, text in enumerate(group.get("other")):
        assert text.startswith("PeerError") and "another checkpoint" in text, (r, text)
    assert group.failure() is None


def test_the_checkpoint_is_cut_into_several_blocks() -> None:
    """The schedule this module's load runs: the 3 MiB tensor is several blocks, spread over
    the ranks; the replicated tensors are broadcast; an expert is read by its own rank."""
    from tensorfile.core.selection import region
    from tensorfile.distributed._schedule import Tensor, schedule

    t = full_tensors()
    wants = []
    for rank in range(WORLD):
        w = {}
        for name, entry in plan_for(rank).items():
            w[name] = region(tuple(t[name].shape), entry, name).dims
        wants.append(w)
    tensors = [Tensor(n, tuple(v.shape), v.element_size(), True) for n, v in t.items()]
    s = schedule(wants, tensors, 1 << 20)
    up = [b for b in s.blocks if b.name == "layers.0.up.weight"]
    assert len(up) >= 3 and len({b.owner for b in up}) >= 3
    assert all(b.broadcast for b in s.blocks if b.name == "embed.weight")
    for e in range(WORLD):
        (block,) = [b for b in s.blocks if b.name == f"experts.{e}.weight"]
        assert block.owner == e and not block.broadcast
    total = sum(b.nbytes for b in s.blocks)
    assert total <= math.ceil(TARGET * _tensor_bytes())
