"""``tensorfile.distributed.load`` on one rank (``group=None``): any format tensorfile reads,
any plan entry, and the refusals, in this process (the multi-rank tests spawn their own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tensorfile.distributed import Intervals, LoadCounters, load
from tensorfile.errors import InvalidArgumentError, TensorNotFoundError, UnsupportedError
from tensorfile.safetensors.numpy import save_file
from tensorfile.ztensor import save_file as zt_save_file

ARR = np.arange(10 * 6, dtype=np.float32).reshape(10, 6)


@pytest.mark.parametrize("fmt", ["safetensors", "zstd-ztensor", "raw-ztensor", "npz"])
def test_any_format_gives_numpys_indexing(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "m"
    data = {"w": ARR, "b": np.ones(3, np.int8)}
    if fmt == "safetensors":
        save_file(data, str(path))
    elif fmt == "npz":
        path = tmp_path / "m.npz"
        np.savez(path, **data)
    else:
        zt_save_file(data, str(path), compression="zstd" if fmt.startswith("zstd") else None)
    plan: dict[str, Any] = {"w": (slice(8, 1, -3), [slice(0, 2), (5, 6)]), "b": None}
    got = load(str(path), plan)
    want = ARR[8:1:-3][:, [0, 1, 5]]
    assert got["w"].dtype == torch.float32
    np.testing.assert_array_equal(got["w"].numpy(), want)
    assert got["b"].tolist() == [1, 1, 1]


def test_intervals_counters_and_an_empty_plan(tmp_path: Path) -> None:
    path = str(tmp_path / "m.safetensors")
    save_file({"qkv": ARR, "x": np.zeros(4, np.float32)}, path)
    counts = LoadCounters()
    got = load(path, {"qkv": Intervals(0, [(0, 2), (6, 8)])}, counters=counts)
    np.testing.assert_array_equal(got["qkv"].numpy(), ARR[[0, 1, 6, 7]])
    assert counts.bytes_read == 4 * 6 * 4 and counts.reads == 1
    assert load(path, {}) == {}
    assert sorted(load(path)) == ["qkv", "x"]


@pytest.mark.parametrize(
    ("plan", "kwargs", "error", "words"),
    [
        ({"nope": None}, {}, TensorNotFoundError, "nope"),
        ({"qkv": (99,)}, {}, InvalidArgumentError, "out of range"),
        (["qkv"], {}, InvalidArgumentError, "a plan maps tensor names"),
        ({"qkv": None}, {"timeout": 0}, InvalidArgumentError, "timeout"),
        ({"qkv": None}, {"device": "nonsense"}, InvalidArgumentError, "not a torch device"),
        ({"qkv": None}, {"device": "cuda:7"}, UnsupportedError, "not available"),
        ({3: None}, {}, InvalidArgumentError, "name"),
    ],
)
def test_bad_calls_are_refused_before_any_read(
    tmp_path: Path, plan: Any, kwargs: dict[str, Any], error: type[Exception], words: str
) -> None:
    path = str(tmp_path / "m.safetensors")
    save_file({"qkv": ARR}, path)
    with pytest.raises(error, match=words):
        load(path, plan, **kwargs)


def test_a_missing_checkpoint_names_its_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load(str(tmp_path / "nowhere.safetensors"), None)
