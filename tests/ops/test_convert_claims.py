"""``tensorfile convert`` sizes nothing from a shape the source file does not back: a
131 KB zTensor v2 file whose object claims a shape of 2**41 bytes used to make convert
preallocate its output (posix_fallocate of 44 GB of real disk) before it refused the object.

Each conversion runs in a process that may write no file past 16 MiB (``RLIMIT_FSIZE``, its
signal ignored): a write or a preallocation past the limit fails there with ``EFBIG`` ("File
too large") instead of filling the disk, so the test sees it; convert must fail first, with
tensorfile's own error, and leave no file behind.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.ztensor import zt2
from tests.ztensor.test_v2_hostile import assemble, dense, seekable

LIMIT = 16 << 20
_LIMITED = (
    "import resource, signal, sys\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    f"resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))\n"
    "from tensorfile.cli.app import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
HUGE = [2**36, 32]  # 2**41 elements: terabytes for 34 bytes of part
PART = {"dtype": "u8", "bytes": bytes(34)}
TARGETS = [("out.safetensors",), ("ck", "--shard-size", "1MB"), ("out.zt",), ("out.npz",)]


def _convert_limited(src: Path, *dst: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tensorfile convert src dst...`` in ``cwd``, no file of it past :data:`LIMIT`."""
    return subprocess.run(
        [sys.executable, "-c", _LIMITED, "convert", str(src), *dst],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def _refused(src: Path, tmp_path: Path, target: tuple[str, ...], *message: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    done = _convert_limited(src, *target, cwd=out)
    assert done.returncode != 0
    assert "File too large" not in done.stderr and "internal error" not in done.stderr
    assert done.stderr.startswith("tensorfile: error: "), done.stderr
    for part in message:
        assert part in done.stderr, done.stderr
    assert [p.name for p in out.rglob("*") if not p.is_dir()] == []  # not even a temp file


def _zt2_file(path: Path, objects: dict[str, Any]) -> Path:
    plain = {"dtype": "f32", "bytes": np.arange(4, dtype=np.float32).tobytes()}
    zt2.write(path, {"w": {"shape": [4], "parts": {"data": plain}}, **objects}, canonical=False)
    return path


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t[0])
def test_a_ggml_layout_claiming_a_huge_shape_is_refused_before_anything_is_written(
    tmp_path: Path, target: tuple[str, ...]
) -> None:
    src = _zt2_file(
        tmp_path / "bigclaim.zt",
        {"big": {"shape": HUGE, "layout": "gguf.q8_0/1", "parts": {"data": PART}}},
    )
    assert src.stat().st_size < 1 << 20
    _refused(src, tmp_path, target, "tensor 'big'", "parts hold 34 bytes", "claims shape")


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t[0])
def test_an_extension_layout_is_refused_before_anything_is_written(
    tmp_path: Path, target: tuple[str, ...]
) -> None:
    """A layout tensorfile does not interpret cannot be converted to any format: said
    before the output is sized from its shape, with what can be done instead."""
    src = _zt2_file(
        tmp_path / "ext.zt",
        {"ext": {"shape": HUGE, "layout": "quantized_4bit", "parts": {"data": PART}}},
    )
    _refused(
        src,
        tmp_path,
        target,
        "tensor 'ext'",
        "extension layout 'quantized_4bit'",
        "ExtensionTensor",
    )


def test_a_decoded_length_zstd_cannot_reach_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    import zstandard

    frame = zstandard.ZstdCompressor(write_checksum=True).compress(b"\x07" * 64)
    stream = seekable([frame], [64])
    claimed = 2**40
    obj = dense("u8", [claimed], 4096, len(stream))
    obj["parts"]["data"].update(encoding="zt.zstd-seekable/1", decoded_length=claimed)
    src = tmp_path / "bomb.zt"
    src.write_bytes(assemble({"objects": {"t": obj}}, {4096: stream}))
    _refused(src, tmp_path, ("out.safetensors",), "tensor 't'", "zstd expands at most")


def test_a_decoded_length_within_zstd_s_reach_reserves_nothing_before_it_is_decoded(
    tmp_path: Path,
) -> None:
    """A part whose claim zstd could reach (40 MB from 2 KB) is only found out by decoding
    it: the safetensors writer reserves a tensor's region when its data is in hand, never
    from the specs, so the lie is an error before a byte of the output is reserved."""
    import zstandard

    data = np.random.default_rng(0).integers(0, 256, 2000, dtype=np.uint8).tobytes()
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(data)
    stream = seekable([frame], [2000])
    claimed = 40_000_000
    obj = dense("u8", [claimed], 4096, len(stream))
    obj["parts"]["data"].update(encoding="zt.zstd-seekable/1", decoded_length=claimed)
    src = tmp_path / "lie.zt"
    src.write_bytes(assemble({"objects": {"t": obj}}, {4096: stream}))
    for target in [("out.safetensors",), ("ck", "--shard-size", "100MB")]:
        _refused(src, tmp_path, target, "tensor 't'")
        shutil.rmtree(tmp_path / "out")


def test_a_dtype_the_destination_lacks_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """zTensor v1.0 has no float8: the tensor is refused before the 20 MB tensor named
    before it is written (it used to be written first, past the limit here)."""
    import ml_dtypes

    from tensorfile.safetensors.numpy import save_file

    src = tmp_path / "m.safetensors"
    save_file(
        {
            "a": np.zeros(5_000_000, np.float32),
            "z": np.zeros(4, np.float32).astype(ml_dtypes.float8_e4m3fn),
        },
        str(src),
    )
    _refused(src, tmp_path, ("out.zt",), "tensor 'z'", "float8_e4m3fn has no zTensor v1.0")
