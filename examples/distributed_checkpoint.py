"""A ``torch.distributed.checkpoint`` save by 2 ranks, loaded back into other placements.

Two gloo processes on this machine save a state dict of DTensors (``Shard(0)``,
``Shard(1)``, ``Replicate``, uneven splits, BF16, BOOL, I64, a 0-d tensor) and a step
counter with :class:`tensorfile.distributed.StorageWriter`, then load the checkpoint into
other placements with :class:`tensorfile.distributed.StorageReader`, each rank checking its
pieces bit for bit. One process then loads the whole tensors, and the reference
``safetensors`` reads the file as any checkpoint.

Run with ``python examples/distributed_checkpoint.py [FOLDER]`` (default ``ckpt-ranks``).
Needs torch and safetensors (``pip install 'tensorfile[torch]' safetensors``). Under
``torchrun`` every rank would run :func:`job`; here ``torch.multiprocessing`` starts them.
docs/guides/distributed-checkpoints.md shows what it prints.
"""

from __future__ import annotations

import os
import socket
import sys
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Placement, Replicate, Shard

from tensorfile.distributed import StorageReader, StorageWriter


def full_tensors() -> dict[str, torch.Tensor]:
    """The whole tensors every rank agrees on (the same seed everywhere)."""
    g = torch.Generator().manual_seed(0)
    return {
        "embed.weight": torch.randn(8, 6, generator=g),
        "proj.weight": torch.randn(6, 4, generator=g).to(torch.bfloat16),
        "norm.weight": torch.randn(6, generator=g),
        "mask": torch.rand(5, 3, generator=g) > 0.5,
        "ids": torch.arange(21, dtype=torch.int64).reshape(3, 7),
        "scale": torch.tensor(3.5),
    }


SAVED: dict[str, Placement] = {  # placements of the 2 saving ranks
    "embed.weight": Shard(0),
    "proj.weight": Shard(1),
    "norm.weight": Replicate(),
    "mask": Shard(0),  # 5 rows over 2 ranks: 3 and 2
    "ids": Shard(1),  # 7 columns: 4 and 3
    "scale": Replicate(),
}
LOADED: dict[str, Placement] = {  # placements of the load (the same 2 ranks)
    "embed.weight": Shard(1),
    "proj.weight": Shard(0),
    "norm.weight": Shard(0),
    "mask": Replicate(),
    "ids": Shard(0),
    "scale": Replicate(),
}


def distribute(full: torch.Tensor, mesh: Any, placement: Placement) -> DTensor:
    """This rank's piece of ``full`` as a DTensor (sliced locally: no collective)."""
    rank, world = mesh.get_local_rank(), mesh.size()
    local = full
    if isinstance(placement, Shard):
        pieces = torch.chunk(full, world, placement.dim)
        local = pieces[rank] if rank < len(pieces) else full.narrow(placement.dim, 0, 0)
    return DTensor.from_local(
        local.clone(), mesh, [placement], run_check=False, shape=full.shape, stride=full.stride()
    )


def job(rank: int, world: int, port: int, folder: str) -> None:
    """What every rank runs: save, then load the checkpoint back into other placements."""
    mesh = start(rank, world, port)
    full = full_tensors()
    state: dict[str, Any] = {k: distribute(t, mesh, SAVED[k]) for k, t in full.items()}
    state["step"] = 1000  # not a tensor: kept in the checkpoint's objects file
    dcp.save(state, storage_writer=StorageWriter(folder))
    if rank == 0:
        print(f"saved by {world} ranks:", sorted(os.listdir(folder)), flush=True)

    fresh: dict[str, Any] = {
        k: distribute(torch.zeros_like(t), mesh, LOADED[k]) for k, t in full.items()
    }
    fresh["step"] = 0
    dcp.load(fresh, storage_reader=StorageReader(folder))
    wrong = torch.tensor(
        sum(
            not torch.equal(fresh[k].to_local(), distribute(t, mesh, LOADED[k]).to_local())
            for k, t in full.items()
        )
    )
    dist.all_reduce(wrong)  # every rank checked its own pieces
    if rank == 0:
        print(
            f"loaded by {world} ranks, other placements: equal {int(wrong) == 0}, "
            f"step {fresh['step']}",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()


def start(rank: int, world: int, port: int) -> Any:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return init_device_mesh("cpu", (world,))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(folder: str) -> None:
    mp.spawn(job, args=(2, free_port(), folder), nprocs=2)

    # one process, no process group: whole tensors (DCP says it loads in a single process)
    warnings.filterwarnings("ignore", "torch.distributed is disabled")
    whole: dict[str, Any] = {k: torch.zeros_like(t) for k, t in full_tensors().items()}
    whole["step"] = 0
    dcp.load(whole, storage_reader=StorageReader(folder))
    same = all(torch.equal(whole[k], t) for k, t in full_tensors().items())
    print(f"loaded by 1 process: equal {same}, step {whole['step']}")

    from safetensors.torch import load_file  # the reference reads it as any checkpoint

    plain = load_file(os.path.join(folder, "model.safetensors"))
    same = all(torch.equal(plain[k], t) for k, t in full_tensors().items())
    print(f"reference safetensors: {len(plain)} tensors, equal {same}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ckpt-ranks")
