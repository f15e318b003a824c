"""Issue 24, item 4: ``inspect`` offsets mean one thing, absolute file offsets, for every
format (they once were relative to the data section for safetensors and GGUF, absolute for
zTensor, and absolute in the demo), said so in the column header; ``--json`` has both the
absolute ``offset`` and the header's own ``data_offsets``.

What the user did: ``tensorfile inspect`` on files written by the reference libraries and
by tensorfile, then looked at the bytes at the offsets shown (``dd skip=...``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import safetensors.numpy as ref_st
import ztensor as ref_zt1

from tensorfile import ztensor
from tests.helpers.checkpoints import write_gguf
from tests.helpers.cli import run, run_json, table_rows

ROOT = Path(__file__).resolve().parents[2]
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

TENSORS = {
    "a.weight": np.arange(24, dtype=np.float32).reshape(4, 6),
    "a.bias": np.arange(6, dtype=np.float16),
    "b.ids": np.arange(5, dtype=np.int32) - 2,
}


def _write(kind: str, path: Path) -> Path:
    if kind == "safetensors":  # the reference writer
        ref_st.save_file(TENSORS, str(path))
    elif kind == "zt-v1":  # ztensor 1.0.1's writer
        w = ref_zt1.Writer(str(path))
        for name, value in TENSORS.items():
            w.add_tensor(name, value)
        w.finalize()
    elif kind == "zt-v2":
        ztensor.save_file(TENSORS, str(path), version=2)
    elif kind == "gguf":  # the reference gguf writer
        write_gguf(path, TENSORS)
    return path


def _shown(out: str) -> dict[str, tuple[int, int]]:
    """name -> the [start, end) the tensor table shows."""
    rows = table_rows(out, 5)
    found = {}
    for name, _dtype, _shape, _bytes, offsets in rows:
        m = re.fullmatch(r"\[(\d+), (\d+)\)", offsets)
        assert m, offsets
        found[name] = (int(m.group(1)), int(m.group(2)))
    return found


def _header_offsets(kind: str, path: Path) -> dict[str, list[int]]:
    """Each tensor's offsets as its file's header states them, read without tensorfile."""
    raw = path.read_bytes()
    if kind == "safetensors":
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + n])
        return {k: v["data_offsets"] for k, v in header.items() if k != "__metadata__"}
    if kind == "gguf":
        r = gguf.GGUFReader(str(path))
        base = int(r.data_offset)
        return {
            t.name: [int(t.data_offset) - base, int(t.data_offset) - base + int(t.n_bytes)]
            for t in r.tensors
        }
    return {}


@pytest.mark.parametrize("kind", ["safetensors", "zt-v1", "zt-v2", "gguf"])
def test_inspect_offsets_are_absolute_file_offsets(tmp_path: Path, capsys: Any, kind: str) -> None:
    path = _write(kind, tmp_path / f"m.{kind}")
    r = run(capsys, "inspect", path)
    assert r.code == 0, r.err
    header_line = next(line for line in r.out.splitlines() if "name" in line and "dtype" in line)
    assert "file offsets" in header_line
    shown = _shown(r.out)
    raw = path.read_bytes()
    for name, (start, end) in shown.items():
        # the bytes at the offsets shown are the tensor's (GGUF: in the file's byte order)
        assert raw[start:end] == TENSORS[name].tobytes(), (kind, name, start, end)
    doc = run_json(capsys, "inspect", path)
    header = _header_offsets(kind, path)
    for t in doc["tensors"]:
        start, end = shown[t["name"]]
        assert t["offset"] == start
        assert t["byte_length"] == end - start
        if header:  # relative to the data section, as the header states them
            assert t["data_offsets"] == header[t["name"]]
            assert t["data_offsets"] != [start, end]
        else:  # zTensor's manifests state absolute offsets
            assert t["data_offsets"] == [start, end]


def test_inspect_offsets_of_a_zstd_v2_file(tmp_path: Path, capsys: Any) -> None:
    """A compressed part: the offsets are those of its stored (compressed) bytes."""
    path = tmp_path / "m.zt"
    big = {"w": np.zeros((256, 64), np.float32), **TENSORS}
    ztensor.save_file(big, str(path), version=2, compression="zstd")
    r = run(capsys, "inspect", path)
    raw = path.read_bytes()
    shown = _shown(r.out)
    start, end = shown["w"]
    assert raw[start : start + 4] == ZSTD_MAGIC
    assert end - start < big["w"].nbytes
    doc = run_json(capsys, "inspect", path)
    assert {t["name"]: t["offset"] for t in doc["tensors"]} == {n: s for n, (s, _) in shown.items()}


def test_demo_shows_absolute_offsets_and_says_so(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    head = next(line for line in lines if line.startswith("tensor "))
    assert head.rstrip().endswith("file offsets")
    row = next(line for line in lines if line.startswith("embed.weight "))
    m = re.search(r"\[(\d+), (\d+)\)$", row)
    assert m
    start, end = int(m.group(1)), int(m.group(2))
    path = tmp_path / "model.safetensors"
    raw = path.read_bytes()
    want = ref_st.load_file(str(path))["embed.weight"]
    assert raw[start:end] == want.tobytes()
    n = int.from_bytes(raw[:8], "little")
    relative = json.loads(raw[8 : 8 + n])["embed.weight"]["data_offsets"]
    assert f"data section at byte {8 + n:,}" in done.stdout
    assert f"embed.weight's are {relative}" in done.stdout
