"""Write errors of the Spark data source: bad options fail before anything is written, and
bad data (nulls, ragged arrays) fails with a message naming the column."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.helpers.checkpoints import shard_files
from tests.helpers.manifests import STAGING
from tests.helpers.spark import SPARK_ERRORS, df_of, save


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({}, ["batch_size", "name_col"]),
        ({"batch_size": 2, "name_col": "k"}, ["batch_size", "name_col"]),
        ({"batch_size": 2, "tail_strategy": "truncate"}, ["tail_strategy"]),
        ({"batch_size": 2, "dtype": "F99"}, ["dtype", "F99"]),
        ({"batch_size": 0}, ["batch_size"]),
        ({"batch_size": 2, "duplicatesStrategy": "firstWin"}, ["duplicatesStrategy"]),
        ({"batch_size": 2, "batch_sise": 3}, ["batch_sise"]),
    ],
)
def test_bad_options_fail_before_writing(
    spark: Any, tmp_path: Any, options: dict[str, Any], names: list[str]
) -> None:
    out = tmp_path / "never"
    df = df_of(spark, [("a", [1.0]), ("b", [2.0])], "k string, x array<float>")
    with pytest.raises(SPARK_ERRORS) as err:
        save(df, out, **options)
    for name in names:
        assert name in str(err.value)
    assert not os.path.exists(out)


def _assert_nothing_written(out: Any) -> None:
    if os.path.exists(out):
        assert not os.path.exists(out / "dataset_manifest.json")
        assert shard_files(out) == []
        assert not os.path.exists(out / STAGING)


@pytest.mark.parametrize(
    ("schema", "rows"),
    [
        ("feat float", [(1.0,), (2.0,), (None,), (4.0,)]),
        ("feat array<float>", [([1.0],), ([2.0],), (None,), ([4.0],)]),
        ("feat array<float>", [([1.0, 2.0],), ([2.0, 3.0],), ([3.0, None],), ([4.0, 5.0],)]),
    ],
    ids=["scalar", "array", "element"],
)
def test_nulls_are_refused_naming_the_column(
    spark: Any, tmp_path: Any, schema: str, rows: list[Any]
) -> None:
    out = tmp_path / "nulls"
    df = df_of(spark, [(i, *r) for i, r in enumerate(rows)], f"id long, {schema}", parts=1)
    with pytest.raises(SPARK_ERRORS) as err:
        save(df, out, batch_size=2)
    text = str(err.value)
    assert "'feat'" in text
    assert "null" in text
    _assert_nothing_written(out)


def test_ragged_arrays_are_refused(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "ragged"
    rows = [([1.0, 2.0],), ([1.0, 2.0, 3.0],), ([1.0, 2.0],)]
    with pytest.raises(SPARK_ERRORS) as err:
        save(df_of(spark, rows, "emb array<float>", parts=1), out, batch_size=2)
    assert "'emb'" in str(err.value)
    _assert_nothing_written(out)


def test_ragged_nested_arrays_are_refused(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "ragged2"
    rows = [([[1.0, 2.0], [3.0, 4.0]],), ([[1.0, 2.0], [3.0]],)]
    with pytest.raises(SPARK_ERRORS) as err:
        save(df_of(spark, rows, "img array<array<float>>", parts=1), out, batch_size=2)
    assert "'img'" in str(err.value)
    _assert_nothing_written(out)


def test_ragged_arrays_across_partitions_are_refused(spark: Any, tmp_path: Any) -> None:
    """Each partition alone is uniform, but the column is not: the dataset would have shards
    whose tensors disagree with the manifest's schema."""
    out = tmp_path / "ragged3"
    rows = [([1.0, 2.0],), ([1.0, 2.0],), ([1.0, 2.0, 3.0],), ([1.0, 2.0, 3.0],)]
    with pytest.raises(SPARK_ERRORS) as err:
        save(df_of(spark, rows, "emb array<float>", parts=2), out, batch_size=2)
    assert "emb" in str(err.value)
    _assert_nothing_written(out)


def test_null_key_is_refused(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "nullkey"
    rows = [("a", [1.0]), (None, [2.0])]
    with pytest.raises(SPARK_ERRORS) as err:
        save(df_of(spark, rows, "k string, x array<float>", parts=1), out, name_col="k")
    assert "'k'" in str(err.value)
    assert "null" in str(err.value)
    _assert_nothing_written(out)
