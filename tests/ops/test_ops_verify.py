"""tensorfile.verify and `tensorfile verify`: digests, truncation, sharded checkpoints,
deep value checks, exit statuses. Checkpoints are written by huggingface_hub (the oracle of
the sharded layout)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from huggingface_hub import save_torch_state_dict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfile import TensorFileError, ztensor
from tensorfile.ops import verify
from tensorfile.safetensors.numpy import save_file

CLI = [sys.executable, "-m", "tensorfile.cli.app"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def _data_offset(path: Path, name: str) -> int:
    with ztensor.open(path) as f:
        return f.info(name).data.range.start


@pytest.mark.parametrize(
    ("version", "checksum"), [(1, "crc32c"), (1, "sha256"), (2, "xxh3"), (2, "sha256")]
)
def test_a_flipped_byte_in_a_checksummed_component_fails_naming_the_tensor(
    tmp_path: Path, version: int, checksum: str
) -> None:
    path = tmp_path / "m.zt"
    tensors = {"a": np.arange(64, dtype=np.float32), "b": np.arange(256, dtype=np.int64)}
    ztensor.save_file(tensors, path, version=version, checksum=checksum)
    assert verify(path).ok
    _flip(path, _data_offset(path, "b") + 17)
    report = verify(path)
    assert not report.ok
    assert [(f.subject, f.rule) for f in report.failures] == [("b", "digest")]
    assert report.tensors_checked == 1
    run = _cli("verify", str(path))
    assert run.returncode == 1
    assert "b fails rule digest" in run.stderr and "Traceback" not in run.stderr


def test_a_truncated_safetensors_file_fails_naming_the_cut_tensors(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_file({"a": np.ones(100, np.float32), "b": np.ones(100, np.float32)}, str(path))
    path.write_bytes(path.read_bytes()[:-10])
    report = verify(path)
    assert [(f.subject, f.rule) for f in report.failures] == [("b", "truncated")]
    assert _cli("verify", str(path)).returncode == 1


def test_deep_counts_nan_and_inf_and_fails_only_when_deep(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    vals = np.array([1.0, np.nan, np.inf, -np.inf, np.nan], np.float32)
    save_file(
        {
            "f32": vals,
            "bf16": vals.astype("bfloat16"),
            "f16": vals.astype(np.float16),
            "ok": np.ones(3, np.float64),
            "i": np.arange(3, dtype=np.int32),
        },
        str(path),
    )
    assert verify(path).ok
    report = verify(path, deep=True)
    stats = {s.name: (s.nan, s.inf) for s in report.stats}
    assert stats == {"f32": (2, 2), "bf16": (2, 2), "f16": (2, 2)}
    assert {(f.subject, f.rule) for f in report.failures} == {
        (n, r) for n in ("f32", "bf16", "f16") for r in ("nan", "inf")
    }
    assert _cli("verify", str(path)).returncode == 0
    run = _cli("verify", "--deep", "--json", str(path))
    assert run.returncode == 1
    doc = json.loads(run.stdout)
    assert doc["ok"] is False and len(doc["failures"]) == 6


def test_deep_refuses_bool_bytes_other_than_0_and_1(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_file({"mask": np.array([True, False, True, True])}, str(path))
    data = bytearray(path.read_bytes())
    data[-2] = 7  # the third element's byte
    path.write_bytes(bytes(data))
    report = verify(path, deep=True)
    assert [(f.subject, f.rule) for f in report.failures] == [("mask", "bool")]
    assert report.stats[0].bad_bool == 1


def test_clean_files_of_every_format_verify(tmp_path: Path) -> None:
    import gguf

    dense = {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}
    sparse = ztensor.CSRTensor.from_dense(np.eye(5, dtype=np.float32))
    save_file(dense, str(tmp_path / "a.safetensors"))
    ztensor.save_file(
        {**dense, "s": sparse}, tmp_path / "b.zt", compression="zstd", checksum="sha256"
    )
    ztensor.save_file(
        {**dense, "s": sparse}, tmp_path / "c.zt", version=2, compression="zstd", checksum="xxh3"
    )
    writer = gguf.GGUFWriter(str(tmp_path / "d.gguf"), "llama")
    writer.add_tensor("w", dense["w"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for name in ("a.safetensors", "b.zt", "c.zt", "d.gguf"):
        report = verify(tmp_path / name, deep=True)
        assert report.ok, (name, report.failures)
        assert report.tensors_checked >= 1
    run = _cli("verify", *(str(tmp_path / n) for n in ("a.safetensors", "b.zt", "c.zt", "d.gguf")))
    assert run.returncode == 0, run.stderr
    assert run.stdout.count(": OK (") == 4


def test_unreadable_inputs_exit_2_with_a_message(tmp_path: Path) -> None:
    (tmp_path / "junk.bin").write_bytes(b"hello, this is not a tensor file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TensorFileError):
        verify(tmp_path / "junk.bin")
    for target in ("junk.bin", "empty", "missing.safetensors"):
        run = _cli("verify", str(tmp_path / target))
        assert run.returncode == 2, (target, run.stderr)
        assert run.stderr.startswith("tensorfile: error:") and "Traceback" not in run.stderr


# -- sharded checkpoints -------------------------------------------------------------------


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    state = {f"layer.{i}.weight": torch.full((64, 64), float(i)) for i in range(6)}
    folder = tmp_path / "ck"
    folder.mkdir()
    save_torch_state_dict(state, folder, max_shard_size="40KB")
    assert len(list(folder.glob("model-*.safetensors"))) > 2
    return folder


def _index(folder: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((folder / "model.safetensors.index.json").read_text())


def test_a_clean_checkpoint_verifies(checkpoint: Path) -> None:
    report = verify(checkpoint, deep=True)
    assert report.ok, report.failures
    assert report.format == "safetensors" and report.tensors_checked == 6
    assert report.shards == len(set(_index(checkpoint)["weight_map"].values()))
    assert verify(checkpoint / "model.safetensors.index.json").ok
    assert _cli("verify", str(checkpoint)).returncode == 0


def test_a_missing_shard_fails_naming_it_and_its_tensors(checkpoint: Path) -> None:
    index = _index(checkpoint)
    shard = index["weight_map"]["layer.3.weight"]
    (checkpoint / shard).unlink()
    report = verify(checkpoint)
    assert [(f.subject, f.rule) for f in report.failures] == [(shard, "missing-shard")]
    assert "layer.3.weight" in report.failures[0].message
    run = _cli("verify", str(checkpoint))
    assert run.returncode == 1 and shard in run.stderr


def test_a_truncated_shard_fails_naming_the_tensor(checkpoint: Path) -> None:
    shard = checkpoint / _index(checkpoint)["weight_map"]["layer.5.weight"]
    shard.write_bytes(shard.read_bytes()[:-100])
    report = verify(checkpoint)
    assert ("layer.5.weight", "truncated") in [(f.subject, f.rule) for f in report.failures]
    assert _cli("verify", str(checkpoint)).returncode == 1


def test_a_lying_total_size_fails(checkpoint: Path) -> None:
    path = checkpoint / "model.safetensors.index.json"
    doc = _index(checkpoint)
    doc["metadata"]["total_size"] += 4
    path.write_text(json.dumps(doc))
    assert [f.rule for f in verify(checkpoint).failures] == ["total-size"]


def test_a_tensor_in_the_wrong_shard_or_in_two_fails(checkpoint: Path) -> None:
    doc = _index(checkpoint)
    wm = doc["weight_map"]
    a, b = wm["layer.0.weight"], wm["layer.5.weight"]
    assert a != b
    wm["layer.0.weight"] = b  # the index now lies about where layer.0 is
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps(doc))
    rules = {(f.subject, f.rule) for f in verify(checkpoint).failures}
    assert ("layer.0.weight", "misplaced-tensor") in rules
    # a copy of a shard's tensor in another shard
    doc["weight_map"]["layer.0.weight"] = a
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps(doc))
    from tensorfile.safetensors.numpy import load_file

    other = load_file(str(checkpoint / b))
    other.update(load_file(str(checkpoint / a)))
    save_file(other, str(checkpoint / b))
    rules = {(f.subject, f.rule) for f in verify(checkpoint).failures}
    assert ("layer.0.weight", "duplicate-tensor") in rules
    assert ("layer.0.weight", "unlisted-tensor") not in rules


# -- property: a flipped byte inside a digest always fails --------------------------------


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 300),
    where=st.floats(0, 1, exclude_max=True),
    bit=st.integers(0, 7),
    version=st.sampled_from([1, 2]),
)
def test_any_flipped_bit_in_checksummed_data_fails(
    tmp_path: Path, n: int, where: float, bit: int, version: int
) -> None:
    path = tmp_path / f"p{version}.zt"
    checksum = "crc32c" if version == 1 else "xxh3"
    ztensor.save_file({"t": np.arange(n, dtype=np.int32)}, path, version=version, checksum=checksum)
    with ztensor.open(path) as f:
        rng = f.info("t").data.range
    data = bytearray(path.read_bytes())
    data[rng.start + int(where * (rng.stop - rng.start))] ^= 1 << bit
    path.write_bytes(bytes(data))
    report = verify(path)
    assert [(f.subject, f.rule) for f in report.failures] == [("t", "digest")]
