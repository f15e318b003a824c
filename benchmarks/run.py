"""Benchmark tensorfile against the reference ``safetensors`` library, in one process.

What it measures (full size; ``--quick`` shrinks the files so a smoke test takes seconds):

* ``load_numpy`` / ``load_torch``: ``load_file`` of a page-cached 1 GiB file holding 16
  float32 tensors of 64 MiB each, ``safetensors.{numpy,torch}.load_file`` against
  ``tensorfile.safetensors.{numpy,torch}.load_file``.
* ``save_numpy`` / ``save_torch``: ``save_file`` of the same 16 arrays (the torch row saves
  ``torch.from_numpy`` views of them). Each library overwrites its own output file in the data
  folder (deleted afterwards); ``os.sync()`` runs before every repetition, outside the timing,
  so one run's write-back does not land in the next one's time. Nothing is fsync'ed inside the
  timing. The disk is the noisiest part: rerun, or raise ``--repeat``, before trusting a
  save ratio near its target.
* ``open_header``: ``safe_open(path, "np")`` + ``keys()`` + ``metadata()`` (and closing the
  file) of a file with 100,000 tiny tensors, ``safetensors.safe_open`` against
  ``tensorfile.safetensors.safe_open``.
* ``process_load_numpy`` / ``process_load_torch`` / ``process_load_torch_pread`` (``--only
  load_process`` selects the three): the same loads, each in a fresh interpreter, as a user
  sees them (wall time, load time and peak RSS); see ``benchmarks/process.py``.
* ``cold_load_1g`` / ``warm_load_1g`` / ``cold_load_4shard`` / ``warm_load_4shard`` (``--only
  load_cold`` selects the four): fresh-process loads from a cold and a warm page cache against
  the reference, fastsafetensors and the Run:ai streamer; see ``benchmarks/cold_bench.py``.
* ``feed_iter_arrow`` / ``feed_torch`` / ``feed_small`` / ``feed_s3`` / ``feed_s3_read`` /
  ``feed_resume`` / ``shuffle_quality`` (``--only feed`` selects them): feeding training
  (DataLoader epochs against LitData, MosaicML Streaming, WebDataset, Hugging Face
  ``datasets`` and parquet, of 16 KiB and of 256-byte samples; from S3 through the shard
  cache; resuming mid-epoch; the shuffle's quality); see
  ``benchmarks/feed.py``, ``feed_s3.py``, ``feed_resume.py`` and ``shuffle_quality.py``.
* ``convert_parquet`` / ``convert_hf``: the feed's data in parquet and in a ``save_to_disk``
  folder written as a dataset by ``dataset.from_parquet`` / ``from_hf``, against Hugging Face's
  own converters and ``cp`` of the same bytes; see ``benchmarks/convert_bench.py``.
* ``dcp_save_1g`` / ``dcp_load_1g`` (``--only dcp`` selects both): distributed checkpoints
  (``torch.distributed.checkpoint`` on gloo, a process per rank) with tensorfile's storage
  plugins against torch's and s3torchconnector's; see ``benchmarks/dcp_bench.py``.
* ``rankload_1g`` (``--only rankload``): a 1 GiB checkpoint loaded by 4 gloo ranks with a
  tensor-parallel plan, from HTTP and from a cold disk: ``tensorfile.distributed.load``
  cooperative and alone against the reference's ``get_slice``, and the bytes fetched from
  storage; see ``benchmarks/rankload_bench.py``.
* ``view_all``: ``tensorfile.open(path)`` then ``.view(name)`` of every tensor of the 1 GiB
  file. The reference has no zero-copy equivalent, so only the absolute time is given. The
  views map the file without reading it, so its GB/s is "bytes made available per second",
  not a read speed.

Note on the torch load rows: with the default ``backend="mmap"`` both libraries return tensors
backed by a private memory map of the file, so pages are only read when first touched; that
row times opening and mapping. ``load_torch_pread`` times ``backend="pread"``, where both
return owned tensors holding a copy of the data.

How it runs: the data files are generated once (by the reference library) into ``--data``
(default ``bench-data/`` at the repository root) and reused when their size and header are
as expected; each file is read once before its benchmarks so it is in the page cache. The
first call of each implementation is an untimed warm-up that also checks correctness: the
loaded tensors must equal the reference's and the saved files must be byte-identical. Then
the two implementations run strictly alternately (ref, tf, ref, tf, ...) ``--repeat`` times,
with the garbage collector collected before and disabled during each timed call, and results
freed right after it (outside the timing).

How to read it: the times are medians; ratio = reference median / tensorfile median, so > 1
means tensorfile is faster. The target column holds the project's targets (load_file
>= 2.0, save_file >= 1.0, open of a 100k-tensor header >= 1.0); the torch rows are not in the
targets and show the numpy target in parentheses, for information. GB/s = 1e9 bytes per second
of tensorfile (tensor bytes for load/save/view, header bytes for open_header). The machines
are shared and noisy: compare ratios rather than absolute times, and rerun before believing
a small difference. Nothing here asserts on a time.

Usage (from the repository root: ``benchmarks`` and ``tests`` are imported as packages):
    .venv/bin/python -m benchmarks.run                 # full size, a couple of minutes
    .venv/bin/python -m benchmarks.run --quick         # 64 MiB / 10,000 tensors, repeat 3
    .venv/bin/python -m benchmarks.run --only load_numpy --repeat 9 --json out.json
    .venv/bin/python -m benchmarks.run --only load_process     # fresh-process loads, ~2-3 min
    .venv/bin/python -m benchmarks.run --only cache   # the remote cache (benchmarks/cache_bench.py)
    .venv/bin/python -m benchmarks.run --only load_cold        # cold/warm vs 3 peers, ~10 min
    .venv/bin/python -m benchmarks.run --only feed --repeat 3  # training feeds
    .venv/bin/python -m benchmarks.run --only dcp     # distributed checkpoints, ~5 min
    .venv/bin/python -m benchmarks.run --only rankload  # rank-aware loads, ~10 min
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy
import safetensors.torch
import torch

import tensorfile
import tensorfile.safetensors.numpy
import tensorfile.safetensors.torch
from benchmarks.cache_bench import CACHE_BENCHMARKS, CACHE_GROUP
from benchmarks.cold_bench import COLD_BENCHMARKS, COLD_GROUP, ColdResult
from benchmarks.common import (
    BENCHMARKS,
    N_BIG,
    REPO,
    TARGETS,
    Config,
    Result,
    alternate,
    big_names,
    check,
    files_identical,
    header_bytes,
    make_big,
    make_header,
    page_in,
    timed,
)
from benchmarks.convert_bench import CONVERT_BENCHMARKS
from benchmarks.dcp_bench import DCP_BENCHMARKS, DCP_GROUP, DcpResult
from benchmarks.feed import FEED_BENCHMARKS
from benchmarks.feed_common import FeedResult
from benchmarks.feed_common import markdown as feed_markdown
from benchmarks.feed_resume import RESUME_BENCHMARKS
from benchmarks.feed_s3 import FEED_S3_BENCHMARKS
from benchmarks.pickle_bench import PICKLE_BENCHMARKS, PICKLE_GROUP
from benchmarks.process import PROCESS_BENCHMARKS, PROCESS_GROUP, ProcessResult
from benchmarks.process import markdown as process_markdown
from benchmarks.process import runners as process_runners
from benchmarks.rankload_bench import RANKLOAD_BENCHMARKS, RANKLOAD_GROUP, RankloadResult
from benchmarks.remote_load import LoadResult
from benchmarks.remote_load import markdown as load_markdown
from benchmarks.s3_bench import S3_BENCHMARKS
from benchmarks.shuffle_quality import SHUFFLE_BENCHMARKS, ShuffleQuality
from benchmarks.zt import ZT_BENCHMARKS
from benchmarks.zt import runners as zt_runners
from benchmarks.zt2 import ZT2_BENCHMARKS

PEERS = (
    "safetensors",
    "ztensor",
    "fastsafetensors",
    "runai-model-streamer",
    "mosaicml-streaming",
    "litdata",
    "webdataset",
    "datasets",
    "pyarrow",
    "pyspark",
    "boto3",
    "s3fs",
    "s3torchconnector",
)
"""Distributions whose versions ``--json`` records (the peers the rows compare against)."""

SPARK_BENCHMARKS = ("spark_write", "spark_read", "spark_read_batch64k", "spark_read_floor")
REMOTE_HEADER_BENCHMARKS = ("remote_header_small", "remote_header_big")
REMOTE_BENCHMARKS = (*REMOTE_HEADER_BENCHMARKS, "http_load_1g", "http_load_4g_sharded")
FEED_GROUP = "feed"
"""``--only`` name that selects every training-feed row."""
ALL_BENCHMARKS = (
    BENCHMARKS
    + PROCESS_BENCHMARKS
    + ZT_BENCHMARKS
    + ZT2_BENCHMARKS
    + SPARK_BENCHMARKS
    + REMOTE_BENCHMARKS
    + S3_BENCHMARKS
    + FEED_BENCHMARKS
    + FEED_S3_BENCHMARKS
    + RESUME_BENCHMARKS
    + SHUFFLE_BENCHMARKS
    + CONVERT_BENCHMARKS
    + CACHE_BENCHMARKS
    + PICKLE_BENCHMARKS
    + COLD_BENCHMARKS
    + DCP_BENCHMARKS
    + RANKLOAD_BENCHMARKS
)

# --------------------------------------------------------------------------- benchmarks


def bench_load(cfg: Config, framework: str, backend: str = "mmap") -> Result:
    path = str(cfg.big_path)
    page_in(cfg.big_path)
    ref_load: Callable[[str], dict[str, Any]]
    tf_load: Callable[[str], dict[str, Any]]
    if framework == "numpy":
        ref_load = safetensors.numpy.load_file
        tf_load = tensorfile.safetensors.numpy.load_file
    else:
        ref_load = functools.partial(safetensors.torch.load_file, backend=backend)
        tf_load = functools.partial(tensorfile.safetensors.torch.load_file, backend=backend)

    # Warm-up and correctness check (at most two copies held: 2x the file).
    expected = ref_load(path)
    got = tf_load(path)
    check(sorted(got) == sorted(expected), f"load_{framework}: tensor names differ")
    for name, want in expected.items():
        if framework == "numpy":
            same = got[name].dtype == want.dtype and np.array_equal(got[name], want)
        else:
            same = got[name].dtype == want.dtype and torch.equal(got[name], want)
        check(same, f"load_{framework}: tensor {name!r} differs")
    del expected, got
    gc.collect()

    ref_times, tf_times = alternate(lambda: ref_load(path), lambda: tf_load(path), cfg.repeat_big)
    suffix = "" if backend == "mmap" or framework == "numpy" else f"_{backend}"
    how = {"mmap": "lazy mmap-backed tensors", "pread": "owned copies"}[backend]
    return Result(
        f"load_{framework}{suffix}",
        f"{framework} load_file, {N_BIG} x {cfg.big_numel * 4 >> 20} MiB F32"
        + (f" ({how})" if framework == "torch" else ""),
        cfg.big_bytes,
        tf_times,
        ref_times,
    )


def bench_save(cfg: Config, framework: str) -> Result:
    page_in(cfg.big_path)
    arrays = safetensors.numpy.load_file(str(cfg.big_path))
    ref_out, tf_out = str(cfg.out_path("ref", framework)), str(cfg.out_path("tf", framework))
    tensors: dict[str, Any]
    if framework == "numpy":
        tensors = arrays
        ref_save: Callable[[dict[str, Any], str], None] = safetensors.numpy.save_file
        tf_save: Callable[[dict[str, Any], str], None] = tensorfile.safetensors.numpy.save_file
    else:
        tensors = {name: torch.from_numpy(a) for name, a in arrays.items()}  # shares memory
        ref_save = safetensors.torch.save_file
        tf_save = tensorfile.safetensors.torch.save_file

    # Warm-up and correctness check.
    ref_save(tensors, ref_out)
    tf_save(tensors, tf_out)
    check(
        files_identical(Path(ref_out), Path(tf_out)),
        f"save_{framework}: {ref_out} and {tf_out} differ",
    )
    if framework == "numpy":
        check(files_identical(Path(tf_out), cfg.big_path), f"save_numpy: {tf_out} differs")

    ref_times, tf_times = alternate(
        lambda: ref_save(tensors, ref_out),
        lambda: tf_save(tensors, tf_out),
        cfg.repeat_big,
        setup=os.sync,
    )
    for out in (ref_out, tf_out):  # 2 GiB of disk that nothing reuses
        Path(out).unlink(missing_ok=True)
    return Result(
        f"save_{framework}",
        f"{framework} save_file, {N_BIG} x {cfg.big_numel * 4 >> 20} MiB F32",
        cfg.big_bytes,
        tf_times,
        ref_times,
    )


def bench_open_header(cfg: Config) -> Result:
    path = str(cfg.header_path)
    page_in(cfg.header_path)

    def ref_open() -> tuple[list[str], dict[str, str] | None]:
        with safetensors.safe_open(path, "np") as f:
            return f.keys(), f.metadata()

    def tf_open() -> tuple[list[str], dict[str, str] | None]:
        with tensorfile.safetensors.safe_open(path, "np") as f:
            return f.keys(), f.metadata()

    want, got = ref_open(), tf_open()
    check(len(got[0]) == cfg.n_small, "open_header: wrong number of keys")
    check(got == want, "open_header: keys or metadata differ from the reference")
    del want, got

    ref_times, tf_times = alternate(ref_open, tf_open, cfg.repeat_small)
    return Result(
        "open_header",
        f"safe_open + keys() + metadata(), {cfg.n_small:,} tensors",
        header_bytes(cfg.header_path),
        tf_times,
        ref_times,
    )


def bench_view_all(cfg: Config) -> Result:
    path = cfg.big_path
    page_in(path)

    def views() -> int:
        with tensorfile.open(path) as f:
            names = f.keys()
            return sum(f.view(name).nbytes for name in names)

    check(views() == cfg.big_bytes, "view_all: views do not cover the file's tensors")
    with tensorfile.open(path) as f, safetensors.safe_open(str(path), "np") as ref:
        for name in (big_names()[0], big_names()[-1]):
            check(
                np.array_equal(f.view(name), ref.get_tensor(name)),
                f"view_all: view {name!r} differs from the reference's tensor",
            )
    gc.collect()
    tf_times = [timed(views) for _ in range(cfg.repeat_small)]
    return Result(
        "view_all",
        f"tensorfile.open + view() of all {N_BIG} tensors (no reference)",
        cfg.big_bytes,
        tf_times,
    )


# --------------------------------------------------------------------------- report


def machine_info() -> dict[str, Any]:
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
        "tensorfile": tensorfile.__version__,
        "peers": peer_versions(),
    }


def peer_versions() -> dict[str, str | None]:
    """The installed version of every peer in ``PEERS`` (None where it is not installed)."""
    versions: dict[str, str | None] = {}
    for name in PEERS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds:.4f}" if seconds >= 0.01 else f"{seconds:.6f}"


def markdown(results: list[Result]) -> str:
    head = (
        "| benchmark | reference (s) | tensorfile (s) | ratio (ref/tf) | target | met "
        "| tensorfile GB/s |"
    )
    lines = [head, "|---|---:|---:|---:|---:|:---:|---:|"]
    for r in results:
        ratio = (
            "n/a" if r.ratio is None else f"{r.ratio:.2f}" if r.ratio >= 0.1 else f"{r.ratio:.3f}"
        )
        if r.target is None:
            target, met = "n/a", "n/a"
        else:
            in_issue = TARGETS[r.name][1]
            target = f"≥ {r.target:.1f}" if in_issue else f"(≥ {r.target:.1f})"
            met = "yes" if r.met else "NO"
            met = met if in_issue else f"({met})"
        lines.append(
            f"| {r.name}: {r.description} | {fmt_time(r.ref_median)} | {fmt_time(r.tf_median)} "
            f"| {ratio} | {target} | {met} | {r.gbps:,.2f} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time tensorfile against the reference safetensors library.",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=REPO / "bench-data",
        help="folder of the generated data files (default: bench-data/ at the repo root)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="timed runs per implementation (default: 7 small, 5 for the 1 GiB file, 7 for "
        "the fresh-process rows; 3 quick)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds to wait before each fresh-process child, so the memory the previous "
        "child freed goes back to the host (default: 3; 0 quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: 64 MiB instead of 1 GiB, 10,000 tensors instead of 100,000, repeat 3",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--only",
        choices=(
            *ALL_BENCHMARKS,
            PROCESS_GROUP,
            CACHE_GROUP,
            COLD_GROUP,
            FEED_GROUP,
            PICKLE_GROUP,
            DCP_GROUP,
            RANKLOAD_GROUP,
        ),
        action="append",
        default=None,
        help=f"run only this benchmark (may be given more than once; {PROCESS_GROUP} selects "
        f"the fresh-process rows, {CACHE_GROUP} the remote-cache rows, {COLD_GROUP} the "
        f"cold/warm rows against every peer, {FEED_GROUP} the training-feed rows, "
        f"{PICKLE_GROUP} the PyTorch pickle rows, {DCP_GROUP} the distributed-checkpoint rows, "
        f"{RANKLOAD_GROUP} the rank-aware load rows)",
    )
    args = parser.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.settle is not None and args.settle < 0:
        parser.error("--settle must not be negative")
    if args.only is not None and PROCESS_GROUP in args.only:
        args.only = [n for n in args.only if n != PROCESS_GROUP] + list(PROCESS_BENCHMARKS)
    if args.only is not None and CACHE_GROUP in args.only:
        args.only = [n for n in args.only if n != CACHE_GROUP] + list(CACHE_BENCHMARKS)
    if args.only is not None and PICKLE_GROUP in args.only:
        args.only = [n for n in args.only if n != PICKLE_GROUP] + list(PICKLE_BENCHMARKS)
    if args.only is not None and FEED_GROUP in args.only:
        feed = (*FEED_BENCHMARKS, *FEED_S3_BENCHMARKS, *RESUME_BENCHMARKS, *SHUFFLE_BENCHMARKS)
        args.only = [n for n in args.only if n != FEED_GROUP] + list(feed)
    if args.only is not None and COLD_GROUP in args.only:
        args.only = [n for n in args.only if n != COLD_GROUP] + list(COLD_BENCHMARKS)
    if args.only is not None and DCP_GROUP in args.only:
        args.only = [n for n in args.only if n != DCP_GROUP] + list(DCP_BENCHMARKS)
    if args.only is not None and RANKLOAD_GROUP in args.only:
        args.only = [n for n in args.only if n != RANKLOAD_GROUP] + list(RANKLOAD_BENCHMARKS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        big_numel, n_small, small, big = 1 << 20, 10_000, 3, 3
    else:
        big_numel, n_small, small, big = 1 << 24, 100_000, 7, 5
    process_repeat, settle = (3, 0.0) if args.quick else (7, 3.0)
    if args.repeat is not None:
        small = big = process_repeat = args.repeat
    if args.settle is not None:
        settle = args.settle
    cfg = Config(args.data.resolve(), big_numel, n_small, small, big)
    cfg.data.mkdir(parents=True, exist_ok=True)

    selected = args.only or list(ALL_BENCHMARKS)
    header_only = (
        "open_header",
        "zt_open_manifest",
        *SPARK_BENCHMARKS,
        *REMOTE_HEADER_BENCHMARKS,
        *FEED_BENCHMARKS,
        *FEED_S3_BENCHMARKS,
        *RESUME_BENCHMARKS,
        *SHUFFLE_BENCHMARKS,
        *CONVERT_BENCHMARKS,
        *PICKLE_BENCHMARKS,
        *DCP_BENCHMARKS,
        *RANKLOAD_BENCHMARKS,
    )  # rows that do not read the 1 GiB file
    if any(name not in header_only for name in selected):
        make_big(cfg)
    if "open_header" in selected:
        make_header(cfg)

    runners: dict[
        str, Callable[[], Result | LoadResult | FeedResult | list[FeedResult] | ShuffleQuality]
    ] = {
        "load_numpy": lambda: bench_load(cfg, "numpy"),
        "load_torch": lambda: bench_load(cfg, "torch"),
        "load_torch_pread": lambda: bench_load(cfg, "torch", "pread"),
        "save_numpy": lambda: bench_save(cfg, "numpy"),
        "save_torch": lambda: bench_save(cfg, "torch"),
        "open_header": lambda: bench_open_header(cfg),
        "view_all": lambda: bench_view_all(cfg),
        **zt_runners(cfg),
    }
    if any(name in SPARK_BENCHMARKS for name in selected):
        from benchmarks.spark_bench import runners as spark_runners

        runners.update(spark_runners(cfg, args.quick))
    if any(name in ZT2_BENCHMARKS for name in selected):
        from benchmarks.zt2 import runners as zt2_runners

        runners.update(zt2_runners(cfg, selected))
    if any(name in FEED_BENCHMARKS for name in selected):
        from benchmarks.feed import runners as feed_runners

        runners.update(feed_runners(cfg, args.quick))
    if any(name in FEED_S3_BENCHMARKS for name in selected):
        from benchmarks.feed_s3 import runners as feed_s3_runners

        runners.update(feed_s3_runners(cfg, args.quick))
    if any(name in RESUME_BENCHMARKS for name in selected):
        from benchmarks.feed_resume import runners as resume_runners

        runners.update(resume_runners(cfg, args.quick))
    if any(name in CONVERT_BENCHMARKS for name in selected):
        from benchmarks.convert_bench import runners as convert_runners

        runners.update(convert_runners(cfg, args.quick))
    if any(name in SHUFFLE_BENCHMARKS for name in selected):
        from benchmarks.shuffle_quality import runners as shuffle_runners

        runners.update(shuffle_runners())
    if any(name in REMOTE_BENCHMARKS for name in selected):
        from benchmarks.remote_bench import runners as remote_runners

        runners.update(remote_runners(cfg, settle))
    if any(name in S3_BENCHMARKS for name in selected):
        from benchmarks.s3_bench import runners as s3_runners

        runners.update(s3_runners(cfg, settle))
    process = process_runners(cfg, process_repeat, settle)
    if any(name in CACHE_BENCHMARKS for name in selected):
        from benchmarks.cache_bench import runners as cache_runners

        process.update(cache_runners(cfg, process_repeat, settle))
    if any(name in PICKLE_BENCHMARKS for name in selected):
        from benchmarks.pickle_bench import runners as pickle_runners

        process.update(pickle_runners(cfg, process_repeat, settle))
    results: list[Result] = []
    process_results: list[ProcessResult] = []
    load_results: list[LoadResult] = []
    feed_results: list[FeedResult] = []
    shuffle_results: list[ShuffleQuality] = []
    cold: dict[str, Callable[[], ColdResult]] = {}
    if any(name in COLD_BENCHMARKS for name in selected):
        from benchmarks.cold_bench import runners as cold_runners

        cold = cold_runners(cfg, args.quick, settle, args.repeat)
    cold_results: list[ColdResult] = []
    dcp: dict[str, Callable[[], DcpResult | list[DcpResult]]] = {}
    if any(name in DCP_BENCHMARKS for name in selected):
        from benchmarks.dcp_bench import runners as dcp_runners

        dcp = dcp_runners(cfg, args.quick, args.repeat)
    dcp_results: list[DcpResult] = []
    rankload: dict[str, Callable[[], list[RankloadResult]]] = {}
    if any(name in RANKLOAD_BENCHMARKS for name in selected):
        from benchmarks.rankload_bench import runners as rankload_runners

        rankload = rankload_runners(cfg, args.quick, settle, args.repeat)
    rankload_results: list[RankloadResult] = []
    for name in ALL_BENCHMARKS:
        if name not in selected:
            continue
        print(f"running {name}...", file=sys.stderr, flush=True)
        if name in process:
            process_results.append(process[name]())
        elif name in cold:
            cold_results.append(cold[name]())
        elif name in dcp:
            got = dcp[name]()
            dcp_results.extend(got if isinstance(got, list) else [got])
        elif name in rankload:
            rankload_results.extend(rankload[name]())
        else:
            out = runners[name]()
            if isinstance(out, LoadResult):
                load_results.append(out)
            elif isinstance(out, FeedResult):
                feed_results.append(out)
            elif isinstance(out, list):
                feed_results.extend(out)
            elif isinstance(out, ShuffleQuality):
                shuffle_results.append(out)
            else:
                results.append(out)
        gc.collect()

    info = machine_info()
    if any(name in ZT2_BENCHMARKS for name in selected):
        from benchmarks.zt2 import peer_version

        info["peers"]["ztensor (.venv-zt2, the zt2 rows' peer)"] = peer_version()
    print()
    print(
        f"machine: {info['cpu_count']} CPUs ({info['usable_cpus']} usable, torch threads "
        f"{info['torch_threads']}), {info['platform']}; python {info['python']}, "
        f"numpy {info['numpy']}, torch {info['torch']}, safetensors {info['safetensors']}, "
        f"tensorfile {info['tensorfile']}"
    )
    print(
        f"size: {'quick' if args.quick else 'full'}; repeat {cfg.repeat_small} small / "
        f"{cfg.repeat_big} for the big file; medians; ratio = reference / tensorfile "
        f"(> 1: tensorfile faster); targets in parentheses are for information only"
    )
    if results:
        print()
        print(markdown(results))
    cache_results = [r for r in process_results if r.name in CACHE_BENCHMARKS]
    pickle_results = [r for r in process_results if r.name in PICKLE_BENCHMARKS]
    process_results = [
        r for r in process_results if r.name not in CACHE_BENCHMARKS + PICKLE_BENCHMARKS
    ]
    if process_results:
        print()
        print(
            f"fresh processes: {process_repeat} children per library, alternated, "
            f"{settle:g} s settle before each; medians; time ratios reference / tensorfile, "
            "RSS ratio tensorfile / reference"
        )
        print()
        print(process_markdown(process_results))
    if load_results:
        print()
        print(
            f"remote loads: fresh processes, loaders alternated, {settle:g} s settle before "
            "each; medians; ratio = best peer's load time / tensorfile's"
        )
        print()
        print(load_markdown(load_results))
    if cache_results:
        from benchmarks.cache_bench import markdown as cache_markdown

        print()
        print(
            f"remote cache (nginx on 127.0.0.1): {process_repeat} children each, alternated, "
            f"{settle:g} s settle before each; medians; ratios peer / cache, RSS cache / peer"
        )
        print()
        print(cache_markdown(cache_results))
    if pickle_results:
        print()
        print(
            f"PyTorch pickles: {process_repeat} children each, alternated, {settle:g} s settle "
            "before each; medians; ratios torch.load / tensorfile, RSS tensorfile / torch.load"
        )
        print()
        print(process_markdown(pickle_results))
    if cold_results:
        from benchmarks.cold_bench import markdown as cold_markdown

        print()
        print(
            f"cold and warm loads against every peer: fresh process per load, libraries "
            f"alternated, {settle:g} s settle before each; medians; ratio = best peer / "
            "tensorfile"
        )
        print()
        print(cold_markdown(cold_results))
    if feed_results:
        print()
        print(
            "training feeds: medians (fresh process per run for feed_s3 and feed_resume, "
            "in one process otherwise), loaders alternated; ratio = best peer / tensorfile"
        )
        print()
        print(feed_markdown(feed_results))
    if dcp_results:
        from benchmarks.dcp_bench import markdown as dcp_markdown

        print()
        print(
            "distributed checkpoints (gloo, a process per rank): medians of the rounds, sides "
            "rotated each round; ratios peer / tensorfile with the range over rounds"
        )
        print()
        print(dcp_markdown(dcp_results))
    if rankload_results:
        from benchmarks.rankload_bench import markdown as rankload_markdown

        print()
        print(
            "rank-aware loads (4 gloo ranks, a process per rank, fresh each run): medians of "
            "the rounds, sides rotated each round; load = the slowest rank's; ratio = "
            "reference / cooperative with the range over rounds"
        )
        print()
        print(rankload_markdown(rankload_results))
    for table in shuffle_results:
        print()
        print(table.title)
        print()
        print(table.markdown())
    if args.json is not None:
        payload = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "argv": sys.argv[1:] if argv is None else list(argv),
            "machine": info,
            "config": {
                **asdict(cfg),
                "data": str(cfg.data),
                "quick": args.quick,
                "process_repeat": process_repeat,
                "settle_s": settle,
            },
            "results": [r.to_json() for r in results],
            "process_results": [r.to_json() for r in process_results],
            "remote_load_results": [r.to_json() for r in load_results],
            "cache_results": [r.to_json() for r in cache_results],
            "pickle_results": [r.to_json() for r in pickle_results],
            "cold_results": [r.to_json() for r in cold_results],
            "feed_results": [r.to_json() for r in feed_results],
            "dcp_results": [r.to_json() for r in dcp_results],
            "rankload_results": [r.to_json() for r in rankload_results],
            "shuffle_quality": [t.to_json() for t in shuffle_results],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
