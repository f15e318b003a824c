"""save_sharded (numpy, torch) and the writer under it (tensorfile.formats.safetensors._sharded):
huggingface_hub's split (checked against its own factory), names and index; shards byte-equal
to save_file; one tensor in memory at a time; bad arguments refused before anything is
written; a failure or a SIGKILL at every step of a save over an older checkpoint leaves the
old checkpoint or the new one, never an index naming a missing or foreign shard."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from huggingface_hub import load_torch_model, save_torch_state_dict
from huggingface_hub.serialization import split_state_dict_into_shards_factory
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorfile
from tensorfile import InvalidArgumentError, ShardedReader, TensorFileError
from tensorfile.formats.safetensors._sharded import parse_size, plan_shards, write_sharded
from tensorfile.safetensors.numpy import save_file, save_sharded
from tensorfile.safetensors.torch import save_sharded as save_sharded_pt

INDEX = "model.safetensors.index.json"


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("5GB", 5_000_000_000),
        ("5GiB", 5 * 2**30),
        ("500MB", 500_000_000),
        ("1KB", 1000),
        ("2KiB", 2048),
        ("10mb", 10_000_000),
        (123, 123),
    ],
)
def test_parse_size(text: str | int, n: int) -> None:
    assert parse_size(text) == n


@pytest.mark.parametrize("bad", ["", "GB", "5XB", "-5GB", "0", 0, -1, True, 1.5, None, "5 G B"])
def test_parse_size_refuses(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_size(bad)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from([None, 1, 2, 3])), max_size=30),
    st.integers(1, 60),
)
def test_split_is_huggingface_hubs(items: list[tuple[int, int | None]], limit: int) -> None:
    # the oracle: huggingface_hub's own factory, on (size, storage id) "tensors"
    state = {f"t{i}": item for i, item in enumerate(items)}
    theirs = split_state_dict_into_shards_factory(
        state,  # type: ignore[arg-type]
        get_storage_size=lambda t: t[0],
        get_storage_id=lambda t: t[1],
        filename_pattern="model{suffix}.safetensors",
        max_shard_size=limit,
    )
    storages = {n: s for n, (_, s) in state.items() if s is not None}
    ours = plan_shards([(n, s) for n, (s, _) in state.items()], limit, storages)
    assert [list(v) for v in theirs.filename_to_tensors.values()] == ours


def test_torch_storages_split_and_load_as_huggingface_hub(tmp_path: Path) -> None:
    # empty tensors share the null storage (huggingface_hub puts them all in the shard of
    # the first); a non-contiguous tensor gets its own storage; a slice of a bigger storage
    # that covers it; a tied weight is dropped and named in the metadata
    torch.manual_seed(1)
    emb = torch.randn(10, 8)
    state = {
        "a": torch.randn(40),
        "e1": torch.zeros(0),
        "b": torch.randn(30),
        "t": torch.randn(8, 12).t(),
        "e2": torch.zeros(0, 3),
        "c": torch.randn(50),
        "emb": emb,
        "head": emb,
    }
    for size in (500, 1000, 2000):
        ours, theirs = tmp_path / f"ours{size}", tmp_path / f"theirs{size}"
        theirs.mkdir()
        save_sharded_pt(state, ours, max_shard_size=size)
        save_torch_state_dict(state, theirs, max_shard_size=size)
        assert sorted(os.listdir(ours)) == sorted(os.listdir(theirs))
        if (theirs / INDEX).exists():
            assert (ours / INDEX).read_bytes() == (theirs / INDEX).read_bytes()
        with tensorfile.open(ours) as ck:
            for name in ("a", "b", "c", "e1", "e2", "t", "emb"):
                assert np.array_equal(ck.get_tensor(name), state[name].numpy()), name

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(10, 8)
            self.head = torch.nn.Linear(8, 10, bias=False)
            self.head.weight = self.emb.weight
            self.mid = torch.nn.Linear(8, 8)

    torch.manual_seed(2)
    net = Net()
    save_sharded_pt(net.state_dict(), tmp_path / "net", max_shard_size="300B")
    assert len(list((tmp_path / "net").glob("model-*"))) > 1
    fresh = Net()
    load_torch_model(fresh, tmp_path / "net")
    for k, v in net.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k


def test_huggingface_hub_written_checkpoint_reads_back(tmp_path: Path) -> None:
    state = {f"layer.{i}.weight": torch.randn(16, 16, dtype=torch.bfloat16) for i in range(6)}
    save_torch_state_dict(state, tmp_path, max_shard_size="1KB")
    with tensorfile.open(tmp_path) as ck:
        assert isinstance(ck, ShardedReader) and len(ck.shards) == 6
        assert ck.opened == []
        for k, v in state.items():
            assert np.array_equal(ck.get_tensor(k).astype(np.float32), v.float().numpy()), k


def test_each_shard_is_byte_identical_to_save_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.standard_normal((7, 5)).astype(np.float32),
        "i8": rng.integers(-5, 5, 33).astype(np.int8),
        "f16": rng.standard_normal(20).astype(np.float16),
        "u64": np.arange(9, dtype=np.uint64),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.array(3.5, np.float64),
    }
    names = save_sharded(arrays, tmp_path / "ck", max_shard_size=150, metadata={"m": "1"})
    index = json.loads((tmp_path / "ck" / names[-1]).read_text())
    by_shard: dict[str, list[str]] = {}
    for tensor, shard in index["weight_map"].items():
        by_shard.setdefault(shard, []).append(tensor)
    assert sorted(by_shard) == names[:-1]
    for shard, tensors in by_shard.items():
        save_file({n: arrays[n] for n in tensors}, tmp_path / "one.safetensors")
        assert (tmp_path / "ck" / shard).read_bytes() == (tmp_path / "one.safetensors").read_bytes()
    assert index["metadata"] == {"total_size": sum(a.nbytes for a in arrays.values()), "m": "1"}
    # one file: the metadata goes in it
    assert save_sharded(arrays, tmp_path / "one", metadata={"m": "1"}) == ["model.safetensors"]
    save_file(arrays, tmp_path / "ref.safetensors", metadata={"m": "1"})
    assert (tmp_path / "one" / "model.safetensors").read_bytes() == (
        tmp_path / "ref.safetensors"
    ).read_bytes()


def test_write_sharded_takes_bytes_memoryviews_and_arrays_once_each_in_order(
    tmp_path: Path,
) -> None:
    entries = [("a", "F32", (4,)), ("b", "U8", (3,)), ("c", "I16", (2, 2))]
    given_data = {
        "a": np.arange(4, dtype=np.float32),
        "b": b"xyz",
        "c": memoryview(np.arange(4, dtype="<i2").tobytes()),
    }
    calls: list[str] = []

    def data(name: str) -> Any:
        calls.append(name)
        return given_data[name]

    names = write_sharded(entries, data, tmp_path, max_shard_size=16, prefix="w")
    assert names == [
        "w-00001-of-00002.safetensors",
        "w-00002-of-00002.safetensors",
        "w.safetensors.index.json",
    ]
    assert calls == ["a", "b", "c"]
    with tensorfile.open(tmp_path / "w.safetensors.index.json") as ck:
        assert ck.get_tensor("b").tobytes() == b"xyz"
        assert ck.get_tensor("c").tolist() == [[0, 1], [2, 3]]


def test_one_tensor_in_memory_at_a_time(tmp_path: Path) -> None:
    alive: list[weakref.ref[np.ndarray[Any, Any]]] = []
    most = 0

    def data(name: str) -> np.ndarray[Any, Any]:
        nonlocal most
        gc.collect()
        most = max(most, sum(r() is not None for r in alive))
        arr = np.full(1000, float(name[1:]), np.float32)
        alive.append(weakref.ref(arr))
        return arr

    entries = [(f"t{i}", "F32", (1000,)) for i in range(12)]
    # the collections scan only what is made from here on: in a worker of the suite the
    # earlier tests' objects made each of them a second
    gc.freeze()
    try:
        write_sharded(entries, data, tmp_path, max_shard_size=10_000)
    finally:
        gc.unfreeze()
    assert most == 0  # no earlier tensor was kept while the next one was asked for


@pytest.mark.parametrize(
    ("entries", "kwargs", "match"),
    [
        ([("a", "F99", (1,))], {}, "unknown dtype"),
        ([("a", "F32", (-1,))], {}, "bad shape"),
        ([("a", "F32", (1,)), ("a", "F32", (1,))], {}, "twice"),
        ([("", "F32", (1,))], {}, "non-empty"),
        ([("a", "F32", (1,))], {"metadata": {"k": 1}}, "text to text"),
        ([("a", "F32", (1,))], {"prefix": "../x"}, "prefix"),
        ([("a", "F32", (1,))], {"prefix": ".hidden"}, "prefix"),
        ([("a", "F32", (1,))], {"max_shard_size": 0}, "at least 1"),
        ([("a", "F32", (1,))], {"max_shard_size": "5GB"}, "number of bytes"),
        ([("a", "F32", (2,))], {}, "not completely written"),  # data gives 4 of 8 bytes
    ],
)
def test_bad_arguments_leave_the_folder_as_it_was(
    tmp_path: Path, entries: Any, kwargs: dict[str, Any], match: str
) -> None:
    save_sharded({"old": np.ones(4, np.float32)}, tmp_path, max_shard_size=8)
    save_sharded({"x": np.ones(4, np.float32)}, tmp_path / "sub")  # unrelated, untouched
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    options: dict[str, Any] = {"max_shard_size": 100, **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        write_sharded(entries, lambda n: b"\0" * 4, tmp_path, **options)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_torch_bad_tensors_are_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(TensorFileError, match="meta"):
        save_sharded_pt({"m": torch.empty(3, device="meta")}, tmp_path)
    with pytest.raises(TensorFileError, match="sparse"):
        save_sharded_pt({"s": torch.eye(3).to_sparse()}, tmp_path)
    with pytest.raises(TensorFileError):
        save_sharded_pt({"x": [1, 2]}, tmp_path)  # type: ignore[dict-item]
    with pytest.raises(TensorFileError):
        save_sharded_pt([torch.ones(1)], tmp_path)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_failure_mid_save_leaves_the_old_checkpoint(tmp_path: Path) -> None:
    old = {f"l{i}": np.full(100, 1.0, np.float32) for i in range(6)}
    save_sharded(old, tmp_path, max_shard_size="800B")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def data(name: str) -> np.ndarray[Any, Any]:
        if name == "l4":
            raise RuntimeError("boom")
        return np.full(100, 2.0, np.float32)

    entries = [(n, "F32", (100,)) for n in old]
    for limit in (400, 800):  # new names, and the old save's names
        with pytest.raises(RuntimeError, match="boom"):
            write_sharded(entries, data, tmp_path, max_shard_size=limit)
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_stale_files_of_other_layouts_go_only_after_success(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.backup").write_bytes(b"keep me")
    (tmp_path / "other.safetensors").write_bytes(b"not ours")
    save_sharded({"a": np.ones(300, np.float32)}, tmp_path)
    save_sharded(
        {"a": np.ones(300, np.float32), "b": np.ones(300, np.float32)},
        tmp_path,
        max_shard_size="1KB",
    )
    assert set(os.listdir(tmp_path)) == {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        INDEX,
        "model.safetensors.backup",
        "other.safetensors",
    }
    save_sharded({"a": np.ones(3, np.float32)}, tmp_path)  # sharded -> one file
    assert set(os.listdir(tmp_path)) == {
        "model.safetensors",
        "model.safetensors.backup",
        "other.safetensors",
    }


# -- SIGKILL at every step ------------------------------------------------------------------

_CHILD = """
import os, signal, sys
import numpy as np
from tensorfile.safetensors.numpy import save_sharded

folder, value, size, kill_at = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
steps = 0

def step(real):
    def wrapped(*args, **kwargs):
        global steps
        steps += 1
        if steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return wrapped

for name in ("replace", "rename", "unlink", "remove"):
    setattr(os, name, step(getattr(os, name)))
arrays = {f"l{i}": np.full(256, value, np.float32) for i in range(5)}
save_sharded(arrays, folder, max_shard_size=size)
print(steps)
"""


def _save(folder: Path, value: int, size: str, kill_at: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder), str(value), size, str(kill_at)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _arrays(value: float) -> dict[str, np.ndarray[Any, Any]]:
    return {f"l{i}": np.full(256, value, np.float32) for i in range(5)}


def _state(folder: Path) -> float | None:
    """The one value every tensor of the folder's checkpoint has (None: no checkpoint);
    fails when an index names a missing shard or the tensors come from two saves."""
    if not (folder / INDEX).exists() and not (folder / "model.safetensors").exists():
        return None
    # huggingface_hub's rule: the index, else model.safetensors (old shards may linger beside
    # a new single file until the last removal)
    index = folder / INDEX
    with tensorfile.open(index if index.exists() else folder / "model.safetensors") as ck:
        assert sorted(ck.keys()) == sorted(_arrays(0))
        values = {float(v) for n in ck.keys() for v in np.unique(ck.get_tensor(n))}
    assert len(values) == 1, values
    if index.exists() and (folder / "model.safetensors").exists():
        # transformers reads model.safetensors first: it must hold the index's checkpoint
        with tensorfile.open(folder / "model.safetensors") as ck:
            single = {float(v) for n in ck.keys() for v in np.unique(ck.get_tensor(n))}
        assert single == values, f"model.safetensors holds {single}, the index {values}"
    return values.pop()


@pytest.mark.parametrize(
    ("old", "new", "always_whole"),
    [
        ("2KB", "3KB", True),  # 5 shards -> 3: every new name is new in the folder
        ("2KB", "2KB", True),  # the same names: the old shards kept under links until the end
        ("2KB", "1GB", True),  # 5 shards -> one model.safetensors
        ("1GB", "2KB", True),  # one file -> 5 shards
    ],
)
def test_sigkill_at_every_step_leaves_old_or_new(
    tmp_path: Path, old: str, new: str, always_whole: bool
) -> None:
    template = tmp_path / "old"
    save_sharded(_arrays(1), template, max_shard_size=old)
    probe = tmp_path / "probe"
    shutil.copytree(template, probe)
    done = _save(probe, 2, new, 0)
    assert done.returncode == 0, done.stderr
    steps = int(done.stdout)  # renames and removals of a save over an older one
    assert steps > 3 and _state(probe) == 2.0
    seen = set()
    for kill_at in range(1, steps + 1):
        folder = tmp_path / f"k{kill_at}"
        shutil.copytree(template, folder)
        killed = _save(folder, 2, new, kill_at)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        got = _state(folder)
        seen.add(got)
        if always_whole:
            assert got in (1.0, 2.0), kill_at
        # a later save over whatever was left finishes and leaves only its files
        save_sharded(_arrays(3), folder, max_shard_size=new)
        assert _state(folder) == 3.0
        assert not [p for p in os.listdir(folder) if "tensorfile" in p]
    # killed early: the old one; after the new index's rename (old files being removed): the
    # new one (with the old save's names, its index's rename is the last step)
    assert {1.0, 2.0} <= seen if always_whole else 1.0 in seen


def test_links_an_unreadable_index_may_name_are_kept_and_others_removed(tmp_path: Path) -> None:
    """A save removes the hidden links of its own prefix that no index names, not those of
    another prefix's shards, and none while an index of the folder cannot be read (it may
    name any of them); a symbolic link or a folder among them is never followed or fails
    the save."""
    tensors = {"a": np.zeros(300, np.float32), "b": np.ones(300, np.float32)}
    save_sharded(tensors, str(tmp_path), max_shard_size="1KB")
    mine, theirs = tmp_path / ".tensorfile-prev-1", tmp_path / ".tensorfile-prev-2"
    for links in (mine, theirs):
        (links / "sub").mkdir(parents=True)
        (links / "model-00001-of-00002.safetensors").write_bytes(b"old")
        (links / "optim.safetensors").write_bytes(b"old")
    (theirs / "escape").symlink_to(tmp_path / "model-00002-of-00002.safetensors")
    (tmp_path / "optim.safetensors.index.json").write_text("{not json")
    save_sharded(tensors, str(tmp_path), max_shard_size="1KB")
    assert sorted(os.listdir(mine)) == ["model-00001-of-00002.safetensors", "optim.safetensors",
                                        "sub"]  # fmt: skip
    (tmp_path / "optim.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"x": ".tensorfile-prev-2/optim.safetensors"}})
    )
    save_sharded(tensors, str(tmp_path), max_shard_size="1KB")
    assert sorted(os.listdir(mine)) == ["optim.safetensors", "sub"]
    assert sorted(os.listdir(theirs)) == [  # (named by optim's index: all kept)
        "escape", "model-00001-of-00002.safetensors", "optim.safetensors", "sub"]  # fmt: skip
    assert (tmp_path / "model-00002-of-00002.safetensors").exists()
