"""The state dict of issue 37's "done when": DTensors of every kind of placement (Shard(0),
Shard(1), Replicate, uneven with empty shards) and of F32, F16, BF16, F8_E4M3, F8_E5M2,
BOOL and I64, a 0-d tensor, plain tensors and entries that are not tensors (an int step, a
nested dict holding a float, RNG states), as 2 ranks save it and 3 ranks load it.

Tensor names in the saved checkpoint are DCP's FQNs: nested dicts flattened with ``.``.
"""

from __future__ import annotations

import random
from typing import Any

import torch
from torch.distributed.tensor import Replicate, Shard

from tests.distributed._ranks import dtensor, local_chunk


def full_tensors(seed: int = 37) -> dict[str, torch.Tensor]:
    """FQN -> the whole tensor (what the checkpoint file must hold); another ``seed`` gives
    other values (every tensor differs) of the same names, dtypes and shapes."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    return {
        "model.w_s0_f32": r(6, 4),
        "model.w_s1_bf16": r(4, 6).to(torch.bfloat16),
        "model.w_rep_f8": r(3, 5).to(torch.float8_e4m3fn),
        "model.w_s0_f8e5": r(5, 3).to(torch.float8_e5m2),
        "model.mask_bool": torch.arange(5) % 2 == (seed % 2),
        "model.idx_i64": torch.randint(-(2**40), 2**40, (3, 5), generator=g),
        "model.tiny_s0": r(1, 4),  # 2 ranks: rank 1 holds an empty shard; 3 ranks: two do
        "model.pair_f16": r(2, 2).half(),  # loaded Shard(1) by 3 ranks: rank 2 empty
        "model.scalar_f32": torch.tensor(3.5 + seed),  # 0-d
        "plain_i32": torch.arange(4, dtype=torch.int32) * seed,
        "rng.torch": torch.Generator().manual_seed(seed).get_state(),  # a U8 tensor
    }


SAVE = {  # placement on 2 ranks (None: a plain tensor, the same on every rank)
    "model.w_s0_f32": Shard(0),
    "model.w_s1_bf16": Shard(1),
    "model.w_rep_f8": Replicate(),
    "model.w_s0_f8e5": Shard(0),  # 5 rows: 3 + 2
    "model.mask_bool": Shard(0),
    "model.idx_i64": Shard(1),  # 5 columns: 3 + 2
    "model.tiny_s0": Shard(0),
    "model.pair_f16": Replicate(),
    "model.scalar_f32": Replicate(),
    "plain_i32": None,
    "rng.torch": None,
}
LOAD = {  # placement on 3 ranks: another for each DTensor
    "model.w_s0_f32": Shard(1),
    "model.w_s1_bf16": Shard(0),
    "model.w_rep_f8": Shard(0),
    "model.w_s0_f8e5": Shard(1),
    "model.mask_bool": Replicate(),
    "model.idx_i64": Shard(0),
    "model.tiny_s0": Shard(0),
    "model.pair_f16": Shard(1),
    "model.scalar_f32": Replicate(),
    "plain_i32": None,
    "rng.torch": None,
}
FLOAT = [  # what torch's HuggingFaceStorageWriter takes (it refuses BOOL and integers)
    "model.w_s0_f32",
    "model.w_s1_bf16",
    "model.w_rep_f8",
    "model.w_s0_f8e5",
    "model.tiny_s0",
    "model.pair_f16",
]


def objects(seed: int = 37) -> dict[str, Any]:
    """The entries that are not tensors, nested as in the state dict."""
    return {
        "step": 7 + seed,
        "extra": {"lr": 0.1 * seed, "name": f"run-{seed}"},
        "rng": {"python": random.Random(seed).getstate()},
    }


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": x}`` -> ``{"a": {"b": x}}`` (the state dict DCP flattens back to FQNs)."""
    out: dict[str, Any] = {}
    for fqn, value in flat.items():
        *parents, leaf = fqn.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Nested dicts ``a`` and ``b`` merged (``b`` wins on leaves)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def state_dict(
    mesh: Any,
    placements: dict[str, Any],
    rank: int,
    world: int,
    *,
    names: list[str] | None = None,
    seed: int = 37,
    empty: bool = False,
    with_objects: bool = True,
) -> dict[str, Any]:
    """The nested state dict rank ``rank`` holds: the tensors of ``names`` (all by default)
    placed by ``placements``; ``empty``: zeros to load into, and placeholder objects."""
    full = full_tensors(seed)
    flat: dict[str, Any] = {}
    for n in names or list(full):
        t = torch.zeros_like(full[n]) if empty else full[n]
        flat[n] = dtensor(t, mesh, placements[n], rank, world)  # views of t, as FSDP's are
    sd = nest(flat)
    if with_objects:
        sd = merge(sd, placeholder_objects() if empty else objects(seed))
    return sd


def placeholder_objects() -> dict[str, Any]:
    return {"step": -1, "extra": {"lr": -1.0, "name": ""}, "rng": {"python": ()}}


def expected_local(
    placements: dict[str, Any],
    rank: int,
    world: int,
    names: list[str] | None = None,
    seed: int = 37,
) -> dict[str, torch.Tensor]:
    """FQN -> the local tensor rank ``rank`` must hold after a load with ``placements``."""
    full = full_tensors(seed)
    return {n: local_chunk(full[n], placements[n], rank, world) for n in names or list(full)}


def flat_tensors(sd: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The tensors (and DTensors) of a nested state dict by FQN."""
    out: dict[str, Any] = {}
    for k, v in sd.items():
        if isinstance(v, dict):
            out.update(flat_tensors(v, f"{prefix}{k}."))
        elif isinstance(v, torch.Tensor):
            out[prefix + k] = v
    return out


def object_mismatches(sd: dict[str, Any], seed: int = 37) -> dict[str, str]:
    """What of the non-tensor entries differs from :func:`objects` after a load."""
    want = objects(seed)
    out = {}
    if sd.get("step") != want["step"]:
        out["step"] = repr(sd.get("step"))
    for k in ("lr", "name"):
        if sd.get("extra", {}).get(k) != want["extra"][k]:
            out[f"extra.{k}"] = repr(sd.get("extra", {}).get(k))
    if sd.get("rng", {}).get("python") != want["rng"]["python"]:
        out["rng.python"] = repr(sd.get("rng", {}).get("python"))[:80]
    return out
