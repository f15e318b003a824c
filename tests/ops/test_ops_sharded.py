"""Sharded checkpoints: an index plus shards, loaded via the index, the folder or a glob."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import huggingface_hub
import numpy as np
import pytest

import tensorfile
from tensorfile import ops
from tensorfile.safetensors.numpy import save_file
from tests.helpers.checkpoints import header_len, write_sharded


def _shards() -> list[dict[str, np.ndarray[Any, Any]]]:
    return [
        {
            "model.embed.weight": np.ones((10, 4), np.float32),
            "model.layers.0.w": np.ones((4, 4), np.float16),
        },
        {
            "model.layers.1.w": np.ones((4, 4), np.float16),
            "model.layers.1.ids": np.arange(3, dtype=np.int64),
        },
        {"lm_head.weight": np.full((10, 4), 2, np.float32)},
    ]


@pytest.fixture
def ckpt(tmp_path: Path) -> tuple[str, list[dict[str, Any]]]:
    shards = _shards()
    folder = tmp_path / "ckpt"
    folder.mkdir()
    index = str(write_sharded(folder, shards, {"format": "pt"}))
    return index, shards


def _how(index: str, how: str) -> str:
    folder = os.path.dirname(index)
    return {
        "index": index,
        "folder": folder,
        "glob": os.path.join(folder, "model-*-of-*.safetensors"),
    }[how]


@pytest.mark.parametrize("how", ["index", "folder", "glob"])
def test_load_sharded(ckpt: tuple[str, list[dict[str, Any]]], how: str) -> None:
    index, shards = ckpt
    s = ops.load(_how(index, how))
    every = {k: v for shard in shards for k, v in shard.items()}
    assert s.format == "safetensors"
    assert [t.name for t in s.by_name()] == sorted(every)
    for t in s.by_name():
        assert t.shape == every[t.name].shape
        assert t.nbytes == every[t.name].nbytes
    assert s.metadata == {"format": "pt"}
    folder = os.path.dirname(index)
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    assert s.shards is not None
    assert [os.path.basename(sh.path) for sh in s.shards] == files
    for sh, tensors in zip(s.shards, shards, strict=True):
        assert sh.tensor_count == len(tensors)
        assert sh.total_bytes == sum(a.nbytes for a in tensors.values())
    # every tensor records its shard
    for i, tensors in enumerate(shards):
        for name in tensors:
            entry = s.tensors[name]
            assert entry.file is not None
            assert os.path.basename(entry.file) == files[i]
    assert s.header_size == sum(header_len(os.path.join(folder, f)) for f in files)


@pytest.mark.parametrize("how", ["index", "folder", "glob"])
def test_inspect_sharded_json_and_huggingface(
    ckpt: tuple[str, list[dict[str, Any]]], how: str
) -> None:
    index, shards = ckpt
    r = ops.inspect(_how(index, how))
    doc = r.to_json()
    assert doc["schema"] == 1
    assert json.loads(json.dumps(doc)) == doc
    assert doc["tensor_count"] == 5
    assert len(doc["shards"]) == 3
    for entry, tensors in zip(doc["shards"], shards, strict=True):
        assert entry["tensor_count"] == len(tensors)
        assert entry["total_bytes"] == sum(a.nbytes for a in tensors.values())
        assert os.path.exists(entry["path"])
    shard_of = {t["name"]: t["shard"] for t in doc["tensors"]}
    assert shard_of["lm_head.weight"] == "model-00003-of-00003.safetensors"
    assert shard_of["model.layers.0.w"] == "model-00001-of-00003.safetensors"
    repo = huggingface_hub.get_local_safetensors_metadata(os.path.dirname(index))
    assert repo.sharded
    assert r.parameters_by_dtype == dict(repo.parameter_count)
    assert r.parameter_count == sum(repo.parameter_count.values())
    assert r.total_bytes == json.loads(Path(index).read_text())["metadata"]["total_size"]


def test_index_names_tensor_missing_from_its_shard(
    ckpt: tuple[str, list[dict[str, Any]]],
) -> None:
    index, _ = ckpt
    doc = json.loads(Path(index).read_text())
    doc["weight_map"]["ghost.weight"] = "model-00001-of-00003.safetensors"
    Path(index).write_text(json.dumps(doc))
    with pytest.raises(tensorfile.TensorFileError, match=r"ghost\.weight"):
        ops.load(index)
    with pytest.raises(tensorfile.TensorFileError):
        ops.inspect(os.path.dirname(index))


def test_index_puts_tensor_in_the_wrong_shard(ckpt: tuple[str, list[dict[str, Any]]]) -> None:
    index, _ = ckpt
    doc = json.loads(Path(index).read_text())
    doc["weight_map"]["lm_head.weight"] = "model-00001-of-00003.safetensors"
    Path(index).write_text(json.dumps(doc))
    with pytest.raises(tensorfile.TensorFileError, match=r"lm_head\.weight"):
        ops.load(index)


def test_index_names_a_missing_shard_file(ckpt: tuple[str, list[dict[str, Any]]]) -> None:
    index, _ = ckpt
    os.unlink(os.path.join(os.path.dirname(index), "model-00002-of-00003.safetensors"))
    with pytest.raises(tensorfile.TensorFileError):
        ops.load(index)


@pytest.mark.parametrize("bad", ["../outside.safetensors", "/etc/passwd"])
def test_index_shard_path_leaving_the_folder(
    ckpt: tuple[str, list[dict[str, Any]]], bad: str
) -> None:
    index, _ = ckpt
    doc = json.loads(Path(index).read_text())
    doc["weight_map"]["lm_head.weight"] = bad
    Path(index).write_text(json.dumps(doc))
    with pytest.raises(tensorfile.errors.InvalidArgumentError):
        ops.load(index)


@pytest.mark.parametrize("content", ["not json", "[]", '{"weight_map": {"a": 1}}', "{}"])
def test_bad_index_documents(ckpt: tuple[str, list[dict[str, Any]]], content: str) -> None:
    index, _ = ckpt
    Path(index).write_text(content)
    with pytest.raises(tensorfile.TensorFileError):
        ops.load(index)


def test_glob_with_duplicate_tensor_is_an_error(tmp_path: Path) -> None:
    save_file({"w": np.ones(2, np.float32)}, str(tmp_path / "a.safetensors"))
    save_file({"w": np.ones(2, np.float32)}, str(tmp_path / "b.safetensors"))
    with pytest.raises(tensorfile.TensorFileError, match="'w'"):
        ops.load(str(tmp_path / "*.safetensors"))


def test_glob_matching_nothing(tmp_path: Path) -> None:
    with pytest.raises(tensorfile.TensorFileError):
        ops.load(str(tmp_path / "nothing-*.safetensors"))


def test_thousand_shards_read_only_headers(tmp_path: Path) -> None:
    n = 1000
    per_shard = 1024  # float32 elements: 4 KiB of data per shard
    folder = tmp_path / "big"
    folder.mkdir()
    shards = [{f"model.layers.{i}.weight": np.full(per_shard, i, np.float32)} for i in range(n)]
    index = str(write_sharded(folder, shards, {"format": "pt"}))
    files = sorted(str(p) for p in folder.glob("model-*.safetensors"))
    assert len(files) == n
    headers = sum(8 + header_len(f) for f in files)
    total_file_bytes = sum(os.path.getsize(f) for f in files)
    index_bytes = os.path.getsize(index)
    for target in (index, str(folder)):
        s = ops.load(target)
        assert len(s.tensors) == n
        assert s.shards is not None and len(s.shards) == n
        assert headers <= s.bytes_read <= headers + index_bytes
        assert s.bytes_read * 10 < total_file_bytes
    r = ops.inspect(index)
    assert r.parameter_count == n * per_shard
    assert r.total_bytes == n * per_shard * 4
    repo = huggingface_hub.get_local_safetensors_metadata(str(folder))
    assert r.parameters_by_dtype == dict(repo.parameter_count)
