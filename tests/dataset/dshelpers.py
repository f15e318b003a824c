"""Helpers for tests/dataset: the manifest JSON schema, folder snapshots, reference loads.

Everything here is written from the spec (the Spark connector's layout), not from
``tensorfile.dataset``'s code: shards are read back with the reference ``safetensors``
library, the manifest is parsed as plain JSON and validated with ``jsonschema``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
from safetensors.numpy import load_file

# a verbatim copy of the spec's manifest-jsonschema.json
SCHEMA_FILE = Path(__file__).with_name("manifest-jsonschema.json")
MANIFEST = "dataset_manifest.json"
INDEX = "_tensor_index.parquet"
STAGING = "_staging"
SHARD_RE = re.compile(
    r"^part-(\d{5})-(\d{4})-"
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.safetensors$"
)

NDArray = np.ndarray[Any, Any]


def manifest_schema() -> dict[str, Any]:
    """The manifest JSON schema of the spec."""
    doc: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return doc


def load_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """``dataset_manifest.json`` as plain JSON."""
    doc: dict[str, Any] = json.loads((Path(folder) / MANIFEST).read_text())
    return doc


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Messages of every JSON-schema violation of a manifest document."""
    validator = jsonschema.Draft202012Validator(manifest_schema())
    return sorted(
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    )


def assert_valid_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of ``folder``, after checking it against the schema and the folder."""
    doc = load_manifest(folder)
    assert schema_errors(doc) == []
    assert doc["total_samples"] == sum(s["samples_count"] for s in doc["shards"])
    assert doc["total_bytes"] == sum(s["bytes"] for s in doc["shards"])
    for s in doc["shards"]:
        assert SHARD_RE.match(s["shard_path"]), s["shard_path"]
        assert os.path.getsize(Path(folder) / s["shard_path"]) == s["bytes"]
    return doc


def shard_files(folder: str | os.PathLike[str]) -> list[str]:
    """The ``*.safetensors`` files directly in ``folder``, sorted."""
    return sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))


def listed_shards(folder: str | os.PathLike[str]) -> list[str]:
    """The shard paths the manifest lists, sorted."""
    return sorted(s["shard_path"] for s in load_manifest(folder)["shards"])


def snapshot(folder: str | os.PathLike[str]) -> dict[str, str]:
    """Every file under ``folder`` (relative path) and the SHA-256 of its bytes."""
    out = {}
    root = Path(folder)
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "<dir>"
    return out


def reference_load(folder: str | os.PathLike[str], shard: str) -> dict[str, NDArray]:
    """One shard, loaded by the reference ``safetensors.numpy``."""
    return load_file(os.path.join(folder, shard))


def assert_same(a: Any, b: Any) -> None:
    """Same dtype, shape and bytes (numpy scalars count as 0-d arrays)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), (a, b)


def expected_rows(columns: dict[str, NDArray], n: int) -> list[dict[str, NDArray]]:
    """The first ``n`` samples of a dict of column arrays."""
    return [{c: v[i] for c, v in columns.items()} for i in range(n)]


def assert_samples(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Two lists of samples are equal, column by column, dtype and bytes included."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert set(g) == set(w), (i, set(g), set(w))
        for c in w:
            if c == "key":
                assert g[c] == w[c], (i, g[c], w[c])
            else:
                assert_same(g[c], w[c])
