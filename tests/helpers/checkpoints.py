"""Model files the tests write and parse: small safetensors, zTensor and GGUF files whose
contents the tests know, sharded checkpoints, GGUF bytes built by hand, and folder listings.

Files are written by tensorfile's ``save_file`` (already checked against the reference
libraries by tests/safetensors and tests/ztensor) or by the reference ``gguf`` package, and
read back byte by byte per the specs (8-byte little-endian header length, JSON header, data
buffer) or with the reference ``safetensors`` library, never with tensorfile's readers.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2
import numpy as np
from safetensors.numpy import load_file

from tensorfile import ztensor
from tensorfile.safetensors.numpy import save_file

NDArray = np.ndarray[Any, Any]
PathLike = str | os.PathLike[str]

# -- a small model whose numbers the tests know ----------------------------------------------

# name -> array: 149 parameters; F32 120 (480 B), F16 24 (48 B), I8 3 (3 B), I32 2 (8 B)
MODEL: dict[str, NDArray] = {
    "lm_head.weight": np.arange(24, dtype=np.float32).reshape(4, 6) / 7,
    "model.embed.weight": np.linspace(-1, 1, 60, dtype=np.float32).reshape(10, 6),
    "model.layers.0.attn.q.weight": np.arange(36, dtype=np.float32).reshape(6, 6) - 10,
    "model.layers.0.attn.q.bias": np.arange(6, dtype=np.float16) / 4,
    "model.layers.1.mlp.up.weight": np.arange(18, dtype=np.float16).reshape(3, 6),
    "model.layers.1.mlp.up.bias": np.array([-3, 0, 7], dtype=np.int8),
    "model.norm.scale": np.array([1, -2], dtype=np.int32),
}
MODEL_META = {"format": "pt", "note": "hello world"}
MODEL_PARAMS = 149
MODEL_PARAMS_BY_DTYPE = {"F16": 24, "F32": 120, "I32": 2, "I8": 3}
MODEL_BYTES_BY_DTYPE = {"F16": 48, "F32": 480, "I32": 8, "I8": 3}
MODEL_TOTAL_BYTES = 539
SAFETENSORS_DTYPE = {"float32": "F32", "float16": "F16", "int8": "I8", "int32": "I32"}


# -- writing files ---------------------------------------------------------------------------


def write_safetensors(
    path: Path,
    tensors: dict[str, NDArray] | None = None,
    metadata: dict[str, str] | None = None,
) -> Path:
    """``tensors`` (default :data:`MODEL`) as a safetensors file."""
    save_file(dict(MODEL if tensors is None else tensors), str(path), metadata)
    return path


def write_zt(
    path: Path,
    tensors: dict[str, NDArray] | None = None,
    attributes: dict[str, str] | None = None,
    **kwargs: Any,
) -> Path:
    """``tensors`` (default :data:`MODEL`) as a zTensor file (``kwargs``: compression...)."""
    data = dict(MODEL if tensors is None else tensors)
    ztensor.save_file(data, path, attributes=attributes, **kwargs)
    return path


def write_gguf(
    path: Path,
    tensors: dict[str, NDArray],
    kv: Sequence[tuple[str, str, Any]] = (),
    arch: str = "llama",
) -> Path:
    """A GGUF v3 file written by the reference ``gguf`` package; ``kv`` holds
    ``(method, key, value)`` such as ``("add_uint32", "llama.block_count", 2)``."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    for method, key, value in kv:
        getattr(w, method)(key, value)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_sharded(
    folder: PathLike,
    shards: Sequence[Mapping[str, NDArray]],
    metadata: Mapping[str, str] | Sequence[Mapping[str, str] | None] | None = None,
) -> Path:
    """A sharded checkpoint: ``model-0000i-of-0000n.safetensors`` files and
    ``model.safetensors.index.json`` in ``folder`` (created when missing); returns the index
    path.

    ``metadata`` is one mapping for every shard (an empty one: no metadata), or a list of
    each shard's metadata (None: none)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n = len(shards)
    if metadata is None or isinstance(metadata, Mapping):
        metas: list[Mapping[str, str] | None] = [dict(metadata or {}) or None] * n
    else:
        metas = list(metadata) or [None] * n
    weight_map = {}
    total = 0
    for i, tensors in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{n:05d}.safetensors"
        meta = metas[i - 1]
        save_file(dict(tensors), str(folder / name), None if meta is None else dict(meta))
        for key, arr in tensors.items():
            weight_map[key] = name
            total += arr.nbytes
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return index


# -- GGUF bytes by hand ----------------------------------------------------------------------


def gstr(text: str | bytes) -> bytes:
    """A GGUF string: u64 length, then the bytes."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def gguf_blob(
    *,
    kvs: Sequence[bytes] = (),
    tensors: Sequence[bytes] = (),
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
    data: bytes = b"",
    alignment: int = 32,
    magic: bytes = b"GGUF",
) -> bytes:
    """A GGUF file from pre-encoded key-value and tensor-info records, padded to the
    alignment, then ``data``."""
    head = magic + struct.pack("<I", version)
    head += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors,
                        len(kvs) if n_kv is None else n_kv)  # fmt: skip
    head += b"".join(kvs) + b"".join(tensors)
    head += bytes(-len(head) % alignment)
    return head + data


def gguf_kv(key: str | bytes, type_id: int, payload: bytes) -> bytes:
    """One key-value record."""
    return gstr(key) + struct.pack("<I", type_id) + payload


def gguf_tensor(name: str, dims: Sequence[int], type_id: int = 0, offset: int = 0) -> bytes:
    """One tensor-info record."""
    return (
        gstr(name)
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", type_id, offset)
    )


# -- reading files back ----------------------------------------------------------------------


def header_len(path: PathLike) -> int:
    """The safetensors header length prefix of a file."""
    with open(path, "rb") as f:
        return int.from_bytes(f.read(8), "little")


def safetensors_header(path: Path) -> tuple[int, dict[str, Any]]:
    """The declared header length and the parsed JSON header of a safetensors file."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8 : 8 + n])


def zt_manifest(path: Path) -> tuple[int, dict[str, Any]]:
    """The manifest length and the decoded manifest of a zTensor file."""
    raw = path.read_bytes()
    assert raw[:8] == b"ZTEN1000"
    (n,) = struct.unpack("<Q", raw[-8:])
    return n, cbor2.loads(raw[len(raw) - 8 - n : -8])


# numpy dtypes of the safetensors dtypes :func:`read_shard` decodes
NUMPY = {
    "F16": np.float16,
    "F32": np.float32,
    "F64": np.float64,
    "BF16": np.uint16,  # raw bits
    "U8": np.uint8,
    "I8": np.int8,
    "U16": np.uint16,
    "I16": np.int16,
    "U32": np.uint32,
    "I32": np.int32,
    "U64": np.uint64,
    "I64": np.int64,
}


@dataclass(frozen=True)
class RawTensor:
    """One tensor of a shard as its header says, with its raw little-endian bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    def array(self) -> NDArray:
        """The values (BF16 as uint16 bit patterns)."""
        return np.frombuffer(self.data, NUMPY[self.dtype]).reshape(self.shape)


def read_shard(path: PathLike) -> dict[str, RawTensor]:
    """Parse a safetensors file per §1.1 of the spec (no library involved)."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    buf = raw[8 + n :]
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out[name] = RawTensor(info["dtype"], tuple(info["shape"]), buf[begin:end])
    return out


def reference_load(folder: PathLike, shard: str) -> dict[str, NDArray]:
    """One shard, loaded by the reference ``safetensors.numpy``."""
    return load_file(os.path.join(folder, shard))


# -- folders ---------------------------------------------------------------------------------


def shard_files(folder: PathLike) -> list[str]:
    """The ``*.safetensors`` files directly in ``folder``, sorted."""
    return sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))


def snapshot(folder: PathLike, *, dirs: bool = True) -> dict[str, str]:
    """Every file under ``folder`` (relative path) and the SHA-256 of its bytes; with
    ``dirs``, every folder too (as ``"<dir>"``), so an empty folder left behind shows."""
    out = {}
    root = Path(folder)
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif dirs:
            out[rel] = "<dir>"
    return out
