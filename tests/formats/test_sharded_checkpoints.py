"""Sharded safetensors checkpoints: save_sharded (numpy and torch) writes what
huggingface_hub's save_torch_state_dict writes and what load_torch_model loads;
tensorfile.open reads a checkpoint (index or folder) locally, over HTTP and through fsspec,
opening each shard once, on first use; hostile indexes are refused; a SIGKILL mid-save never
leaves an index naming missing shards."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest
import torch
from huggingface_hub import load_torch_model, save_torch_state_dict

import tensorfile
from tensorfile import ShardedReader, TensorFileError
from tensorfile.safetensors.numpy import save, save_sharded
from tensorfile.safetensors.torch import save_sharded as save_sharded_pt
from tests.helpers.servers import start_range_server


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.Embedding(40, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 40, bias=False)
    )
    m[2].weight = m[0].weight  # tied, as language models tie embeddings
    return m


@pytest.mark.parametrize("size", ["2KB", "5KB", "1GB"])
def test_torch_save_sharded_writes_what_huggingface_hub_writes(tmp_path: Path, size: str) -> None:
    state = _model().state_dict()
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    written = save_sharded_pt(state, ours, max_shard_size=size)
    save_torch_state_dict(state, theirs, max_shard_size=size)
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
    assert sorted(written) == sorted(p.name for p in ours.iterdir())
    for f in theirs.iterdir():
        mine, want = (ours / f.name).read_bytes(), f.read_bytes()
        if f.suffix == ".json":
            assert mine == want, f.name
            continue
        # the reference writes __metadata__ from a Rust HashMap: with two keys (the tied
        # weight's note and "format") its order varies from run to run; all else is equal
        n, m = int.from_bytes(mine[:8], "little"), int.from_bytes(want[:8], "little")
        assert n == m and json.loads(mine[8 : 8 + n]) == json.loads(want[8 : 8 + m]), f.name
        assert mine[8 + n :] == want[8 + m :], f.name
    fresh = _model()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    load_torch_model(fresh, ours)
    for k, v in _model().state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k


def test_numpy_save_sharded_round_trips_through_tensorfile_open(tmp_path: Path) -> None:
    arrays = {f"l{i}": np.full((100,), i, np.float32) for i in range(10)}
    names = save_sharded(arrays, tmp_path, max_shard_size="1KB", metadata={"who": "me"})
    assert names[-1] == "model.safetensors.index.json" and len(names) == 6  # 2 x 400 B each
    for target in (tmp_path, tmp_path / "model.safetensors.index.json"):
        with tensorfile.open(target) as ck:
            assert isinstance(ck, ShardedReader)
            assert ck.keys() == sorted(arrays)
            assert ck.metadata == {"who": "me"} and ck.total_size == 4000
            assert ck.opened == []
            assert ck.get_tensor("l3").tolist() == [3.0] * 100
            assert ck.read_slice("l7", slice(2, 4)).tolist() == [7.0, 7.0]
            assert ck.view("l3").sum() == 300
            assert ck.opened == [ck.shard_of("l3"), ck.shard_of("l7")]  # once each, lazily
            assert {k: v.tolist() for k, v in ck.get_tensors().items()} == {
                k: v.tolist() for k, v in arrays.items()
            }


def test_a_checkpoint_huggingface_hub_wrote_opens(tmp_path: Path) -> None:
    state = {f"w{i}": torch.randn(32, 32) for i in range(5)}
    save_torch_state_dict(state, tmp_path, max_shard_size="10KB")
    with tensorfile.open(tmp_path) as ck:
        for k, v in state.items():
            assert np.array_equal(ck.get_tensor(k), v.numpy())


def test_a_folder_with_one_file_opens_it(tmp_path: Path) -> None:
    save_sharded({"a": np.ones(3, np.float32)}, tmp_path)
    with tensorfile.open(tmp_path) as f:
        assert not isinstance(f, ShardedReader) and f.keys() == ["a"]


def test_over_http_and_fsspec(tmp_path: Path) -> None:
    arrays = {f"t{i}": np.arange(50, dtype=np.int32) + i for i in range(4)}
    save_sharded(arrays, tmp_path, max_shard_size="300B")
    server, stopper = start_range_server(tmp_path, tmp_path / "log")
    try:
        url = f"{server.url}/model.safetensors.index.json"
        with tensorfile.open(url) as ck:
            assert ck.get_tensor("t2").tolist() == (np.arange(50) + 2).tolist()
            assert ck.opened == [ck.shard_of("t2")]
    finally:
        stopper.terminate()
    fs = fsspec.filesystem("memory")
    for f in tmp_path.glob("model*"):
        fs.pipe(f"/ck/{f.name}", f.read_bytes())
    with tensorfile.open("memory://ck/model.safetensors.index.json") as ck:
        assert ck.get_tensor("t3").tolist() == (np.arange(50) + 3).tolist()
    info = tensorfile.inspect("memory://ck/model.safetensors.index.json")
    assert info.tensor_count == 4


@pytest.mark.parametrize(
    ("shard", "why"),
    [
        ("../outside.safetensors", "leaves the folder"),
        ("/etc/passwd", "absolute"),
        ("http://evil/x.safetensors", "scheme"),
    ],
)
def test_hostile_shard_names_are_refused(tmp_path: Path, shard: str, why: str) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": shard}}))
    with pytest.raises(TensorFileError, match=why):
        tensorfile.open(tmp_path)


def test_lying_indexes_give_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "s1.safetensors").write_bytes(save({"a": np.ones(2, np.float32)}))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}}))
    with tensorfile.open(index) as ck:
        assert ck.get_tensor("a").tolist() == [1, 1]
        with pytest.raises(TensorFileError, match=r"places tensor 'b' in s1\.safetensors"):
            ck.get_tensor("b")
        with pytest.raises(KeyError):
            ck.get_tensor("zzz")
    index.write_text(json.dumps({"weight_map": {"a": "gone.safetensors"}}))
    with tensorfile.open(index) as ck, pytest.raises(TensorFileError, match=r"gone\.safetensors"):
        ck.get_tensor("a")
    index.write_text(json.dumps({"weight_map": {"a": 3}}))
    with pytest.raises(TensorFileError, match="weight_map"):
        tensorfile.open(index)
    index.write_bytes(b" " * (65 << 20))
    with pytest.raises(TensorFileError):
        tensorfile.open(index)


def test_stale_shards_of_an_earlier_save_are_removed_after_success(tmp_path: Path) -> None:
    arrays = {f"l{i}": np.zeros(100, np.float32) for i in range(6)}
    save_sharded(arrays, tmp_path, max_shard_size="400B")
    assert len(list(tmp_path.glob("model-*-of-00006.safetensors"))) == 6
    save_sharded(arrays, tmp_path, max_shard_size="800B")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]


_CHILD = """
import sys, numpy as np
from tensorfile.safetensors.numpy import save_sharded
arrays = {f"l{i}": np.full((1 << 20,), float(sys.argv[2]), np.float32) for i in range(40)}
save_sharded(arrays, sys.argv[1], max_shard_size=sys.argv[3])
"""


def test_sigkill_mid_save_never_leaves_an_index_naming_missing_or_foreign_shards(
    tmp_path: Path,
) -> None:
    ck = tmp_path / "ck"
    subprocess.run([sys.executable, "-c", _CHILD, str(ck), "1", "20MB"], check=True)
    for delay in (0.2, 0.5, 0.9, 1.4):
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(ck), "2", "9MB"])
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        index = ck / "model.safetensors.index.json"
        if not index.exists():
            continue  # between the old index's removal and the new one's: no claim at all
        with tensorfile.open(ck) as got:
            values = {float(got.get_tensor(n)[0]) for n in got.keys()}
            assert len(values) == 1  # one save's tensors, never a mix
            assert len(got.keys()) == 40
