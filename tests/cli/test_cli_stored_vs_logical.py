"""Issue 24, item 2: ids and diffs compare logical tensors, never how they are stored.

What the user did: saved a model with the reference ``safetensors``, converted it to zTensor
v1.0 and v2, raw and zstd (``tensorfile convert --to zt2 --compression zstd``, tensorfile's
``save_file(..., version=2, compression="zstd")``, the reference writers of ztensor 1.0.1
and 2.1.2), then ran ``tensorfile id``, ``id --content`` and ``diff --data``. Every id of
the same tensors must agree (the structural one within a format version, which it names),
and ``diff --data`` must find no change, with the stored sizes in a section of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy as ref_st
import ztensor as ref_zt1

from tensorfile import ztensor
from tensorfile.ops import load
from tests.helpers.cli import run, run_json
from tests.ztensor import zt2

NDArray = np.ndarray[Any, Any]


def _model() -> dict[str, NDArray]:
    """Tensors that zstd shrinks a little (like trained weights: 1536 stored as ~1512)."""
    rng = np.random.default_rng(24)
    out: dict[str, NDArray] = {}
    for i in range(6):  # 6 layers x 4 tensors
        out[f"layers.{i}.attn.w"] = (rng.standard_normal((12, 32)) * 0.02).astype(np.float32)
        out[f"layers.{i}.attn.b"] = (rng.standard_normal(384) * 0.02).astype(np.float32)
        out[f"layers.{i}.mlp.w"] = (rng.standard_normal((8, 48)) * 0.02).astype(ml_dtypes.bfloat16)
        out[f"layers.{i}.norm"] = np.ones(64, np.float16)
    out["embed.ids"] = rng.integers(-5, 5, size=(16, 3)).astype(np.int8)
    out["zeros"] = np.zeros((4, 4), np.float32)
    return out


def _files(tmp_path: Path, capsys: Any) -> dict[str, Path]:
    """The model in every container the user tried, keyed by kind."""
    tensors = _model()
    st = tmp_path / "model.safetensors"
    ref_st.save_file(tensors, str(st), {"format": "pt"})
    files = {"safetensors": st}
    for kind, extra in (
        ("v1-raw", ["--to", "zt"]),
        ("v1-zstd", ["--to", "zt", "--compression", "zstd"]),
        ("v2-raw", ["--to", "zt2"]),
        ("v2-zstd", ["--to", "zt2", "--compression", "zstd"]),
    ):
        path = tmp_path / f"convert-{kind}.zt"
        assert run(capsys, "convert", st, path, *extra).code == 0
        files[f"convert-{kind}"] = path
    for kind, kwargs in (
        ("v1-zstd", {"compression": "zstd"}),
        ("v2-raw", {"version": 2}),
        ("v2-zstd", {"version": 2, "compression": "zstd"}),
    ):
        path = tmp_path / f"save-{kind}.zt"
        ztensor.save_file(tensors, str(path), attributes={"format": "pt"}, **kwargs)
        files[f"save-{kind}"] = path
    # the reference writers: ztensor 1.0.1 (v1.0, zstd; it writes no metadata) and 2.1.2
    # (v2, zt.zstd-seekable/1)
    for kind, compress in (("v1-raw", False), ("v1-zstd", True)):
        path = tmp_path / f"ref-{kind}.zt"
        w = ref_zt1.Writer(str(path))
        for name, value in tensors.items():
            w.add_tensor(name, value, compress=compress)
        w.finalize()
        files[f"ref-{kind}"] = path
    for kind, encoding in (("v2-raw", None), ("v2-zstd", "zt.zstd-seekable/1")):
        path = tmp_path / f"ref-{kind}.zt"
        zt2.write(path, _zt2_objects(tensors, encoding), attributes={"format": "pt"},
                  canonical=encoding is None)  # fmt: skip
        files[f"ref-{kind}"] = path
    return files


_V2_TYPES = {"float32": ("f32", None), "float16": ("f16", None), "int8": ("i8", None)}
_V2_TYPES["bfloat16"] = ("bf16", None)


def _zt2_objects(tensors: dict[str, NDArray], encoding: str | None) -> dict[str, Any]:
    objects = {}
    for name, value in tensors.items():
        dtype, logical = _V2_TYPES[value.dtype.name]
        part: dict[str, Any] = {"dtype": dtype, "bytes": value.tobytes()}
        if logical:
            part["logical"] = logical
        if encoding:
            part["encoding"] = encoding
        objects[name] = {"shape": list(value.shape), "parts": {"data": part}}
    return objects


def _id(capsys: Any, path: Path, *flags: str) -> str:
    r = run(capsys, "id", path, *flags)
    assert r.code == 0, r.err
    return r.out.strip()


def test_ids_agree_whatever_the_storage(tmp_path: Path, capsys: Any) -> None:
    files = _files(tmp_path, capsys)
    # the zstd files really store fewer bytes: an id reading stored sizes would differ
    for kind in ("convert-v1-zstd", "convert-v2-zstd", "save-v2-zstd", "ref-v1-zstd",
                 "ref-v2-zstd"):  # fmt: skip
        tensors = load(str(files[kind])).tensors.values()
        shrunk = [t.name for t in tensors if t.nbytes < t.decoded_nbytes]
        assert len(shrunk) >= 12, (kind, shrunk)
    content = {kind: _id(capsys, p, "--content") for kind, p in files.items()}
    assert len(set(content.values())) == 1, content
    structural = {kind: _id(capsys, p) for kind, p in files.items()}
    # ztensor 1.0.1 writes no metadata, so its files have an id of their own, raw or zstd
    assert structural.pop("ref-v1-raw") == structural.pop("ref-v1-zstd")
    v1 = {k: v for k, v in structural.items() if "-v1-" in k}
    v2 = {k: v for k, v in structural.items() if "-v2-" in k}
    assert len(set(v1.values())) == 1, v1
    assert len(set(v2.values())) == 1, v2
    # the structural id names the format (as weight-inspect's does): three distinct ids
    assert len({structural["safetensors"], *v1.values(), *v2.values()}) == 3
    doc = run_json(capsys, "id", files["ref-v2-zstd"], files["ref-v2-raw"])
    assert [d["structural_hash"] for d in doc] == [structural["ref-v2-raw"]] * 2


@pytest.mark.parametrize(
    "kind",
    ["convert-v1-raw", "convert-v1-zstd", "convert-v2-raw", "convert-v2-zstd", "save-v2-zstd",
     "ref-v2-zstd"],
)  # fmt: skip
def test_diff_of_a_lossless_conversion(tmp_path: Path, capsys: Any, kind: str) -> None:
    files = _files(tmp_path, capsys)
    st, other = files["safetensors"], files[kind]
    r = run(capsys, "diff", st, other, "--data", "--fail-on-diff")
    assert r.code == 0, r.out
    lines = r.out.splitlines()
    n = len(_model())
    assert lines[2] == "tensors: 0 added, 0 removed, 0 changed"
    assert f"data: 0 of {n} compared tensors differ" in lines
    assert lines[-1] == "identical"
    assert not any("byte_length" in line for line in lines)
    doc = run_json(capsys, "diff", st, other, "--data")
    assert doc["identical"] is True
    assert doc["tensors"]["changed"] == []
    assert doc["data"] == {"compared": n, "differing": []}
    stored = doc["stored"]
    assert stored["shared_tensors"] == n
    sizes = {t.name: t.nbytes for t in load(str(other)).tensors.values()}
    assert stored["b_bytes"] == sum(sizes.values())
    assert stored["a_bytes"] == sum(v.nbytes for v in _model().values())
    if kind.endswith("raw"):  # stored alike: no section at all
        assert stored["differing"] == []
        assert not any(line.startswith("stored") for line in lines)
        return
    encoding = "zstd" if "v1" in kind else "zt.zstd-seekable/1"
    differing = {d["name"]: d for d in stored["differing"]}
    # every tensor zstd shrank (one it cannot shrink is stored raw: stored alike)
    shrunk = {name for name, t in load(str(other)).tensors.items() if t.encoding != "raw"}
    assert shrunk
    assert set(differing) == shrunk
    for name, d in differing.items():
        assert d["a"] == {"encoding": "raw", "bytes": _model()[name].nbytes}
        assert d["b"] == {"encoding": encoding, "bytes": sizes[name]}
    summary = [line for line in lines if line.startswith("stored")]
    assert summary == [
        f"stored (how the bytes are kept, not a difference): {len(shrunk)} of {n} tensors stored "
        f"differently (raw -> {encoding}); {stored['a_bytes']:,} -> {stored['b_bytes']:,} "
        "stored bytes in all"
    ]
    verbose = run(capsys, "diff", st, other, "--verbose").out.splitlines()
    one = min(shrunk)
    raw, packed = _model()[one].nbytes, sizes[one]
    assert f"  ~ {one}: raw {raw:,} bytes -> {encoding} {packed:,} bytes" in verbose
    md = run(capsys, "diff", st, other, "--format", "md").out.splitlines()
    assert md[-1] == "Identical."
    assert any(line.startswith("Stored (how the bytes are kept") for line in md)


def test_a_real_change_still_shows_beside_the_stored_section(tmp_path: Path, capsys: Any) -> None:
    tensors = _model()
    st = tmp_path / "a.safetensors"
    ref_st.save_file(tensors, str(st))
    changed = dict(tensors, **{"layers.0.norm": np.ones(65, np.float16)})
    zt = tmp_path / "b.zt"
    ztensor.save_file(changed, str(zt), version=2, compression="zstd")
    doc = run_json(capsys, "diff", st, zt)
    assert doc["identical"] is False
    assert doc["tensors"]["changed"] == [
        {"name": "layers.0.norm", "field": "shape", "a": [64], "b": [65]},
        {"name": "layers.0.norm", "field": "byte_length", "a": 128, "b": 130},
    ]
    assert run(capsys, "diff", st, zt, "--fail-on-diff").code == 1


def _complex(tmp_path: Path) -> tuple[Path, Path]:
    """complex128 (a v2-only type) raw and zstd: the catalog's dtype name is one that
    ``from_name`` does not know, so its size once came from the stored bytes."""
    t = {"c": (np.arange(64) * 1j).astype(np.complex128), "f": np.zeros(64, np.float64)}
    raw, packed = tmp_path / "raw.zt", tmp_path / "zstd.zt"
    ztensor.save_file(t, str(raw), version=2)
    ztensor.save_file(t, str(packed), version=2, compression="zstd")
    return raw, packed


def test_complex128_v2_id_and_diff_ignore_compression(tmp_path: Path, capsys: Any) -> None:
    raw, packed = _complex(tmp_path)
    assert load(str(packed)).tensors["c"].nbytes < 1024  # zstd shrank it
    assert _id(capsys, raw) == _id(capsys, packed)
    assert _id(capsys, raw, "--content") == _id(capsys, packed, "--content")
    doc = run_json(capsys, "diff", raw, packed, "--data")
    assert doc["identical"] is True
    assert doc["tensors"]["changed"] == []
    assert {d["name"] for d in doc["stored"]["differing"]} == {"c", "f"}


def test_unknown_logical_type_sized_by_its_decoded_length(tmp_path: Path, capsys: Any) -> None:
    """A v2 logical type tensorfile does not know (written by ztensor 2.1.2): its size is
    the part's decoded_length, not the compressed bytes."""
    payload = bytes(range(256)) * 2 + bytes(512)
    paths = []
    for encoding in (None, "zt.zstd-seekable/1"):
        part: dict[str, Any] = {"dtype": "u8", "logical": "x.custom/1", "bytes": payload}
        if encoding:
            part["encoding"] = encoding
        path = tmp_path / f"{encoding is not None}.zt"
        zt2.write(path, {"t": {"shape": [1024], "parts": {"data": part}}}, canonical=False)
        paths.append(path)
    raw, packed = paths
    assert load(str(packed)).tensors["t"].nbytes < 1024
    assert load(str(packed)).tensors["t"].decoded_nbytes == 1024
    assert _id(capsys, raw) == _id(capsys, packed)
    doc = run_json(capsys, "diff", raw, packed)
    assert doc["identical"] is True
    assert doc["stored"]["differing"][0]["b"]["bytes"] < 1024
