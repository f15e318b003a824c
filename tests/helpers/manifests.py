"""A dataset folder's ``dataset_manifest.json``, checked against the spec.

The manifest is read as plain JSON and validated with ``jsonschema`` against
``manifest-jsonschema.json`` next to this module, a verbatim copy of the spec's schema (the
only copy under tests/); the folder is checked against what the manifest lists. Used by both
tests/dataset (the Python writer) and tests/spark (the Spark data source): one layout.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema

from .checkpoints import PathLike, RawTensor, read_shard, shard_files

SCHEMA_FILE = Path(__file__).with_name("manifest-jsonschema.json")
MANIFEST = "dataset_manifest.json"
INDEX = "_tensor_index.parquet"
STAGING = "_staging"
SHARD_RE = re.compile(
    r"^part-(\d{5})-(\d{4})-"
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.safetensors$"
)


def manifest_schema() -> dict[str, Any]:
    """The manifest JSON schema of the spec."""
    doc: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return doc


def load_manifest(folder: PathLike) -> dict[str, Any]:
    """``dataset_manifest.json`` as plain JSON."""
    doc: dict[str, Any] = json.loads((Path(folder) / MANIFEST).read_text())
    return doc


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Messages of every JSON-schema violation of a manifest document, sorted."""
    validator = jsonschema.Draft202012Validator(manifest_schema())
    return sorted(
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    )


def real_dtype(doc: dict[str, Any], key: str, column: str | None = None) -> str:
    """The dtype tensorfile's readers see for schema entry ``key`` (of ``column``, in KV
    mode): the real one of ``tensorfile.dtypes`` when the schema's field holds a stand-in
    (a dtype the JSON schema's pattern lacks, such as BOOL), else the schema's."""
    real: dict[str, str] = (doc.get("tensorfile") or {}).get("dtypes") or {}
    return real.get(column or key, doc["schema"][key]["dtype"])


def listed(doc: dict[str, Any]) -> list[str]:
    """Shard paths listed by a manifest document, in manifest order."""
    return [s["shard_path"] for s in doc["shards"]]


def listed_shards(folder: PathLike) -> list[str]:
    """The shard paths the manifest of ``folder`` lists, sorted."""
    return sorted(listed(load_manifest(folder)))


def assert_valid_manifest(folder: PathLike) -> dict[str, Any]:
    """The manifest of ``folder``, after checking it against the schema and the folder: its
    totals add up, each shard is named per §3.2 and has its listed size."""
    doc = load_manifest(folder)
    assert schema_errors(doc) == []
    assert doc["total_samples"] == sum(s["samples_count"] for s in doc["shards"])
    assert doc["total_bytes"] == sum(s["bytes"] for s in doc["shards"])
    for s in doc["shards"]:
        assert SHARD_RE.match(s["shard_path"]), s["shard_path"]
        assert os.path.getsize(Path(folder) / s["shard_path"]) == s["bytes"]
    return doc


def assert_consistent(folder: PathLike) -> dict[str, Any]:
    """The dataset in ``folder`` is complete and self-consistent; returns its manifest.

    :func:`assert_valid_manifest`, and besides: the manifest lists exactly the shard files
    present, each once, and no staging folder or temporary file remains."""
    doc = assert_valid_manifest(folder)
    names = listed(doc)
    assert len(names) == len(set(names))
    assert set(names) == set(shard_files(folder))
    assert not os.path.exists(os.path.join(folder, STAGING))
    leftovers = [f for f in os.listdir(folder) if f.endswith((".tmp", ".partial"))]
    assert leftovers == []
    return doc


def shards_by_name(folder: PathLike) -> dict[str, dict[str, RawTensor]]:
    """Every listed shard of the dataset, parsed by hand, keyed by file name (sorted)."""
    return {p: read_shard(os.path.join(folder, p)) for p in listed_shards(folder)}


# the bytes per element of each dtype the spec knows (§1.3), nothing else
SPEC_BYTES = {"F16": 2, "F32": 4, "F64": 8, "BF16": 2, "U8": 1, "I8": 1}
SPEC_BYTES |= {f"{s}{b}": b // 8 for s in "UI" for b in (16, 32, 64)}


def reference_style_read(folder: PathLike) -> int:
    """Read a dataset as a reader of the spec alone would: the manifest validated against the
    JSON schema, its ``tensorfile`` field ignored, every schema dtype one of §1.3, and every
    shard tensor the schema names as many bytes as its shape and the schema's dtype say.
    Returns the number of tensors checked."""
    doc = load_manifest(folder)
    assert schema_errors(doc) == []
    checked = 0
    for s in doc["shards"]:
        for name, tensor in read_shard(Path(folder) / s["shard_path"]).items():
            info = doc["schema"].get(name)
            if info is None:
                continue
            size = SPEC_BYTES[info["dtype"]]
            for d in tensor.shape:
                size *= d
            assert len(tensor.data) == size, (name, info, tensor.dtype, tensor.shape)
            checked += 1
    return checked
