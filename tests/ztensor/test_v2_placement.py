"""Where the zTensor v2 writer puts blobs, and what compression costs: with the default
placement a file written with ``compression="zstd"`` is never bigger than the same tensors
raw (realistic checkpoints with many small tensors, converted from a torch .pt and from
safetensors; random sizes and contents; incompressible parts, tied weights); a part zstd
cannot shrink is kept raw; large raw parts keep their 64 KiB boundary and zero-copy views;
the files read in ztensor 2.1.2; an explicit ``align`` that makes compression cost space
warns (a ZTensorWarning, and a line on the CLI's stderr).
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfile import ztensor
from tensorfile.core.errors import ZTensorWarning
from tensorfile.ops import convert
from tensorfile.safetensors.numpy import save_file as save_safetensors
from tests.ztensor import zt2

CLI = [sys.executable, "-m", "tensorfile.cli.app"]


def checkpoint(layers: int = 12, width: int = 256, seed: int = 0) -> dict[str, torch.Tensor]:
    """A small transformer's state dict: per layer two layer norms (weight ones, bias zeros:
    as initialised), attention and MLP biases (random) and weights; an embedding, tied to
    the head, and an incompressible int32 table (random 32-bit hashes)."""
    g = torch.Generator().manual_seed(seed)
    sd: dict[str, torch.Tensor] = {}
    for i in range(layers):
        p = f"layers.{i}."
        sd[p + "ln1.weight"] = torch.ones(width)
        sd[p + "ln1.bias"] = torch.zeros(width)
        sd[p + "ln2.weight"] = torch.ones(width) + 0.01 * torch.randn(width, generator=g)
        sd[p + "ln2.bias"] = 0.01 * torch.randn(width, generator=g)
        sd[p + "attn.qkv.bias"] = torch.randn(3 * width, generator=g)
        sd[p + "mlp.fc1.bias"] = torch.randn(4 * width, generator=g)
        sd[p + "mlp.fc2.bias"] = torch.randn(width, generator=g).to(torch.bfloat16)
        sd[p + "attn.scale"] = torch.tensor(0.125)
        if i % 4 == 0:
            sd[p + "mlp.fc1.weight"] = torch.randn(4 * width, width, generator=g)
    sd["embed.weight"] = torch.randn(1000, width, generator=g).to(torch.float16)
    sd["head.weight"] = sd["embed.weight"]  # tied
    table = np.random.default_rng(seed).integers(0, 1 << 32, 1 << 16, dtype=np.uint32)
    sd["vocab.map"] = torch.from_numpy(table.view(np.int32))
    return sd


def _size(path: Path) -> int:
    return path.stat().st_size


def _blobs(path: Path) -> dict[str, Any]:
    with ztensor.open(path) as f:
        return {n: f.info(n).data for n in f.keys()}


@pytest.mark.parametrize("source", ["pt", "safetensors"])
def test_zstd_never_bigger_than_raw_on_a_small_tensor_checkpoint(
    tmp_path: Path, source: str
) -> None:
    sd = checkpoint()
    src = tmp_path / f"m.{source}"
    if source == "pt":
        torch.save(sd, src)
    else:
        sd = {k: v.clone() for k, v in sd.items()}  # safetensors refuses shared storage
        save_safetensors({k: _array(v, source) for k, v in sd.items()}, str(src))
    data = sum(len(_bytes(v, source)) for k, v in sd.items() if k != "head.weight")
    raw, packed = tmp_path / "raw.zt", tmp_path / "zstd.zt"
    r_raw = convert(src, raw, to="zt2")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ZTensorWarning)  # the default placement never warns
        r_zstd = convert(src, packed, to="zt2", compression="zstd")
    assert r_zstd.bytes_out == _size(packed) <= r_raw.bytes_out == _size(raw)
    # the file: zstd wrote about twice the tensor data; now it is at most the data
    assert _size(packed) < data + 64 * 1024
    assert _size(packed) < 0.6 * _size(raw)  # (raw: the canonical layout, every blob on 64 KiB)
    # raw file: canonical 64 KiB placement; packed file: encoded and small blobs on 4096,
    # the large raw (incompressible) table on 64 KiB, read zero-copy
    assert all(c.range.start % 65536 == 0 for c in _blobs(raw).values())
    blobs = _blobs(packed)
    assert all(c.range.start % 4096 == 0 for c in blobs.values())
    assert blobs["vocab.map"].encoding == "raw" and blobs["vocab.map"].range.start % 65536 == 0
    assert blobs["layers.0.ln1.weight"].encoding == "zt.zstd-seekable/1"
    starts = sorted(c.range.start for c in blobs.values())
    assert any(s % 65536 for s in starts), "small blobs are packed on 4096, not 64 KiB"
    with ztensor.open(packed) as f:
        view = f.view("vocab.map")
        assert view.flags.owndata is False and view.flags.writeable is False
        assert np.array_equal(view, sd["vocab.map"].numpy())
        if source == "pt":  # tied weights stay one blob, compressed or not
            assert f.info("head.weight").data.range == f.info("embed.weight").data.range
        for name, value in sd.items():
            assert f.get_tensor(name).tobytes() == _bytes(value, source), name
    # ztensor 2.1.2 reads the packed file part for part
    peer = zt2.read(packed)
    assert sorted(peer["objects"]) == sorted(sd)
    for name, value in sd.items():
        got = peer["objects"][name]["parts"]["data"]["bytes"].tobytes()
        assert got == _bytes(value, source), name


def _array(value: torch.Tensor, source: str) -> np.ndarray[Any, Any]:
    """A tensor of ``checkpoint()`` as the source holds it (bfloat16 as float32 through
    numpy's safetensors writer)."""
    if value.dtype == torch.bfloat16:
        return value.float().numpy() if source == "safetensors" else value.view(torch.int16).numpy()
    return value.numpy()


def _bytes(value: torch.Tensor, source: str) -> bytes:
    return _array(value, source).tobytes()


def test_cli_reports_the_smaller_file(tmp_path: Path) -> None:
    src = tmp_path / "m.pt"
    torch.save(checkpoint(layers=4), src)
    sizes = {}
    for opts in ([], ["--compression", "zstd"]):
        dst = tmp_path / f"o{len(opts)}.zt"
        done = subprocess.run(
            [*CLI, "convert", str(src), str(dst), "--to", "zt2", *opts, "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert "warning" not in done.stderr
        sizes[len(opts)] = _size(dst)
    assert sizes[2] <= sizes[0]


ZSTD_64K = ["--compression", "zstd", "--align", "65536"]


def test_explicit_align_that_costs_space_warns(tmp_path: Path) -> None:
    tensors = {f"b{i}": np.full(100, i, np.float32) for i in range(20)}
    path = tmp_path / "a.zt"
    with pytest.warns(ZTensorWarning, match=r"align=65536 with compression writes"):
        ztensor.save_file(tensors, path, version=2, compression="zstd", align=65536)
    assert _size(path) > 20 * 65536  # the user's choice is kept
    with warnings.catch_warnings():
        warnings.simplefilter("error", ZTensorWarning)
        ztensor.save_file(tensors, path, version=2, compression="zstd", align=4096)
        ztensor.save_file(tensors, path, version=2, align=65536)  # raw: no compression
    src = tmp_path / "m.safetensors"
    save_safetensors(tensors, str(src))
    done = subprocess.run(
        [*CLI, "convert", str(src), str(tmp_path / "o.zt"), "--to", "zt2", *ZSTD_64K],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "warning:" in done.stderr and "align=65536 with compression" in done.stderr


def test_a_part_zstd_cannot_shrink_is_kept_raw(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    tensors = {
        "w_noise": rng.integers(0, 256, 1 << 20, dtype=np.uint8),  # 1 MiB, incompressible
        "tiny": np.arange(3, dtype=np.int8),
        "zeros": np.zeros(1 << 18, np.float32),
    }
    raw, packed = tmp_path / "raw.zt", tmp_path / "zstd.zt"
    ztensor.save_file(tensors, raw, version=2, checksum="xxh3")
    ztensor.save_file(tensors, packed, version=2, checksum="xxh3", compression="zstd")
    assert _size(packed) <= _size(raw)
    blobs = _blobs(packed)
    assert blobs["w_noise"].encoding == "raw" and blobs["w_noise"].range.start % 65536 == 0
    assert blobs["tiny"].encoding == "raw" and blobs["tiny"].range.start % 4096 == 0
    assert blobs["zeros"].encoding == "zt.zstd-seekable/1"
    with ztensor.open(packed) as f:
        assert f.verify_all() == (3, 0)
        for name, value in tensors.items():
            assert np.array_equal(f.get_tensor(name), value)


def test_many_incompressible_64k_multiples_after_a_compressible_one(tmp_path: Path) -> None:
    # a part that compresses a little, then raw parts whose size is a multiple of 64 KiB:
    # the raw file gains nothing from rounding, so the manifest bytes the compressed part
    # adds must be paid for by the placement
    rng = np.random.default_rng(2)
    small = np.round(rng.standard_normal(25_000), 1).astype(np.float32)
    tensors = {"a": small} | {
        f"n{i}": rng.integers(0, 256, 65536 * (i + 1), dtype=np.uint8) for i in range(6)
    }
    raw, packed = tmp_path / "raw.zt", tmp_path / "zstd.zt"
    ztensor.save_file(tensors, raw, version=2)
    ztensor.save_file(tensors, packed, version=2, compression="zstd")
    assert _size(packed) <= _size(raw)


KINDS = ["zeros", "normal", "bytes", "rounded", "repeat"]


def _tensor(kind: str, n: int, seed: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    if kind == "zeros":
        return np.zeros(n, np.float32)
    if kind == "normal":
        return rng.standard_normal(n).astype(np.float32)
    if kind == "bytes":
        return rng.integers(0, 256, n * 4, dtype=np.uint8)
    if kind == "rounded":
        return np.round(rng.standard_normal(n), 2).astype(np.float16)
    return np.tile(rng.standard_normal(7).astype(np.float32), n // 7 + 1)[:n]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    specs=st.lists(
        st.tuples(
            st.sampled_from(KINDS),
            st.one_of(
                st.integers(0, 3000),
                st.integers(3000, 70_000),
                st.sampled_from([16384, 16384 * 4, 16384 * 8 - 1, 16384 * 8 + 1]),
            ),
        ),
        min_size=1,
        max_size=24,
    ),
    tie=st.booleans(),
    checksum=st.sampled_from([None, "xxh3"]),
)
def test_random_sizes_zstd_never_bigger_than_raw(
    tmp_path: Path, specs: list[tuple[str, int]], tie: bool, checksum: str | None
) -> None:
    tensors = {f"t{i:02d}": _tensor(k, n, i) for i, (k, n) in enumerate(specs)}
    if tie:
        tensors["tied"] = tensors["t00"].copy()
    raw, packed = tmp_path / "raw.zt", tmp_path / "zstd.zt"
    ztensor.save_file(tensors, raw, version=2, checksum=checksum)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ZTensorWarning)
        ztensor.save_file(tensors, packed, version=2, checksum=checksum, compression="zstd")
    assert _size(packed) <= _size(raw)
    with ztensor.open(packed) as f:
        for name, value in tensors.items():
            got = f.get_tensor(name)
            assert got.dtype == value.dtype and got.tobytes() == value.tobytes(), name
