"""Helpers for tests/spark, written from the spec rather than from tensorfile's code.

Shards are parsed byte by byte (8-byte little-endian header length, JSON header, data
buffer) or loaded with the reference ``safetensors`` library; the manifest is plain JSON,
validated with ``jsonschema`` against a verbatim copy of the spec's schema.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

NDArray = np.ndarray[Any, Any]

SCHEMA_FILE = Path(__file__).with_name("manifest-jsonschema.json")
MANIFEST = "dataset_manifest.json"
INDEX = "_tensor_index.parquet"
STAGING = "_staging"
SHARD_RE = re.compile(
    r"^part-(\d{5})-(\d{4})-"
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.safetensors$"
)
SPARK_ERRORS = (PySparkException, Py4JJavaError)
FMT = "safetensors"
TENSOR_STRUCT = "struct<data:binary,shape:array<int>,dtype:string>"

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


def read_shard(path: str | os.PathLike[str]) -> dict[str, RawTensor]:
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


def load_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """``dataset_manifest.json`` as plain JSON."""
    doc: dict[str, Any] = json.loads((Path(folder) / MANIFEST).read_text())
    return doc


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Every JSON-schema violation of a manifest document."""
    schema = json.loads(SCHEMA_FILE.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return sorted(
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    )


def shard_files(folder: str | os.PathLike[str]) -> set[str]:
    """The ``*.safetensors`` files directly in ``folder``."""
    return {f for f in os.listdir(folder) if f.endswith(".safetensors")}


def listed(doc: dict[str, Any]) -> list[str]:
    """Shard paths listed by a manifest document, in manifest order."""
    return [s["shard_path"] for s in doc["shards"]]


def assert_consistent(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The dataset in ``folder`` is complete and self-consistent; returns its manifest.

    The manifest validates against the spec's schema, lists exactly the shard files present
    (each named per §3.2, with its true size), its totals add up, and no staging remains."""
    doc = load_manifest(folder)
    assert schema_errors(doc) == []
    names = listed(doc)
    assert len(names) == len(set(names))
    assert set(names) == shard_files(folder)
    for s in doc["shards"]:
        assert SHARD_RE.match(s["shard_path"]), s["shard_path"]
        assert s["bytes"] == os.path.getsize(os.path.join(folder, s["shard_path"]))
    assert doc["total_samples"] == sum(s["samples_count"] for s in doc["shards"])
    assert doc["total_bytes"] == sum(s["bytes"] for s in doc["shards"])
    assert not os.path.exists(os.path.join(folder, STAGING))
    leftovers = [f for f in os.listdir(folder) if f.endswith((".tmp", ".partial"))]
    assert leftovers == []
    return doc


def shards_by_name(folder: str | os.PathLike[str]) -> dict[str, dict[str, RawTensor]]:
    """Every listed shard of the dataset, parsed, keyed by file name (sorted)."""
    doc = load_manifest(folder)
    return {p: read_shard(os.path.join(folder, p)) for p in sorted(listed(doc))}


def snapshot(folder: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> content)."""
    out = {}
    for root, _dirs, files in os.walk(folder):
        for f in files:
            full = os.path.join(root, f)
            out[os.path.relpath(full, folder)] = Path(full).read_bytes()
    return out


def df_of(spark: Any, rows: list[Any], schema: str, parts: int = 2) -> Any:
    """A DataFrame whose partitions are the consecutive slices of ``rows`` (``parallelize``
    slices deterministically: with n rows, partition i holds rows [i*n/p, (i+1)*n/p))."""
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, parts), schema)


def save(df: Any, path: str | os.PathLike[str], mode: str = "overwrite", **options: Any) -> None:
    """``df.write.format("safetensors")`` with ``options``."""
    w = df.write.format(FMT).mode(mode)
    for k, v in options.items():
        w = w.option(k, v)
    w.save(str(path))


def load(spark: Any, path: str | os.PathLike[str], **options: Any) -> Any:
    """``spark.read.format("safetensors")`` with ``options``."""
    r = spark.read.format(FMT)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load(str(path))


def f32_bits(values: Any) -> NDArray:
    """float32 bit patterns."""
    return np.asarray(values, np.float32).view(np.uint32)


def bf16_nearest_even(values: Any) -> NDArray:
    """float32 -> BF16 bits, round to nearest, ties to even (finite inputs)."""
    bits = f32_bits(values).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_to_f32(bits: Any) -> NDArray:
    """BF16 bit patterns -> float32 values."""
    return (np.asarray(bits, np.uint32) << 16).view(np.float32)
