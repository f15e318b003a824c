"""The reference connector's layout through Spark: its datasets (the committed fixtures, its
bytes) read with ``spark.read.format("safetensors")``; a dataset written by tensorfile's Spark
writer with ``layout=reference`` checked field by field against the reference's format and
read back; and the printing of the reference's manifest checked against the JVM libraries
the reference runs on (Jackson with the Scala module, Scala 2.13's ``immutable.HashMap``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from tensorfile import dataset
from tensorfile.dataset.layout.reference import manifest_bytes, scala_order
from tests.helpers.manifests import INDEX, MANIFEST, SHARD_RE, schema_errors
from tests.helpers.spark import df_of, load, save

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "refconn"
FIELDS = ["format_version", "safetensors_version", "total_samples", "total_bytes", "shards"]


def test_spark_reads_a_reference_batch_dataset(spark: Any) -> None:
    rows = load(spark, FIXTURES / "batch").collect()
    assert sorted(rows[0].asDict()) == ["x", "y"]
    got = sorted((list(r["x"]), list(r["y"])) for r in rows)
    want = sorted(([r + 0.5, 2.0 * r, -float(r)], [r, 100 + r]) for r in range(8))
    assert got == want


def test_spark_reads_a_reference_kv_dataset(spark: Any) -> None:
    rows = {r["key"]: r for r in load(spark, FIXTURES / "kv").collect()}
    assert sorted(rows) == [f"s{k}" for k in range(5)]
    for k in range(5):
        assert list(rows[f"s{k}"]["a"]) == [float(k), k / 4]
        assert list(rows[f"s{k}"]["b"]) == [k, k + 1, 255 - k]


def test_spark_writes_the_reference_layout(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    rows = [(f"s{k}", [float(k), k / 4], [k, k + 1, 255 - k]) for k in range(5)]
    df = df_of(spark, rows, "name string, a array<float>, b array<int>", parts=2)
    save(df, out, name_col="name", generate_index="true", layout="reference", dtype="F32")
    raw = (out / MANIFEST).read_bytes()
    doc = json.loads(raw)
    # the reference's fields, in its order, printed as it prints them; nothing of tensorfile's
    assert list(doc) == [*FIELDS, "schema"]
    assert schema_errors(doc) == []
    assert raw == manifest_bytes(doc)
    assert [list(s) for s in doc["shards"]] == [["shard_path", "samples_count", "bytes"]] * 2
    assert all(SHARD_RE.match(s["shard_path"]) for s in doc["shards"])
    assert [s["shard_path"] for s in doc["shards"]] == sorted(
        s["shard_path"] for s in doc["shards"]
    )
    assert doc["total_samples"] == 5 and sorted(s["samples_count"] for s in doc["shards"]) == [2, 3]
    assert doc["total_bytes"] == sum((out / s["shard_path"]).stat().st_size for s in doc["shards"])
    assert doc["schema"] == {
        f"s{k}__{c}": {"dtype": "F32", "shape": [n]}
        for k in range(5)
        for c, n in (("a", 2), ("b", 3))
    }
    fixture = json.loads((FIXTURES / "kv" / MANIFEST).read_bytes())
    assert sorted(doc["schema"]) == sorted(fixture["schema"])
    assert list(doc["schema"]) == list(fixture["schema"])  # the same keys: the same order
    # the index in the reference's schema
    part = next(p for p in sorted((FIXTURES / "kv" / INDEX).iterdir()) if p.name.startswith("part"))
    assert pq.read_schema(out / INDEX) == pq.read_schema(part).remove_metadata()
    index = pq.read_table(out / INDEX).to_pylist()
    assert sorted(r["tensor_key"] for r in index) == sorted(doc["schema"])
    # read back: by tensorfile and by the Spark reader
    ds = dataset.open(out)
    assert (ds.mode, ds.manifest.layout, len(ds)) == ("kv", "reference", 5)
    np.testing.assert_array_equal(ds.get("s3")["b"], np.array([3, 4, 252], np.float32))
    back = {r["key"]: list(r["a"]) for r in load(spark, out).collect()}
    assert back == {f"s{k}": [float(k), k / 4] for k in range(5)}


def _jvm_manifest(spark: Any, doc: dict[str, Any]) -> bytes:
    """``doc`` printed by the reference's own printer: Jackson's ``ObjectMapper`` with the
    Scala module, ``writerWithDefaultPrettyPrinter``, the schema a Scala ``HashMap``."""
    jvm = spark._jvm
    module = getattr(
        getattr(jvm.com.fasterxml.jackson.module.scala, "DefaultScalaModule$"), "MODULE$"
    )
    mapper = jvm.com.fasterxml.jackson.databind.ObjectMapper().registerModule(module)

    def java(value: Any) -> Any:
        if isinstance(value, dict):
            out = jvm.java.util.LinkedHashMap()
            for k, v in value.items():
                out.put(k, java(v))
            return out
        if isinstance(value, list):
            items = jvm.java.util.ArrayList()
            for v in value:
                items.add(java(v))
            return items
        if isinstance(value, int) and not isinstance(value, bool):
            return jvm.java.lang.Long(value)
        return value

    top = java({k: v for k, v in doc.items() if k != "schema"})
    hm = getattr(getattr(jvm.scala.collection.immutable, "HashMap$"), "MODULE$").empty()
    for key, info in doc["schema"].items():
        hm = hm.updated(key, java(info))
    top.put("schema", hm)
    return str(mapper.writerWithDefaultPrettyPrinter().writeValueAsString(top)).encode()


def test_the_reference_printing_matches_the_jvm(spark: Any) -> None:
    """Random keys (ASCII, non-ASCII, astral, control characters, quotes) and counts of them
    that make the Scala map's trie deep: tensorfile's printing is the JVM's, byte for byte."""
    rng = random.Random(26)
    alphabet = 'ab_019XYZ"\\/\u00e9\u4e2d\U0001f600\x01\x1f\t\n'
    for size in (0, 1, 3, 4, 5, 17, 40, 300):
        keys = {
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(size)
        }
        schema = {k: {"dtype": "F32", "shape": [rng.randint(0, 9)]} for k in sorted(keys)}
        doc = {
            "format_version": "1.0",
            "safetensors_version": "1.0",
            "total_samples": size,
            "total_bytes": 2**40 + size,
            "shards": [
                {"shard_path": f"part-{i:05d}-0000-x.safetensors", "samples_count": i, "bytes": 9}
                for i in range(size % 4)
            ],
            "schema": schema,
        }
        want = _jvm_manifest(spark, doc)
        assert manifest_bytes(doc) == want, size
        assert list(json.loads(want)["schema"]) == scala_order(sorted(keys))
