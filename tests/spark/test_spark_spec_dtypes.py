"""BOOL and F8 columns through Spark: the manifest validates against the spec's schema (a U8
stand-in, the real dtype in ``tensorfile.dtypes``), the Spark reader types the columns by the
real dtype, and a lying ``tensorfile.dtypes`` fails the query with a FormatError naming the
manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import dataset
from tests.helpers.lying_datasets import MANIFEST, edit_manifest
from tests.helpers.manifests import assert_valid_manifest, reference_style_read
from tests.helpers.spark import SPARK_ERRORS, df_of, load, save

ROWS = [([True, False], True, 0), ([False, False], False, 1), ([True, True], True, 2)]


def test_bool_columns(spark: Any, tmp_path: Path) -> None:
    df = df_of(spark, ROWS, "m array<boolean>, b boolean, i int", parts=1)
    save(df, tmp_path, batch_size=2)
    doc = assert_valid_manifest(tmp_path)
    assert doc["schema"]["m"] == {"dtype": "U8", "shape": [2, 2]}
    assert doc["schema"]["b"] == {"dtype": "U8", "shape": [2]}
    assert doc["tensorfile"]["dtypes"] == {"b": "BOOL", "m": "BOOL"}
    assert reference_style_read(tmp_path) == 3 * 2
    back = load(spark, tmp_path)
    assert back.schema.simpleString() == "struct<m:array<boolean>,b:boolean,i:int>"
    assert sorted((r.i, r.m, r.b) for r in back.collect()) == [(i, m, b) for m, b, i in ROWS]
    ds = dataset.open(tmp_path)
    assert ds.schema["m"]["dtype"] == "BOOL"
    assert ds[0]["m"].tolist() == [True, False]


def test_bool_kv_columns(spark: Any, tmp_path: Path) -> None:
    rows = [(f"k{i}", m) for i, (m, _, _) in enumerate(ROWS)]
    df = df_of(spark, rows, "id string, m array<boolean>")
    save(df, tmp_path, name_col="id")
    doc = assert_valid_manifest(tmp_path)
    assert {v["dtype"] for v in doc["schema"].values()} == {"U8"}
    rows = {r.id: r.m for r in load(spark, tmp_path).collect()}
    assert rows == {f"k{i}": m for i, (m, _, _) in enumerate(ROWS)}


def test_f8_dtype_option(spark: Any, tmp_path: Path) -> None:
    df = df_of(spark, [([0.5, -1.0],), ([2.0, 0.25],)], "x array<float>", parts=1)
    save(df, tmp_path, batch_size=2, dtype="F8_E4M3")
    doc = assert_valid_manifest(tmp_path)
    assert doc["schema"]["x"]["dtype"] == "U8"
    assert doc["tensorfile"]["dtypes"] == {"x": "F8_E4M3"}
    back = load(spark, tmp_path)
    assert back.schema.simpleString() == "struct<x:array<float>>"
    assert sorted(r.x for r in back.collect()) == [[0.5, -1.0], [2.0, 0.25]]


@pytest.mark.parametrize("lie", [{"m": "F32"}, {"m": "NOPE"}, {"zz": "BOOL"}])
def test_a_lying_dtypes_field_fails_the_query(
    spark: Any, tmp_path: Path, lie: dict[str, str]
) -> None:
    dataset.write({"m": np.array([[True, False]] * 3)}, tmp_path, batch_size=2)
    edit_manifest(tmp_path, lambda doc: doc["tensorfile"].__setitem__("dtypes", lie))
    with pytest.raises(SPARK_ERRORS) as err:
        load(spark, tmp_path).collect()
    text = str(err.value)
    assert "FormatError" in text and "tensorfile.dtypes" in text, text[-3000:]
    assert str(tmp_path / MANIFEST) in text
