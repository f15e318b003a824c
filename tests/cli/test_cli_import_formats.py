"""Every command reads what convert reads: ``inspect``, ``id``, ``id --content``,
``summary``, ``diff`` and ``verify`` on PyTorch pickles, ``.npz`` and ``.npy`` files (they
go through the format registry like any tensor file), and ``id --content`` of a convert's
source equals its destination's."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.helpers.cli import assert_one_error, run, run_json


def _files(tmp_path: Path) -> dict[str, Path]:
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(5, dtype=np.int64)
    torch.save({"w": torch.from_numpy(w), "b": torch.from_numpy(b)}, tmp_path / "m.pt")
    np.savez(tmp_path / "m.npz", w=w, b=b)
    np.savez_compressed(tmp_path / "c.npz", w=w, b=b.astype(">i8"))
    np.save(tmp_path / "w.npy", w)
    return {
        "pytorch": tmp_path / "m.pt",
        "npz": tmp_path / "m.npz",
        "npz-compressed": tmp_path / "c.npz",
        "npy": tmp_path / "w.npy",
    }


@pytest.mark.parametrize("kind", ["pytorch", "npz", "npz-compressed", "npy"])
def test_every_command_reads_the_import_formats(tmp_path: Path, capsys: Any, kind: str) -> None:
    path = _files(tmp_path)[kind]
    fmt = kind.split("-")[0]
    count = 1 if fmt == "npy" else 2
    doc = run_json(capsys, "inspect", path)
    assert (doc["format"], doc["tensor_count"]) == (fmt, count)
    ident = run_json(capsys, "id", path)
    assert (ident["format"], ident["tensor_count"]) == (fmt, count)
    content = run_json(capsys, "id", "--content", path)
    dst = tmp_path / f"{kind}.safetensors"
    assert run(capsys, "convert", path, dst).code == 0
    assert run_json(capsys, "id", "--content", dst)["content_hash"] == content["content_hash"]
    summary = run(capsys, "summary", path)
    assert summary.code == 0 and fmt in summary.out
    verified = run(capsys, "verify", path)
    assert verified.code == 0, verified
    same = run(capsys, "diff", path, dst)
    assert same.code == 0 and "identical" in same.out


def test_diff_between_import_formats_finds_differences(tmp_path: Path, capsys: Any) -> None:
    files = _files(tmp_path)
    assert run(capsys, "diff", files["pytorch"], files["npz"]).code == 0
    np.savez(tmp_path / "other.npz", w=np.zeros((3, 4), np.float32), b=np.arange(5))
    assert (
        run(capsys, "diff", files["npz"], tmp_path / "other.npz", "--data", "--fail-on-diff").code
        == 1
    )


def test_a_refused_pickle_is_one_error_line(tmp_path: Path, capsys: Any) -> None:
    torch.save({"w": torch.ones(2), "opt": {"when": datetime.date(2026, 1, 1)}}, tmp_path / "d.pt")
    for cmd in (("inspect",), ("id", "--content"), ("verify",)):
        message = assert_one_error(run(capsys, *cmd, tmp_path / "d.pt"))
        assert "the pickle names datetime.date, which tensorfile's pickle" in message, message
