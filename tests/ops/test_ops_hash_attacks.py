"""Hostile cases of the content id v2 (found by a hostile review of issue 23): BOOL bytes
that are not 0 or 1, zTensor v2 parts that break their logical type's rule."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tensorfile.ops import content_hash


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> str:
    """A safetensors file written by hand: name -> (dtype, shape, data bytes)."""
    header: dict[str, Any] = {}
    data = b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return str(path)


def test_converting_bool_bytes_to_ztensor_v2_keeps_the_content_id(tmp_path: Path) -> None:
    """A safetensors BOOL tensor whose bytes are not all 0/1 (``[0, 2, 1]``): the content id
    hashes the stored bytes, ``convert --to zt2`` normalises them to ``[0, 1, 1]``, so the
    converted file has another content id (zTensor v1.0, npz and safetensors keep it), though
    convert promises that the id is kept."""
    src = _safetensors(tmp_path / "b.safetensors", {"b": ("BOOL", [3], bytes([0, 2, 1]))})
    dst = str(tmp_path / "b.zt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    cli = [sys.executable, "-c", "from tensorfile.cli.app import main; main()"]
    done = subprocess.run([*cli, "convert", src, dst, "--to", "zt2"], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert content_hash(dst) == content_hash(src)


CORPUS = Path(__file__).resolve().parents[1] / "ztensor" / "fixtures" / "v2-conformance"


@pytest.mark.parametrize(
    "fixture", ["reject/bool-invalid-byte.zt", "reject/f4-nonzero-odd-nibble.zt"]
)
@pytest.mark.parametrize("verify", [False, True])
@pytest.mark.filterwarnings("ignore::tensorfile.errors.NoDigestsWarning")  # fixtures: none
def test_the_content_id_refuses_ztensor_v2_data_every_read_refuses(
    fixture: str, verify: bool
) -> None:
    """A zTensor v2 part whose decoded bytes break its logical type's rule (a bool byte of
    2, an f4_e2m1 pad nibble that is not zero) is refused by every read (get_tensor, convert),
    as a CSR part that breaks its rules is refused by the content id too; but the content id
    hashes these bytes as they are stored (even with verify=True), so it gives an id to data
    no reader hands out, and one that depends on bits that carry no value (the pad nibble)."""
    from tensorfile.errors import ZTensorError

    with pytest.raises(ZTensorError, match=r"bool bytes are 0 or 1|nibble"):
        content_hash(str(CORPUS / fixture), verify=verify)
