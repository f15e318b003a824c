"""zTensor benchmarks: tensorfile.ztensor against the ``ztensor`` 1.0.1 package, and against
tensorfile's own safetensors path on the same data.

Rows (the same 16 x 64 MiB float32 tensors as the safetensors rows; ``--quick`` shrinks them):

* ``zt_save_raw`` / ``zt_save_zstd``: ``ztensor.Writer`` + ``add_tensor(compress=...)``
  against ``tensorfile.ztensor.save_file(compression=...)``.
* ``zt_load_raw`` / ``zt_load_zstd``: materialised reads, owned arrays:
  ``np.array(reader.read_tensor(name))`` for the reference (its ``read_tensor`` hands out a
  view of its mapping for raw data, so it is copied to compare like with like; compressed
  data it decodes into its own buffer, which is kept as is), ``tensorfile.ztensor.load_file``.
* ``zt_view_raw``: zero-copy: the reference's ``read_tensor`` views against
  ``tensorfile.ztensor.open(path).view(name)``.
* ``zt_save_raw_vs_st`` / ``zt_load_raw_vs_st``: the issue's "≥ 90% of tensorfile's
  safetensors speed": here the "reference" column is tensorfile's safetensors ``save_file`` /
  ``load_file`` of the same arrays and the ratio is safetensors time ÷ zTensor time.
* ``zt_open_manifest``: open + list the names of a file with 100,000 tiny tensors (10,000
  quick): ``ztensor.Reader(path).tensor_names`` against ``tensorfile.ztensor.open(path)
  .keys()``. ``zt_open_big`` opens the 1 GiB raw file the same way: its time depends on the
  16-entry manifest, not on the gigabyte of data.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import ztensor as zref

import tensorfile.safetensors.numpy
import tensorfile.ztensor
from benchmarks.common import N_BIG, Config, Result, alternate, check, page_in

ZT_BENCHMARKS = (
    "zt_save_raw",
    "zt_save_raw_vs_st",
    "zt_load_raw",
    "zt_load_raw_vs_st",
    "zt_view_raw",
    "zt_save_zstd",
    "zt_load_zstd",
    "zt_open_manifest",
    "zt_open_big",
)


def _arrays(cfg: Config) -> dict[str, np.ndarray[Any, Any]]:
    page_in(cfg.big_path)
    return tensorfile.safetensors.numpy.load_file(str(cfg.big_path))


def _zt_path(cfg: Config, kind: str) -> Path:
    return cfg.data / f"zt-{kind}-{N_BIG}x{cfg.big_numel * 4 >> 20}MiB.zt"


def _ref_save(arrays: dict[str, Any], path: str, compress: bool) -> None:
    with zref.Writer(path) as w:
        for name, arr in arrays.items():
            w.add_tensor(name, arr, compress=compress)


def _tf_save(arrays: dict[str, Any], path: str, compress: bool) -> None:
    tensorfile.ztensor.save_file(arrays, path, compression="zstd" if compress else None)


def _ref_load(path: str, copy: bool) -> dict[str, Any]:
    with zref.Reader(path) as r:
        names = r.tensor_names
        return {n: (np.array(r.read_tensor(n)) if copy else r.read_tensor(n)) for n in names}


def _tf_views(path: str) -> dict[str, Any]:
    with tensorfile.ztensor.open(path) as f:
        return {n: f.view(n) for n in f.keys()}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)


def ensure_file(cfg: Config, kind: str) -> Path:
    """The reference-written 1 GiB zTensor file (raw or zstd), generated once."""
    path = _zt_path(cfg, kind)
    if not path.exists():
        _ref_save(_arrays(cfg), str(path), compress=kind == "zstd")
    page_in(path)
    return path


def bench_save(cfg: Config, compress: bool) -> Result:
    arrays = _arrays(cfg)
    kind = "zstd" if compress else "raw"
    ref_out, tf_out = str(cfg.data / f"out-ref-{kind}.zt"), str(cfg.data / f"out-tf-{kind}.zt")
    _ref_save(arrays, ref_out, compress)
    _tf_save(arrays, tf_out, compress)
    check(_same(tensorfile.ztensor.load_file(ref_out), arrays), f"zt_save_{kind}: ref file")
    check(_same(_ref_load(tf_out, copy=True), arrays), f"zt_save_{kind}: reference reads ours")
    repeat = cfg.repeat_big if not compress else max(1, min(cfg.repeat_big, 3))
    ref_times, tf_times = alternate(
        lambda: _ref_save(arrays, ref_out, compress),
        lambda: _tf_save(arrays, tf_out, compress),
        repeat,
        setup=os.sync,
    )
    sizes = f"{os.path.getsize(tf_out) / cfg.big_bytes:.3f} of the raw size" if compress else ""
    for out in (ref_out, tf_out):
        Path(out).unlink(missing_ok=True)
    return Result(
        f"zt_save_{kind}",
        f"zTensor save, {N_BIG} x {cfg.big_numel * 4 >> 20} MiB F32, {kind}"
        + (f" (stored: {sizes})" if sizes else ""),
        cfg.big_bytes,
        tf_times,
        ref_times,
    )


def bench_save_vs_st(cfg: Config) -> Result:
    arrays = _arrays(cfg)
    st_out, zt_out = str(cfg.data / "out-tf-st.safetensors"), str(cfg.data / "out-tf-zt.zt")
    ref_times, tf_times = alternate(
        lambda: tensorfile.safetensors.numpy.save_file(arrays, st_out),
        lambda: _tf_save(arrays, zt_out, False),
        cfg.repeat_big,
        setup=os.sync,
    )
    for out in (st_out, zt_out):
        Path(out).unlink(missing_ok=True)
    return Result(
        "zt_save_raw_vs_st",
        "tensorfile safetensors save_file vs tensorfile zTensor save_file, raw",
        cfg.big_bytes,
        tf_times,
        ref_times,
    )


def bench_load(cfg: Config, kind: str) -> Result:
    path = str(ensure_file(cfg, kind))
    expected = _ref_load(path, copy=True)
    check(_same(tensorfile.ztensor.load_file(path), expected), f"zt_load_{kind}: values differ")
    del expected
    gc.collect()
    copy = kind == "raw"
    repeat = cfg.repeat_big if kind == "raw" else max(1, min(cfg.repeat_big, 3))
    ref_times, tf_times = alternate(
        lambda: _ref_load(path, copy=copy),
        lambda: tensorfile.ztensor.load_file(path),
        repeat,
    )
    return Result(
        f"zt_load_{kind}",
        f"zTensor load (owned arrays), {N_BIG} x {cfg.big_numel * 4 >> 20} MiB F32, {kind}",
        cfg.big_bytes,
        tf_times,
        ref_times,
    )


def bench_load_vs_st(cfg: Config) -> Result:
    zt = str(ensure_file(cfg, "raw"))
    st = str(cfg.big_path)
    page_in(cfg.big_path)
    check(
        _same(tensorfile.ztensor.load_file(zt), tensorfile.safetensors.numpy.load_file(st)),
        "zt_load_raw_vs_st: the two files hold different tensors",
    )
    ref_times, tf_times = alternate(
        lambda: tensorfile.safetensors.numpy.load_file(st),
        lambda: tensorfile.ztensor.load_file(zt),
        cfg.repeat_big,
    )
    return Result(
        "zt_load_raw_vs_st",
        "tensorfile safetensors load_file vs tensorfile zTensor load_file, raw",
        cfg.big_bytes,
        tf_times,
        ref_times,
    )


def bench_view(cfg: Config) -> Result:
    path = str(ensure_file(cfg, "raw"))
    check(_same(_tf_views(path), _ref_load(path, copy=False)), "zt_view_raw: views differ")
    ref_times, tf_times = alternate(
        lambda: _ref_load(path, copy=False), lambda: _tf_views(path), cfg.repeat_small
    )
    return Result(
        "zt_view_raw",
        f"zTensor zero-copy views of all {N_BIG} tensors ({cfg.big_bytes >> 20} MiB raw file)",
        cfg.big_bytes,
        tf_times,
        ref_times,
    )


def ensure_manifest_file(cfg: Config) -> Path:
    path = cfg.data / f"zt-manifest-{cfg.n_small}.zt"
    if not path.exists():
        with zref.Writer(str(path)) as w:
            for i in range(cfg.n_small):
                w.add_tensor(
                    f"model.layers.{i // 10}.block.{i % 10}.weight", np.array([i, -i], np.float32)
                )
    page_in(path)
    return path


def _ref_names(path: str) -> list[str]:
    with zref.Reader(path) as r:
        return list(r.tensor_names)


def _tf_names(path: str) -> list[str]:
    with tensorfile.ztensor.open(path) as f:
        return f.keys()


def bench_open(cfg: Config, big: bool) -> Result:
    path = str(ensure_file(cfg, "raw") if big else ensure_manifest_file(cfg))
    check(sorted(_ref_names(path)) == sorted(_tf_names(path)), "zt_open: names differ")
    ref_times, tf_times = alternate(
        lambda: _ref_names(path), lambda: _tf_names(path), cfg.repeat_small
    )
    n = N_BIG if big else cfg.n_small
    return Result(
        "zt_open_big" if big else "zt_open_manifest",
        f"zTensor open + names, {n:,} tensors"
        + (f" ({cfg.big_bytes >> 20} MiB of data)" if big else " (tiny tensors)"),
        Path(path).stat().st_size,
        tf_times,
        ref_times,
    )


def runners(cfg: Config) -> dict[str, Callable[[], Result]]:
    """The zTensor benchmarks by name."""
    return {
        "zt_save_raw": lambda: bench_save(cfg, compress=False),
        "zt_save_raw_vs_st": lambda: bench_save_vs_st(cfg),
        "zt_load_raw": lambda: bench_load(cfg, "raw"),
        "zt_load_raw_vs_st": lambda: bench_load_vs_st(cfg),
        "zt_view_raw": lambda: bench_view(cfg),
        "zt_save_zstd": lambda: bench_save(cfg, compress=True),
        "zt_load_zstd": lambda: bench_load(cfg, "zstd"),
        "zt_open_manifest": lambda: bench_open(cfg, big=False),
        "zt_open_big": lambda: bench_open(cfg, big=True),
    }
