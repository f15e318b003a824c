"""``inspect``: what is in a model file, from its header alone.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"a.w": np.zeros((2, 3), np.float32), "a.b": np.zeros(3, np.float16)}, path)
    >>> r = inspect(path)
    >>> r.parameter_count, r.parameters_by_dtype, r.bytes_by_dtype
    (9, {'F16': 3, 'F32': 6}, {'F16': 6, 'F32': 24})
    >>> [(g.prefix, g.parameters) for g in module_tree(r.tensors).children]
    [('a', 9)]
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..gguf import GGUFValue
from ._structure import ShardInfo, Structure, TensorEntry, load
from .hash import structural_hash

__all__ = ["InspectResult", "ModuleGroup", "inspect", "json_metadata", "module_tree"]

SCHEMA = 1


@dataclass(frozen=True)
class InspectResult:
    """Everything ``tensorfile inspect`` shows."""

    format: str
    path: str
    version: str | None
    header_size: int
    tensor_count: int
    parameter_count: int
    parameters_by_dtype: dict[str, int]
    bytes_by_dtype: dict[str, int]
    total_bytes: int
    metadata: Mapping[str, Any]
    structural_hash: str
    tensors: tuple[TensorEntry, ...]
    shards: tuple[ShardInfo, ...] | None = None
    bytes_read: int = field(default=0, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document (schema 1)."""
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "format": self.format,
            "path": self.path,
            "version": self.version,
            "header_size": self.header_size,
            "tensor_count": self.tensor_count,
            "parameter_count": self.parameter_count,
            "parameters_by_dtype": self.parameters_by_dtype,
            "bytes_by_dtype": self.bytes_by_dtype,
            "total_bytes": self.total_bytes,
            "metadata": json_metadata(self.metadata),
            "structural_hash": self.structural_hash,
            "tensors": [
                {
                    "name": t.name,
                    "dtype": t.dtype,
                    "shape": list(t.shape),
                    "byte_length": t.byte_length,
                    "data_offsets": list(t.data_offsets),
                    **({"shard": os.path.basename(t.shard)} if t.shard else {}),
                    **({"layout": t.layout} if t.layout != "dense" else {}),
                    **({"encoding": t.encoding} if t.encoding != "raw" else {}),
                }
                for t in self.tensors
            ],
        }
        if self.shards is not None:
            doc["shards"] = [
                {"path": s.path, "tensor_count": s.tensor_count, "total_bytes": s.total_bytes}
                for s in self.shards
            ]
        return doc


def json_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata as JSON values (GGUF values unwrapped to numbers, booleans, text, lists;
    NaN and infinities, which JSON cannot hold, as the strings ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"``)."""
    return {k: _plain(v.value if isinstance(v, GGUFValue) else v) for k, v in metadata.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def inspect(path: str | Structure) -> InspectResult:
    """Inspect a file, sharded checkpoint or glob (or an already loaded Structure)."""
    s = load(path) if isinstance(path, str) else path
    params: dict[str, int] = defaultdict(int)
    nbytes: dict[str, int] = defaultdict(int)
    for t in s.tensors:
        params[t.dtype] += t.parameters
        nbytes[t.dtype] += t.byte_length
    return InspectResult(
        format=s.format,
        path=s.path,
        version=s.version,
        header_size=s.header_size,
        tensor_count=len(s.tensors),
        parameter_count=sum(params.values()),
        parameters_by_dtype=dict(sorted(params.items())),
        bytes_by_dtype=dict(sorted(nbytes.items())),
        total_bytes=sum(nbytes.values()),
        metadata=s.metadata,
        structural_hash=structural_hash(s),
        tensors=s.tensors,
        shards=s.shards,
        bytes_read=s.bytes_read,
    )


@dataclass(frozen=True)
class ModuleGroup:
    """Tensors sharing a dotted module prefix, with subtotals."""

    prefix: str
    parameters: int
    bytes: int
    tensors: tuple[TensorEntry, ...]
    children: tuple[ModuleGroup, ...]


def module_tree(tensors: Sequence[TensorEntry], prefix: str = "") -> ModuleGroup:
    """Group tensors by dotted name components (``model.layers.0.attn.q.weight`` under
    ``model.layers.0`` → ``model.layers.0.attn``...), each group with parameter and byte
    subtotals. A chain of groups that all hold the same tensors is collapsed into one
    (``model.layers.0`` rather than ``model`` → ``model.layers`` → ``model.layers.0``)."""
    cut = len(prefix) + 1 if prefix else 0
    groups: dict[str, list[TensorEntry]] = defaultdict(list)
    leaves: list[TensorEntry] = []
    for t in tensors:
        head, dot, _tail = t.name[cut:].partition(".")
        if dot:
            groups[t.name[:cut] + head].append(t)
        else:
            leaves.append(t)
    children = []
    for key in sorted(groups):
        members = groups[key]
        while True:
            rests = [m.name[len(key) + 1 :] for m in members]
            heads = {r.partition(".")[0] for r in rests}
            if len(heads) == 1 and all("." in r for r in rests):
                key = f"{key}.{heads.pop()}"
            else:
                break
        children.append(module_tree(members, key))
    return ModuleGroup(
        prefix,
        sum(t.parameters for t in tensors),
        sum(t.byte_length for t in tensors),
        tuple(leaves),
        tuple(children),
    )
