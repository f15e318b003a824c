"""The sample files every documentation page's examples start from (the contract the pages
are written against: change a name here and the pages that use it fail).

In each page's folder: ``model.safetensors``, ``model-v2.safetensors`` (one tensor changed,
one added), ``model.zt`` (zTensor v1.0), ``ckpt/`` (a sharded Hugging Face checkpoint),
``model.pt`` (``torch.save`` of the same state dict) and ``data/`` (a dataset of 1,000 rows
in 10 shards). They are made once per test session and copied into each page's folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import ml_dtypes
import numpy as np


def state_dict() -> dict[str, np.ndarray]:
    """The tensors of ``model.safetensors``, deterministic."""
    rng = np.random.default_rng(0)
    return {
        "embed.weight": rng.standard_normal((64, 32), dtype=np.float32),
        "layers.0.attn.weight": rng.standard_normal((32, 32)).astype(np.float16),
        "layers.0.attn.bias": np.zeros(32, np.float16),
        "layers.1.attn.weight": rng.standard_normal((32, 32)).astype(np.float16),
        "layers.1.attn.bias": np.zeros(32, np.float16),
        "lm_head.weight": rng.standard_normal((64, 32)).astype(ml_dtypes.bfloat16),
        "step": np.array(1000, np.int64),
    }


def make(folder: Path) -> None:
    """Write every sample file into ``folder``."""
    import torch

    import tensorfile.dataset
    import tensorfile.ztensor
    from tensorfile.safetensors.numpy import save_file, save_sharded

    folder.mkdir(parents=True, exist_ok=True)
    tensors = state_dict()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    v2 = dict(tensors)
    v2["layers.1.attn.bias"] = np.full(32, 0.5, np.float16)
    v2["layers.1.mlp.weight"] = np.ones((64, 32), np.float16)
    save_file(v2, folder / "model-v2.safetensors", metadata={"format": "pt"})
    tensorfile.ztensor.save_file(tensors, folder / "model.zt")
    save_sharded(tensors, folder / "ckpt", max_shard_size=10_000, metadata={"format": "pt"})
    torch.save(
        {
            name: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
            if a.dtype == ml_dtypes.bfloat16
            else torch.from_numpy(a)
            for name, a in tensors.items()
        },
        folder / "model.pt",
    )
    rng = np.random.default_rng(1)
    tensorfile.dataset.write(
        {
            "image": rng.standard_normal((1000, 3, 8, 8), dtype=np.float32),
            "label": np.arange(1000, dtype=np.int64) % 10,
        },
        folder / "data",
        batch_size=100,
    )


def copy_into(made: Path, folder: Path) -> None:
    """A fresh copy of the samples in ``made`` into ``folder`` (each page may change them)."""
    shutil.copytree(made, folder, dirs_exist_ok=True)


if __name__ == "__main__":
    import sys

    make(Path(sys.argv[1]))
    print(sorted(p.name for p in Path(sys.argv[1]).iterdir()))
