"""Columns of a dtype the manifest JSON schema's ``dtype`` pattern lacks (BOOL, the F8, F6
and F4 types, C64): the manifest still validates (a stand-in of the pattern in the schema
field, the real dtype in ``tensorfile.dtypes``), tensorfile's readers see the real dtype, a
reader of the spec alone sees a valid manifest, and a lying ``tensorfile.dtypes`` is a
FormatError naming the manifest or the shard."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tensorfile import dataset
from tensorfile.core import dtypes
from tensorfile.dataset.layout.spec_dtypes import SPEC_DTYPES, stand_in
from tensorfile.errors import FormatError, InvalidArgumentError
from tests.helpers.checkpoints import read_shard
from tests.helpers.lying_datasets import MANIFEST, edit_manifest
from tests.helpers.manifests import (
    assert_valid_manifest,
    listed_shards,
    manifest_schema,
    real_dtype,
    reference_style_read,
    schema_errors,
)
from tests.helpers.samples import assert_same

NDArray = np.ndarray[Any, Any]

# dtype -> (a sample array of 6 rows of 2 values, the stand-in expected in the schema field)
OUTSIDE: dict[str, tuple[NDArray, str]] = {
    "BOOL": (np.arange(12).reshape(6, 2) % 3 == 0, "U8"),
    "F8_E4M3": (np.linspace(-2, 2, 12).reshape(6, 2).astype(ml_dtypes.float8_e4m3fn), "U8"),
    "F8_E5M2": (np.linspace(-2, 2, 12).reshape(6, 2).astype(ml_dtypes.float8_e5m2), "U8"),
    "F8_E4M3FNUZ": (np.linspace(-2, 2, 12).reshape(6, 2).astype(ml_dtypes.float8_e4m3fnuz), "U8"),
    "F8_E5M2FNUZ": (np.linspace(-2, 2, 12).reshape(6, 2).astype(ml_dtypes.float8_e5m2fnuz), "U8"),
    "F8_E8M0": (np.full((6, 2), 4.0).astype(ml_dtypes.float8_e8m0fnu), "U8"),
    "F6_E2M3": (np.full((6, 2), 1.5).astype(ml_dtypes.float6_e2m3fn), "U8"),
    "F6_E3M2": (np.full((6, 2), 1.5).astype(ml_dtypes.float6_e3m2fn), "U8"),
    "F4": (np.full((6, 2), 1.5).astype(ml_dtypes.float4_e2m1fn), "U8"),
    "C64": ((np.arange(12) + 1j).reshape(6, 2).astype(np.complex64), "U64"),
}
BYTE_SIZED = [d for d in OUTSIDE if not dtypes.from_safetensors(d).is_subbyte]


def _pattern_dtypes() -> set[str]:
    """The dtypes the spec schema's ``dtype`` pattern matches, among every safetensors dtype."""
    pattern = manifest_schema()["$defs"]["tensor_schema_info"]["properties"]["dtype"]["pattern"]
    return {d for d in dtypes.SAFETENSORS_NAMES if re.search(pattern, d)}


def test_the_stand_in_table_follows_the_spec_schema() -> None:
    assert _pattern_dtypes() == set(SPEC_DTYPES)
    outside = dtypes.SAFETENSORS_NAMES - SPEC_DTYPES
    assert outside == set(OUTSIDE)  # every dtype tensorfile writes that the pattern lacks
    for name in dtypes.SAFETENSORS_NAMES:
        assert stand_in(name) in SPEC_DTYPES
        if name in SPEC_DTYPES:
            assert stand_in(name) == name
        elif not dtypes.from_safetensors(name).is_subbyte:  # the same element size
            bits = dtypes.from_safetensors(name).bits
            assert dtypes.from_safetensors(stand_in(name)).bits == bits


def _write_batch(folder: Path, name: str) -> NDArray:
    values = OUTSIDE[name][0]
    dataset.write({"v": values, "i": np.arange(6, dtype=np.int32)}, folder, batch_size=4)
    return values


@pytest.mark.parametrize("name", list(OUTSIDE))
def test_batch_manifest_validates_and_round_trips(tmp_path: Path, name: str) -> None:
    values = _write_batch(tmp_path, name)
    doc = assert_valid_manifest(tmp_path)
    assert doc["schema"]["v"] == {"dtype": OUTSIDE[name][1], "shape": [4, 2]}
    assert doc["schema"]["i"] == {"dtype": "I32", "shape": [4]}
    assert doc["tensorfile"]["dtypes"] == {"v": name}  # only the column that needs it
    for shard in listed_shards(tmp_path):  # the shard headers carry the real dtype
        assert read_shard(tmp_path / shard)["v"].dtype == name
    ds = dataset.open(tmp_path)
    assert ds.schema["v"] == {"dtype": name, "shape": [2]}
    assert ds.manifest.schema["v"]["dtype"] == name
    got = np.stack([s["v"] for s in ds])
    assert got.dtype == values.dtype
    assert_same(got, values)
    assert_same(ds[5]["v"], values[5])


@pytest.mark.parametrize("name", ["BOOL", "F8_E4M3", "C64"])
def test_kv_manifest_validates_and_round_trips(tmp_path: Path, name: str) -> None:
    values = OUTSIDE[name][0]
    keys = [f"doc{i}" for i in range(6)]
    dataset.write({"id": keys, "v": values}, tmp_path, name_col="id", generate_index=True)
    doc = assert_valid_manifest(tmp_path)
    assert {e["dtype"] for e in doc["schema"].values()} == {OUTSIDE[name][1]}
    assert doc["tensorfile"]["dtypes"] == {"v": name}
    assert real_dtype(doc, "doc3__v", "v") == name
    ds = dataset.open(tmp_path)
    assert ds.schema == {"v": {"dtype": name, "shape": [2]}}
    assert_same(ds["doc3"]["v"], values[3])


def test_append_keeps_the_real_dtype(tmp_path: Path) -> None:
    values = _write_batch(tmp_path, "BOOL")
    more = {"v": ~values, "i": np.arange(6, dtype=np.int32)}
    dataset.write(more, tmp_path, batch_size=4, mode="append")
    assert_valid_manifest(tmp_path)
    ds = dataset.open(tmp_path)
    assert len(ds) == 12
    assert ds.schema["v"]["dtype"] == "BOOL"
    # a column whose dtype differs from the dataset's is refused, stand-in or not
    other = {"v": values.astype(np.uint8), "i": np.arange(6, dtype=np.int32)}
    with pytest.raises(InvalidArgumentError, match="U8"):
        dataset.write(other, tmp_path, batch_size=4, mode="append")


@pytest.mark.parametrize("name", BYTE_SIZED)
def test_a_reader_of_the_spec_alone_sees_a_valid_consistent_manifest(
    tmp_path: Path, name: str
) -> None:
    _write_batch(tmp_path / "b", name)
    assert reference_style_read(tmp_path / "b") == 2 * 2  # two shards, two columns
    keys = [f"k{i}" for i in range(6)]
    dataset.write({"id": keys, "v": OUTSIDE[name][0]}, tmp_path / "kv", name_col="id")
    assert reference_style_read(tmp_path / "kv") == 6


def test_old_manifests_with_the_real_dtype_in_the_schema_still_read(tmp_path: Path) -> None:
    values = _write_batch(tmp_path, "BOOL")

    def old_style(doc: dict[str, Any]) -> None:
        doc["schema"]["v"]["dtype"] = "BOOL"
        del doc["tensorfile"]["dtypes"]

    edit_manifest(tmp_path, old_style)
    assert schema_errors(json.loads((tmp_path / MANIFEST).read_text())) != []
    assert_same(np.stack([s["v"] for s in dataset.open(tmp_path)]), values)


LIES = [
    pytest.param(lambda t: t.__setitem__("dtypes", {"v": "F32"}), "should then say F32", id="f32"),
    pytest.param(lambda t: t.__setitem__("dtypes", {"v": "C64"}), "should then say U64", id="c64"),
    pytest.param(lambda t: t.__setitem__("dtypes", {"i": "BOOL"}), "'i' says I32", id="int"),
    pytest.param(lambda t: t.__setitem__("dtypes", {"v": "B00L"}), "'B00L', which", id="unknown"),
    pytest.param(lambda t: t.__setitem__("dtypes", {"v": 1}), "dtype 1, which", id="number"),
    pytest.param(lambda t: t.__setitem__("dtypes", {"zz": "BOOL"}), "names 'zz'", id="no-column"),
    pytest.param(lambda t: t.__setitem__("dtypes", ["BOOL"]), "is an array", id="array"),
    pytest.param(lambda t: t.__setitem__("dtypes", "BOOL"), "is a string", id="string"),
]


@pytest.mark.parametrize(("lie", "words"), LIES)
def test_a_lying_dtypes_field_names_the_manifest(tmp_path: Path, lie: Any, words: str) -> None:
    _write_batch(tmp_path, "BOOL")
    edit_manifest(tmp_path, lambda doc: lie(doc["tensorfile"]))
    with pytest.raises(FormatError, match=r"tensorfile\.dtypes") as caught:
        dataset.open(tmp_path)
    assert str(tmp_path / MANIFEST) in str(caught.value)
    assert words in str(caught.value)


@pytest.mark.parametrize(
    "lie",
    [
        pytest.param({"v": "F8_E4M3"}, id="another-8-bit-dtype"),  # a consistent manifest...
        pytest.param(None, id="no-extension"),  # ...or the reference's: U8, but the shard is BOOL
    ],
)
def test_a_dtype_the_shard_header_contradicts_names_the_shard(tmp_path: Path, lie: Any) -> None:
    _write_batch(tmp_path, "BOOL")
    edit_manifest(tmp_path, lambda doc: doc["tensorfile"].__setitem__("dtypes", lie))
    ds = dataset.open(tmp_path)  # the manifest checks out on its own
    shard = listed_shards(tmp_path)[0]
    want = "F8_E4M3" if lie else "U8"
    with pytest.raises(FormatError, match=rf"shard {shard}.*has BOOL samples.*says {want}"):
        ds[0]
