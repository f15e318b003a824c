"""Reads prune and push down: partitions group whole shards; key filters on a KV dataset
open only the shards that hold the keys; a column subset reads only those tensors' bytes.

The counting is done from outside: the S3 server (moto) records every request the executors
make, so the tests sum the byte ranges each shard object was asked for.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfile.dataset.layout.manifest import ShardEntry
from tensorfile.dataset.layout.storage import SHARD_FIRST_READ
from tensorfile.spark._read import group_shards
from tests.helpers.spark import df_of, load, save


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), min_size=0, max_size=40),
    st.integers(1, 16),
    st.integers(1, 50_000),
)
def test_group_shards_keeps_order_and_fills_every_group(
    sizes: list[int], least: int, size: int
) -> None:
    entries = [ShardEntry(f"s{i}.safetensors", 1, b) for i, b in enumerate(sizes)]
    groups = group_shards(entries, least, size)
    assert [e for g in groups for e in g] == entries
    assert all(groups)
    if entries:
        total = sum(max(b, 1) for b in sizes)
        assert len(groups) == min(len(entries), max(least, -(-total // size)))


def _kv(spark: Any, url: str, n: int, index: bool, **options: Any) -> list[tuple[str, list[float]]]:
    rows = [(f"k{i:03d}", [float(i), float(-i)]) for i in range(n)]
    df = df_of(spark, rows, "name string, v array<float>", parts=4)
    save(
        df,
        url,
        name_col="name",
        generate_index="true" if index else "false",
        target_shard_size_mb=0.0004,  # a few keys a shard: many shards
        **options,
    )
    return rows


def _got(df: Any) -> list[tuple[str, list[float]]]:
    return sorted((r.name, list(r.v)) for r in df.collect())


def test_key_filters_open_only_the_shards_holding_the_keys(spark: Any, tmp_path: Any) -> None:
    from pyspark.sql import functions as F

    for index in (True, False):
        out = str(tmp_path / f"kv-{index}")
        rows = _kv(spark, out, 60, index)
        shards = json.loads(open(f"{out}/dataset_manifest.json").read())["shards"]
        assert len(shards) >= 8
        df = load(spark, out, partition_size_mb=0.00001)  # a task per shard
        assert df.rdd.getNumPartitions() == len(shards)
        one = df.filter(F.col("name") == "k017")
        assert _got(one) == [rows[17]]
        assert one.rdd.getNumPartitions() == 1  # the one shard that holds k017
        some = df.filter(F.col("name").isin("k001", "k059", "nope"))
        assert _got(some) == [rows[1], rows[59]]
        assert some.rdd.getNumPartitions() <= 2
        prefix = df.filter(F.col("name").startswith("k00"))
        assert _got(prefix) == rows[:10]
        assert prefix.rdd.getNumPartitions() < len(shards)
        # a filter on another column is Spark's to apply; combined with a key filter
        both = df.filter((F.col("name") >= "k050") & (F.col("v")[0] > 55.0))
        assert _got(both) == rows[56:]
        none = df.filter(F.col("name") == "absent")
        assert _got(none) == []


def test_key_filter_on_s3_reads_only_the_holding_shard(spark: Any, s3: Any) -> None:
    from pyspark.sql import functions as F

    bucket = s3.bucket()
    url = s3.url(bucket, "kv")
    opts = s3.options_json()
    rows = _kv(spark, url, 40, True, storage_options=opts)
    index = load(spark, url, storage_options=opts)  # warm: schema, manifest
    with s3.recording() as requests:
        got = _got(index.filter(F.col("name") == "k023"))
    assert got == [rows[23]]
    read = s3.bytes_read(requests, ".safetensors")
    assert len(read) == 1, read  # one shard object touched, no other


def test_a_column_subset_reads_only_its_bytes(spark: Any, s3: Any) -> None:
    bucket = s3.bucket()
    url = s3.url(bucket, "cols")
    opts = s3.options_json()
    n = 64
    rows = [(i, [float(i)] * 1024, [i, -i]) for i in range(n)]
    df = df_of(spark, rows, "id long, big array<float>, small array<int>", parts=2)
    save(df, url, batch_size=16, storage_options=opts)
    with s3.recording() as requests:
        got = sorted(
            tuple(r.small)
            for r in load(spark, url, storage_options=opts, columns="small").collect()
        )
    assert got == sorted((i, -i) for i in range(n))
    per_shard = s3.bytes_read(requests, ".safetensors")
    assert len(per_shard) == n // 16
    # `small` is 512 bytes in all and `big` 256 KiB (4 KiB a row): each shard's first
    # request (its header and a little more) and the `small` bytes; not the other 48 KiB
    first = SHARD_FIRST_READ
    assert all(b <= first + 1024 for b in per_shard.values()), per_shard
    with s3.recording() as requests:
        load(spark, url, storage_options=opts).select("id").collect()
    everything = sum(s3.bytes_read(requests, ".safetensors").values())
    assert everything > 256 * 1024  # (a select is not passed to Python data sources)
