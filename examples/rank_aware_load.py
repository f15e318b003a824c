"""A tensor-parallel load by 4 ranks: each rank gets only its slices, each byte read once.

A small model is saved as a sharded hub checkpoint (two files and an index): fused QKV and
gate-up weights, row- and column-split projections, replicated embeddings and norms, one
expert per rank. Four gloo processes on this machine then load it with
:func:`tensorfile.distributed.load`, each with its own plan (basic indexing, and
:class:`tensorfile.distributed.Intervals` for the fused weights), first each rank alone
(every rank reads what it wants from storage), then cooperatively (``group=``: every byte
read by one rank and sent to the others). Each rank checks its slices against the reference
``safetensors``' ``get_slice``; rank 0 prints what the ranks read and sent, from their
:class:`tensorfile.distributed.LoadCounters`.

Run with ``python examples/rank_aware_load.py [FOLDER]`` (default ``ckpt-tp``). Needs torch
and safetensors (``pip install 'tensorfile[torch]' safetensors``). Under ``torchrun`` every
rank would run :func:`job`; here ``torch.multiprocessing`` starts them.
docs/guides/rank-aware-loading.md shows what it prints.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tensorfile.distributed import Intervals, LoadCounters, load
from tensorfile.safetensors.torch import save_sharded

WORLD = 4
HIDDEN = 256
INTER = 512


def full_tensors() -> dict[str, torch.Tensor]:
    """The model's whole tensors (the same seed everywhere)."""
    g = torch.Generator().manual_seed(0)
    out = {"embed.weight": torch.randn(1000, HIDDEN, generator=g).to(torch.bfloat16)}
    for i in range(2):
        p = f"layers.{i}."
        out[p + "norm.weight"] = torch.randn(HIDDEN, generator=g)
        out[p + "qkv.weight"] = torch.randn(3 * HIDDEN, HIDDEN, generator=g).to(torch.bfloat16)
        out[p + "o_proj.weight"] = torch.randn(HIDDEN, HIDDEN, generator=g).to(torch.bfloat16)
        out[p + "gate_up.weight"] = torch.randn(2 * INTER, HIDDEN, generator=g)
        out[p + "down.weight"] = torch.randn(HIDDEN, INTER, generator=g)
    for e in range(WORLD):
        out[f"experts.{e}.weight"] = torch.randn(64, HIDDEN, generator=g)
    return out


def fused(rank: int, parts: int, size: int) -> Intervals:
    """Rank ``rank``'s rows of a weight fusing ``parts`` blocks of ``size`` rows (QKV: 3,
    gate-up: 2): its share of each block, concatenated."""
    lo, hi = rank * size // WORLD, (rank + 1) * size // WORLD
    return Intervals(0, [(k * size + lo, k * size + hi) for k in range(parts)])


def plan_for(rank: int) -> dict[str, Any]:
    """What rank ``rank`` loads: a tensor-parallel layout of the model, and its expert."""
    h, i = HIDDEN // WORLD, INTER // WORLD
    plan: dict[str, Any] = {"embed.weight": None}  # replicated
    for layer in range(2):
        p = f"layers.{layer}."
        plan[p + "norm.weight"] = None  # replicated
        plan[p + "qkv.weight"] = fused(rank, 3, HIDDEN)  # column parallel, fused
        plan[p + "o_proj.weight"] = (slice(None), slice(rank * h, (rank + 1) * h))  # row parallel
        plan[p + "gate_up.weight"] = fused(rank, 2, INTER)
        plan[p + "down.weight"] = (slice(None), slice(rank * i, (rank + 1) * i))
    plan[f"experts.{rank}.weight"] = None  # expert parallel: its own expert only
    return plan


def reference_slice(folder: str, name: str, entry: Any) -> torch.Tensor:
    """What the reference ``safetensors`` gives for one plan entry (its ``get_slice``; an
    interleaved entry is the concatenation of its slices)."""
    import safetensors

    with open(os.path.join(folder, "model.safetensors.index.json"), encoding="utf-8") as index:
        shard = json.load(index)["weight_map"][name]
    with safetensors.safe_open(os.path.join(folder, shard), "pt") as f:
        if entry is None:
            return f.get_tensor(name)
        if isinstance(entry, Intervals):
            return torch.cat([f.get_slice(name)[a:b] for a, b in entry.intervals])
        return f.get_slice(name)[entry]


def job(rank: int, port: int, folder: str) -> None:
    """What every rank runs: its plan loaded alone, then cooperatively."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    plan = plan_for(rank)
    index = os.path.join(folder, "model.safetensors.index.json")

    alone = LoadCounters()
    load(index, plan, counters=alone)  # each rank reads its own slices from storage

    coop = LoadCounters()
    mine = load(index, plan, group=dist.group.WORLD, counters=coop)
    wrong = sum(not torch.equal(mine[n], reference_slice(folder, n, e)) for n, e in plan.items())

    numbers = torch.tensor([wrong, alone.bytes_read, coop.bytes_read, coop.bytes_sent])
    dist.all_reduce(numbers)
    if rank == 0:
        wrong, naive, once, sent = numbers.tolist()
        size = sum(t.nbytes for t in full_tensors().values())
        print(f"{WORLD} ranks, slices equal to the reference's get_slice: {wrong == 0}")
        print(f"checkpoint: {size:,} bytes of tensors")
        print(f"each rank alone: {naive:,} bytes read in all ({naive / size:.2f}x)")
        print(f"cooperative: {once:,} bytes read in all ({once / size:.2f}x), {sent:,} sent")
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(folder: str) -> None:
    save_sharded(full_tensors(), folder, max_shard_size="2MB")
    print("saved:", len(os.listdir(folder)) - 1, "shards and their index")
    mp.spawn(job, args=(free_port(), folder), nprocs=WORLD)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ckpt-tp")
