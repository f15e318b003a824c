"""ops.inspect and ops.module_tree on safetensors, zTensor and GGUF files, checked against the
files' bytes, huggingface_hub's local parser and the gguf package's reader."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import gguf
import huggingface_hub
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy as ref_st

from tensorfile import ops, ztensor
from tensorfile.ops.inspect import ModuleGroup
from tensorfile.safetensors.numpy import save_file
from tests.helpers.checkpoints import header_len


def _model() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(3)
    return {
        "model.embed_tokens.weight": rng.standard_normal((50, 16)).astype(np.float16),
        "model.layers.0.self_attn.q_proj.weight": np.ones((16, 16), np.float32),
        "model.layers.0.self_attn.k_proj.weight": np.ones((8, 16), np.float32),
        "model.layers.0.mlp.up.weight": np.ones((32, 16), ml_dtypes.bfloat16),
        "model.layers.1.self_attn.q_proj.weight": np.ones((16, 16), np.float32),
        "model.layers.1.mlp.up.weight": np.ones((32, 16), ml_dtypes.bfloat16),
        "model.norm.weight": np.ones(16, np.float32),
        "lm_head.weight": np.ones((50, 16), np.float16),
        "position_ids": np.arange(7, dtype=np.int64),
        "empty": np.zeros((0, 5), np.float32),
        "flag": np.array(True),
    }


_ST_NAME = {
    "float16": "F16",
    "float32": "F32",
    "bfloat16": "BF16",
    "int64": "I64",
    "bool": "BOOL",
}


def _expected_by_dtype(arrays: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    params: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    for arr in arrays.values():
        key = _ST_NAME[arr.dtype.name]
        params[key] = params.get(key, 0) + arr.size
        nbytes[key] = nbytes.get(key, 0) + arr.nbytes
    return params, nbytes


def test_inspect_safetensors_fields(tmp_path: Path) -> None:
    arrays = _model()
    path = str(tmp_path / "model.safetensors")
    save_file(arrays, path, {"format": "pt", "note": "é"})
    r = ops.inspect(path)
    params, nbytes = _expected_by_dtype(arrays)
    assert r.format == "safetensors"
    assert r.version is None
    assert r.header_size == header_len(path)
    assert r.tensor_count == len(arrays)
    assert r.parameter_count == sum(a.size for a in arrays.values())
    assert r.parameters_by_dtype == params
    assert r.bytes_by_dtype == nbytes
    assert r.total_bytes == sum(a.nbytes for a in arrays.values())
    assert r.total_bytes == os.path.getsize(path) - 8 - r.header_size
    assert r.metadata == {"format": "pt", "note": "é"}
    assert len(r.structural_hash) == 64
    assert r.structural_hash == ops.structural_hash(path)
    assert r.shards is None
    assert [t.name for t in r.tensors] == sorted(arrays)
    # data_offsets and lengths, checked against the raw header
    with open(path, "rb") as f:
        f.seek(8)
        header = json.loads(f.read(r.header_size))
    for t in r.tensors:
        arr = arrays[t.name]
        assert t.shape == arr.shape
        assert r.dtype_of(t) == header[t.name]["dtype"] == _ST_NAME[arr.dtype.name]
        assert list(t.data_offsets) == header[t.name]["data_offsets"]
        assert t.nbytes == arr.nbytes == t.data_offsets[1] - t.data_offsets[0]


def test_inspect_reads_only_the_header(tmp_path: Path) -> None:
    path = str(tmp_path / "big.safetensors")
    save_file({"w": np.zeros((512, 512), np.float32)}, path)
    r = ops.inspect(path)
    assert 0 < r.bytes_read <= 8 + r.header_size + 64
    assert r.bytes_read < os.path.getsize(path) // 100


def test_inspect_to_json(tmp_path: Path) -> None:
    arrays = _model()
    path = str(tmp_path / "model.safetensors")
    save_file(arrays, path, {"format": "pt"})
    r = ops.inspect(path)
    doc = r.to_json()
    assert json.loads(json.dumps(doc)) == doc  # plain JSON
    assert doc["schema"] == 1
    assert doc["format"] == "safetensors"
    assert doc["header_size"] == r.header_size
    assert doc["tensor_count"] == len(arrays)
    assert doc["parameter_count"] == r.parameter_count
    assert doc["parameters_by_dtype"] == r.parameters_by_dtype
    assert doc["bytes_by_dtype"] == r.bytes_by_dtype
    assert doc["total_bytes"] == r.total_bytes
    assert doc["metadata"] == {"format": "pt"}
    assert doc["structural_hash"] == r.structural_hash
    assert "shards" not in doc
    by_name = {t["name"]: t for t in doc["tensors"]}
    assert set(by_name) == set(arrays)
    q = by_name["model.layers.0.self_attn.q_proj.weight"]
    assert q["dtype"] == "F32"
    assert q["shape"] == [16, 16]
    assert q["byte_length"] == 1024
    assert q["data_offsets"][1] - q["data_offsets"][0] == 1024
    assert by_name["flag"]["shape"] == []
    assert by_name["empty"]["byte_length"] == 0


@pytest.mark.parametrize("writer", ["tensorfile", "reference"])
def test_parameter_counts_match_huggingface_hub(tmp_path: Path, writer: str) -> None:
    arrays = _model()
    path = str(tmp_path / "model.safetensors")
    if writer == "tensorfile":
        save_file(arrays, path)
    else:  # the reference numpy writer has no bfloat16
        arrays = {k: v for k, v in arrays.items() if v.dtype != ml_dtypes.bfloat16}
        ref_st.save_file(arrays, path)
    r = ops.inspect(path)
    parsed = huggingface_hub.parse_local_safetensors_file_metadata(path)
    assert r.parameters_by_dtype == dict(parsed.parameter_count)
    assert r.parameter_count == sum(parsed.parameter_count.values())
    assert set(parsed.tensors) == {t.name for t in r.tensors}
    for t in r.tensors:
        info = parsed.tensors[t.name]
        assert (r.dtype_of(t), list(t.shape), list(t.data_offsets)) == (
            info.dtype,
            info.shape,
            list(info.data_offsets),
        )
    repo = huggingface_hub.get_local_safetensors_metadata(path)
    assert r.parameters_by_dtype == dict(repo.parameter_count)


def test_inspect_ztensor(tmp_path: Path) -> None:
    arrays = {
        "w": np.ones((4, 6), np.float32),
        "b": np.ones(6, np.float16),
        "ids": np.arange(5, dtype=np.int64),
    }
    raw, packed = str(tmp_path / "raw.zt"), str(tmp_path / "zstd.zt")
    ztensor.save_file(arrays, raw, attributes={"license": "MIT"})
    ztensor.save_file(arrays, packed, attributes={"license": "MIT"}, compression="zstd")
    r = ops.inspect(raw)
    assert r.format == "ztensor"
    assert r.version == "1.0"
    assert r.tensor_count == 3
    assert r.parameter_count == 24 + 6 + 5
    assert r.parameters_by_dtype == {"float16": 6, "float32": 24, "int64": 5}
    assert r.bytes_by_dtype == {"float16": 12, "float32": 96, "int64": 40}
    assert r.total_bytes == 148
    assert r.metadata == {"license": "MIT"}
    assert 0 < r.header_size < os.path.getsize(raw)
    want = {"w": "float32", "b": "float16", "ids": "int64"}
    assert {t.name: r.dtype_of(t) for t in r.tensors} == want
    for t in r.tensors:
        assert t.data_offsets[1] - t.data_offsets[0] == t.nbytes
        with open(raw, "rb") as f:
            f.seek(t.data_offsets[0])
            assert f.read(t.nbytes) == arrays[t.name].tobytes()
    z = ops.inspect(packed)
    assert z.parameter_count == r.parameter_count
    assert z.parameters_by_dtype == r.parameters_by_dtype
    assert all(t.encoding == "zstd" for t in z.tensors)
    assert all(t["encoding"] == "zstd" for t in z.to_json()["tensors"])
    assert "encoding" not in r.to_json()["tensors"][0]


def test_inspect_gguf_against_gguf_reader(tmp_path: Path) -> None:
    path = str(tmp_path / "m.gguf")
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_uint32("llama.block_count", 2)
    w.add_string("general.name", "tiny")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_tensor("token_embd.weight", np.ones((10, 8), np.float32))
    w.add_tensor("blk.0.attn_q.weight", np.ones((8, 8), np.float16))
    w.add_tensor(
        "blk.0.ffn.weight", np.zeros((4, 34), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0
    )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = ops.inspect(path)
    assert r.format == "gguf"
    assert r.version == "3"
    assert r.tensor_count == 3
    assert r.parameter_count == 80 + 64 + 4 * 32
    # the gguf package's names of the types (upper-case), as safetensors names F32 and F16
    assert r.parameters_by_dtype == {"F16": 64, "F32": 80, "Q8_0": 128}
    assert r.bytes_by_dtype == {"F16": 128, "F32": 320, "Q8_0": 4 * 34}
    doc = r.to_json()
    assert json.loads(json.dumps(doc)) == doc
    assert doc["metadata"]["llama.block_count"] == 2
    assert doc["metadata"]["general.name"] == "tiny"
    assert doc["metadata"]["tokenizer.ggml.tokens"] == ["a", "b", "c"]
    assert doc["version"] == "3"
    reader = gguf.GGUFReader(path)
    data_start = min(t.data_offset for t in reader.tensors)
    assert r.header_size <= data_start
    for rt in reader.tensors:
        t = next(x for x in r.tensors if x.name == rt.name)
        # row-major: the reverse of ggml's order, which the gguf reader keeps
        assert list(t.shape) == [int(d) for d in reversed(rt.shape)]
        assert r.dtype_of(t) == rt.tensor_type.name
        assert t.nbytes == int(rt.n_bytes)
        assert t.data_offsets[0] + data_start == int(rt.data_offset)
        assert t.numel == int(rt.n_elements)


# -- module tree ----------------------------------------------------------------------------


def _walk(g: ModuleGroup) -> list[ModuleGroup]:
    out = [g]
    for c in g.children:
        out.extend(_walk(c))
    return out


def _all_tensors(g: ModuleGroup) -> list[str]:
    names = [t.name for t in g.tensors]
    for c in g.children:
        names.extend(_all_tensors(c))
    return names


def test_module_tree_groups_and_subtotals(tmp_path: Path) -> None:
    arrays = _model()
    path = str(tmp_path / "model.safetensors")
    save_file(arrays, path)
    r = ops.inspect(path)
    root = ops.module_tree(r.tensors)
    assert root.prefix == ""
    assert root.parameters == r.parameter_count
    assert root.bytes == r.total_bytes
    assert sorted(t.name for t in root.tensors) == ["empty", "flag", "position_ids"]
    assert [c.prefix for c in root.children] == ["lm_head", "model"]
    # every tensor appears exactly once
    assert sorted(_all_tensors(root)) == sorted(arrays)
    for g in _walk(root):
        members = _all_tensors(g)
        assert g.parameters == sum(arrays[n].size for n in members)
        assert g.bytes == sum(arrays[n].nbytes for n in members)
        for n in members:
            assert g.prefix == "" or n.startswith(g.prefix + ".")
    model = root.children[1]
    assert [c.prefix for c in model.children] == [
        "model.embed_tokens",
        "model.layers",
        "model.norm",
    ]
    layers = model.children[1]
    assert [c.prefix for c in layers.children] == ["model.layers.0", "model.layers.1"]
    layer0 = layers.children[0]
    assert layer0.parameters == 256 + 128 + 512
    assert layer0.bytes == 1024 + 512 + 1024
    assert [c.prefix for c in layer0.children] == [
        "model.layers.0.mlp.up",
        "model.layers.0.self_attn",
    ]


def test_module_tree_collapses_single_chains(tmp_path: Path) -> None:
    arrays = {
        "model.layers.0.attn.q.weight": np.ones((2, 2), np.float32),
        "model.layers.0.attn.k.weight": np.ones((2, 3), np.float32),
    }
    path = str(tmp_path / "m.safetensors")
    save_file(arrays, path)
    root = ops.module_tree(ops.load(path).by_name())
    assert [c.prefix for c in root.children] == ["model.layers.0.attn"]
    attn = root.children[0]
    assert attn.parameters == 10
    assert attn.bytes == 40
    assert [c.prefix for c in attn.children] == [
        "model.layers.0.attn.k",
        "model.layers.0.attn.q",
    ]
    assert [[t.name for t in c.tensors] for c in attn.children] == [
        ["model.layers.0.attn.k.weight"],
        ["model.layers.0.attn.q.weight"],
    ]


def test_module_tree_parameters_are_products_of_shapes(tmp_path: Path) -> None:
    path = str(tmp_path / "m.safetensors")
    save_file({"a.b": np.ones((3, 4, 5), np.int8), "a.c": np.ones(2, np.int8)}, path)
    root = ops.module_tree(ops.load(path).by_name())
    assert root.parameters == math.prod((3, 4, 5)) + 2
    assert root.children[0].prefix == "a"
    assert sorted(t.name for t in root.children[0].tensors) == ["a.b", "a.c"]
