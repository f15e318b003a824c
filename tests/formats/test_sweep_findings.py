"""What this session's own hostile sweep found after the fixes for issue 10, each kept fixed:
arguments that raised builtin errors instead of tensorfile's own."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile import dataset, ztensor
from tensorfile.errors import InvalidArgumentError
from tensorfile.safetensors import numpy as st_numpy
from tensorfile.safetensors import safe_open

ARRAYS = {"a": np.zeros(3, np.float32)}


@pytest.mark.parametrize(
    "call",
    [
        lambda: st_numpy.save_file(ARRAYS, "\x00"),
        lambda: st_numpy.save_file(ARRAYS, b"/tmp/x.safetensors"),
        lambda: st_numpy.save_file(ARRAYS, None),
        lambda: st_numpy.save_file(ARRAYS, ""),
        lambda: dataset.open(None),
        lambda: tensorfile.open(np.zeros(3, np.uint8)),
        lambda: ztensor.COOTensor(np.ones(2, np.float32), np.array([0, 1]), (2, 2)),
    ],
    ids=["nul-path", "bytes-path", "none-path", "empty-path", "dataset-none", "ndarray", "coo"],
)
def test_bad_arguments_are_invalid_argument_errors(call: Callable[[], Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        call()


def test_str_subclasses_in_metadata_are_written_as_text(tmp_path: Path) -> None:
    class Text(str):
        pass

    path = tmp_path / "m.safetensors"
    st_numpy.save_file(ARRAYS, path, metadata={Text("k"): Text("v")})
    with safe_open(str(path), "np") as f:
        assert f.metadata() == {"k": "v"}


def test_tensors_without_data_are_refused_by_name() -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    from tensorfile.safetensors import torch as st_torch

    with pytest.raises(InvalidArgumentError, match="meta device"):
        st_torch.save({"a": torch.zeros(3, device="meta")})
    with warnings.catch_warnings():  # torch's own note that nested tensors are a prototype
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    with pytest.raises(InvalidArgumentError, match="nested"):
        st_torch.save({"a": nested})
