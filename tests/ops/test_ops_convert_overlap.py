"""convert never eats its source: a destination that is, or (a sharded save) holds, a file
the conversion reads is refused before anything is written, by path and by file:// URL,
through the API and the CLI."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorfile import InvalidArgumentError
from tensorfile.ops import convert
from tensorfile.safetensors.numpy import save_file, save_sharded

ARRAYS = {f"t{i}": np.full(300, i, np.float32) for i in range(4)}


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


@pytest.fixture
def ck(tmp_path: Path) -> Path:
    folder = tmp_path / "ck"
    save_sharded(ARRAYS, folder, max_shard_size="2KB")
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    return folder


def _cases(ck: Path) -> list[tuple[str, str, str | None, str | None]]:
    lone = ck / "model.safetensors"
    save_file(ARRAYS, str(lone))  # a lone file inside the checkpoint's folder
    shard = sorted(ck.glob("model-*.safetensors"))[0]
    index = ck / "model.safetensors.index.json"
    return [
        (str(lone), str(ck), "1KB", None),  # a sharded save into the folder holding it
        (str(ck), str(ck), "1KB", None),  # a checkpoint re-sharded onto itself
        (str(ck), str(shard), None, None),  # a checkpoint written over one of its shards
        (str(index), str(shard), None, None),
        (str(ck), str(index), None, "safetensors"),  # over its index
        (f"file://{ck}", f"file://{shard}", None, None),
        (str(shard), f"file://{ck}", "1KB", None),
    ]


def test_a_destination_that_is_or_holds_the_source_is_refused(ck: Path) -> None:
    for src, dst, shard_size, to in _cases(ck):
        before = _digest(ck)
        with pytest.raises(InvalidArgumentError, match=r"which the conversion reads|same file"):
            convert(src, dst, shard_size=shard_size, to=to)
        assert _digest(ck) == before, (src, dst)


def test_the_cli_refuses_it_with_exit_2(ck: Path) -> None:
    for src, dst, shard_size, to in _cases(ck):
        before = _digest(ck)
        args = [src, dst] + (["--shard-size", shard_size] if shard_size else [])
        args += ["--to", to] if to else []
        run = subprocess.run(
            [sys.executable, "-m", "tensorfile.cli.app", "convert", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2 and (
            "conversion reads" in run.stderr or "same file" in run.stderr
        )
        assert _digest(ck) == before


def test_other_destinations_inside_the_folder_are_fine(ck: Path, tmp_path: Path) -> None:
    out = ck / "merged.safetensors"  # not a checkpoint file: nothing the save replaces
    convert(str(ck), str(out))
    convert(str(ck), str(tmp_path / "elsewhere"), shard_size="1KB")
    assert out.is_file() and (tmp_path / "elsewhere" / "model.safetensors.index.json").is_file()
