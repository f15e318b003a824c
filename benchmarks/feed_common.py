"""What the training-feed rows share (benchmarks/feed.py, feed_s3.py, feed_resume.py): the
same samples written in every peer's format, the peers' loaders, the fresh-process child
runner and the rows' table.

The data: ``samples`` × ``width`` float32 drawn from ``default_rng(0)`` (so every format
holds the same values), written once into ``--data`` and reused, in shards of ``shard``
samples (1,024 unless a row says otherwise):

* tensorfile: ``dataset.write`` in batch mode, a shard per ``shard`` samples;
* MosaicML Streaming: ``MDSWriter`` (column ``ndarray:float32:<width>``, no compression),
  a shard per ``shard`` samples (``size_limit`` one shard's bytes);
* LitData: ``litdata.optimize`` (one worker, in order, no compression), each sample
  ``{"x": <float32 row>}`` (stored by its header-less numpy serializer), ``chunk_size`` =
  ``shard`` samples;
* WebDataset: tar shards of ``shard`` samples, each sample ``<key>.x.f32`` (raw bytes,
  decoded with ``np.frombuffer``: cheaper than ``.npy``);
* Hugging Face ``datasets``: ``Dataset(arrow table).save_to_disk`` (Arrow, memory-mapped by
  ``load_from_disk``);
* parquet: one uncompressed file, ``fixed_size_list<float>[width]``, row groups of 1,024.

Every loader returns the sum of every value it was handed (each batch summed as a torch
tensor), so a loader that skipped pages or samples would fail the sums check.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from benchmarks.common import REPO, check

BATCH = 1024
SHARD = 1024
"""Samples per shard, in every format."""


def import_streaming() -> Any:
    """``import streaming`` (MosaicML) without torchvision.

    ``streaming/__init__`` imports ``streaming.vision``, which imports torchvision; PyPI's
    torchvision wheel cannot load against this project's CPU torch (2.13.0+cpu), so it is
    not installed, and the vision datasets (unused here) are replaced by an empty module.
    """
    sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    import warnings

    # MDS hands DataLoader read-only np.frombuffer arrays; torch warns once per worker
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    import streaming

    return streaming


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class FeedData:
    """Where one size of the feed data lives, in each format."""

    root: Path
    samples: int
    width: int
    ids: bool = False
    """column 0 of sample i holds i (exactly, in float32, below 2**24): the resume rows
    check which samples a batch holds"""
    shard: int = SHARD
    """samples per shard (chunk, tar file) in every format"""

    @property
    def nbytes(self) -> int:
        return self.samples * self.width * 4

    def path(self, fmt: str) -> Path:
        suffix = ".parquet" if fmt == "parquet" else ""
        ids = "-ids" if self.ids else ""
        shard = "" if self.shard == SHARD else f"-s{self.shard}"
        return self.root / f"feed-{self.samples}x{self.width}{ids}{shard}-{fmt}{suffix}"

    def values(self) -> np.ndarray[Any, Any]:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((self.samples, self.width), dtype=np.float32)
        if self.ids:
            x[:, 0] = np.arange(self.samples)
        return x

    def make(self, formats: tuple[str, ...]) -> None:
        """Write the formats not written yet (each into a temporary path renamed into place)."""
        missing = [f for f in formats if not self.path(f).exists()]
        if not missing:
            return
        print(f"generating the feed data ({', '.join(missing)})...", file=sys.stderr, flush=True)
        x = self.values()
        for fmt in missing:
            final = self.path(fmt)
            tmp = final.with_name(final.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            if tmp.is_file():
                tmp.unlink()
            WRITERS[fmt](x, tmp, self.shard)
            os.replace(tmp, final)


def _write_tf(x: np.ndarray[Any, Any], out: Path, shard: int) -> None:
    from tensorfile import dataset

    dataset.write({"x": x}, str(out), batch_size=shard, shapes={"x": [x.shape[1]]})


def _write_mds(x: np.ndarray[Any, Any], out: Path, shard: int) -> None:
    streaming = import_streaming()
    limit = shard * (x.shape[1] * 4 + 16) + 1024
    columns = {"x": f"ndarray:float32:{x.shape[1]}"}
    with streaming.MDSWriter(out=str(out), columns=columns, size_limit=limit) as w:
        for row in x:
            w.write({"x": row})


def _write_litdata(x: np.ndarray[Any, Any], out: Path, shard: int) -> None:
    """``litdata.optimize`` in one forked worker: ``fn`` yields the rows of one shard (the
    worker inherits ``x``; nothing is pickled). optimize sets the process's multiprocessing
    start method (``force=True``), so the one before it is put back: the other loaders'
    DataLoader workers keep forking. Its scratch folders (``$TMPDIR/chunks`` and ``/data``
    by default) go next to ``out`` and are removed."""
    import multiprocessing

    import litdata

    def rows(start: int) -> Iterator[dict[str, np.ndarray[Any, Any]]]:
        for i in range(start, min(start + shard, len(x))):
            yield {"x": x[i]}

    scratch = out.with_name(out.name + ".scratch")
    env = {
        "DATA_OPTIMIZER_CACHE_FOLDER": str(scratch / "chunks"),
        "DATA_OPTIMIZER_DATA_CACHE_FOLDER": str(scratch / "data"),
    }
    saved = {k: os.environ.get(k) for k in env}
    method = multiprocessing.get_start_method(allow_none=True)
    os.environ.update(env)
    try:
        litdata.optimize(
            fn=rows,
            inputs=list(range(0, len(x), shard)),
            output_dir=str(out),
            chunk_size=shard,
            num_workers=1,
            start_method="fork",
            reorder_files=False,
            verbose=False,
        )
    finally:
        multiprocessing.set_start_method(method, force=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(scratch, ignore_errors=True)


def _write_wds(x: np.ndarray[Any, Any], out: Path, shard: int) -> None:
    import webdataset as wds

    out.mkdir(parents=True)
    for s, start in enumerate(range(0, len(x), shard)):
        with wds.TarWriter(str(out / f"shard-{s:05d}.tar")) as tw:
            for i in range(start, min(start + shard, len(x))):
                tw.write({"__key__": f"{i:09d}", "x.f32": x[i].tobytes()})


def _arrow_table(x: np.ndarray[Any, Any]) -> Any:
    import pyarrow as pa

    arr = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])
    return pa.table({"x": arr})


def _write_hf(x: np.ndarray[Any, Any], out: Path, shard: int) -> None:
    import datasets

    datasets.disable_progress_bars()
    shards = max(1, len(x) // (16 * shard))
    datasets.Dataset(_arrow_table(x)).save_to_disk(str(out), num_shards=shards)


def _write_parquet(x: np.ndarray[Any, Any], out: Path, shard: int) -> None:
    import pyarrow.parquet as pq

    pq.write_table(_arrow_table(x), str(out), row_group_size=BATCH, compression="none")


WRITERS: dict[str, Callable[[np.ndarray[Any, Any], Path, int], None]] = {
    "tf": _write_tf,
    "mds": _write_mds,
    "litdata": _write_litdata,
    "wds": _write_wds,
    "hf": _write_hf,
    "parquet": _write_parquet,
}


# --------------------------------------------------------------------------- loaders


def parquet_values(batch: Any, width: int) -> np.ndarray[Any, Any]:
    col = batch.column(0)
    return np.asarray(col.values.to_numpy(zero_copy_only=False)).reshape(len(col), width)


def loader_sum(loader: Any, key: Any = "x") -> float:
    """Sum of every batch's values (float64 accumulation of each batch's float32 sum)."""
    import torch

    total = 0.0
    for batch in loader:
        value = batch[key]
        total += float(torch.as_tensor(value).sum().item())
    return total


class ParquetBatches(IterableDataset[dict[str, Any]]):
    """``ParquetFile.iter_batches`` as torch tensors, row groups split over DataLoader
    workers (a torch ``IterableDataset``: the parquet peer's best DataLoader feed)."""

    def __init__(self, path: str, width: int) -> None:
        super().__init__()
        self.path, self.width = path, width

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import pyarrow.parquet as pq
        import torch
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        k, w = (1, 0) if info is None else (info.num_workers, info.id)
        f = pq.ParquetFile(self.path)
        groups = list(range(w, f.num_row_groups, k))
        for batch in f.iter_batches(batch_size=BATCH, row_groups=groups):
            yield {"x": torch.from_numpy(parquet_values(batch, self.width))}


class HFSlices:
    """Batches of a Hugging Face ``Dataset`` as slices (``ds[i:i + 1024]``, numpy format):
    the fastest of the ``datasets`` feeds tried here (``with_format("torch")`` per sample
    + collate: ~2x slower; ``to_iterable_dataset().batch()``: ~1.6x slower)."""

    def __init__(self, path: str) -> None:
        import datasets

        self.ds = datasets.load_from_disk(path).with_format("numpy")

    def __len__(self) -> int:
        return (len(self.ds) + BATCH - 1) // BATCH

    def __getitem__(self, i: int) -> dict[str, Any]:
        return dict(self.ds[i * BATCH : (i + 1) * BATCH])


class MappedBatches(IterableDataset[dict[str, Any]]):
    """The floor of any DataLoader feed: the tensorfile shards' rows, memory-mapped, handed
    to DataLoader as they lie (``torch.from_numpy`` of a ``np.memmap`` slice: no decoding,
    no Python per sample), shards split over the workers. What remains is DataLoader's own
    work: the worker copies each batch into shared memory, the main process reads it."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.files = sorted(str(p) for p in Path(folder).glob("*.safetensors"))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import torch
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        k, w = (1, 0) if info is None else (info.num_workers, info.id)
        for path in self.files[w::k]:
            rows = _mapped_rows(path)
            for i in range(0, len(rows), BATCH):
                yield {"x": torch.from_numpy(np.asarray(rows[i : i + BATCH]))}


def _mapped_rows(path: str) -> np.ndarray[Any, Any]:
    """The rows of column ``x`` of a tensorfile shard, memory-mapped."""
    import struct

    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        x = json.loads(f.read(n))["x"]
    start, _ = x["data_offsets"]
    return np.memmap(path, np.float32, "r", 8 + n + start, tuple(x["shape"]))


def copy_floor(folder: str, threads: int) -> float:
    """The floor of a feed that hands over batches of its own memory: the shards' mapped
    rows copied batch by batch into one reused buffer per thread (no indexing, no torch, no
    transport), ``threads`` threads splitting the shards; each batch summed like the
    loaders' (so the sums check holds)."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    files = sorted(str(p) for p in Path(folder).glob("*.safetensors"))

    def part(paths: list[str]) -> float:
        total, buf = 0.0, None
        for path in paths:
            rows = _mapped_rows(path)
            if buf is None:
                buf = np.empty((BATCH, *rows.shape[1:]), rows.dtype)
            for i in range(0, len(rows), BATCH):
                piece = buf[: len(rows[i : i + BATCH])]
                np.copyto(piece, rows[i : i + BATCH])
                total += float(torch.from_numpy(piece).sum().item())
        return total

    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(part, [files[w::threads] for w in range(threads)]))


def _wds_decode(raw: bytes) -> np.ndarray[Any, Any]:
    return np.frombuffer(raw, np.float32)


def local_loaders(data: FeedData, workers: int = 2) -> dict[str, Callable[[], float]]:
    """An epoch of each library over the page-cached data, every value summed."""

    def tf() -> float:
        from tensorfile import dataset

        it = dataset.open(str(data.path("tf"))).to_torch(batch_size=BATCH)
        return loader_sum(it.loader(threads=workers))

    def tf_dl() -> float:
        from torch.utils.data import DataLoader

        from tensorfile import dataset

        it = dataset.open(str(data.path("tf"))).to_torch(batch_size=BATCH)
        return loader_sum(DataLoader(it, batch_size=None, num_workers=workers))

    def mds() -> float:
        from torch.utils.data import DataLoader

        streaming = import_streaming()
        streaming.base.util.clean_stale_shared_memory()
        sd = streaming.StreamingDataset(local=str(data.path("mds")), batch_size=BATCH)
        return loader_sum(DataLoader(sd, batch_size=BATCH, num_workers=workers))

    def litdata() -> float:
        import litdata

        sd = litdata.StreamingDataset(str(data.path("litdata")))
        return loader_sum(litdata.StreamingDataLoader(sd, batch_size=BATCH, num_workers=workers))

    def wds() -> float:
        import webdataset
        from torch.utils.data import DataLoader

        urls = sorted(str(p) for p in data.path("wds").glob("*.tar"))
        pipe = (
            webdataset.WebDataset(urls, shardshuffle=False, nodesplitter=None, empty_check=False)
            .to_tuple("x.f32")
            .map_tuple(_wds_decode)
            .batched(BATCH, partial=True)
        )
        return loader_sum(DataLoader(pipe, batch_size=None, num_workers=workers), 0)

    def hf() -> float:
        from torch.utils.data import DataLoader

        loader = DataLoader(HFSlices(str(data.path("hf"))), batch_size=None, num_workers=workers)
        return loader_sum(loader)

    def parquet() -> float:
        from torch.utils.data import DataLoader

        batches = ParquetBatches(str(data.path("parquet")), data.width)
        return loader_sum(DataLoader(batches, batch_size=None, num_workers=workers))

    def floor() -> float:
        from torch.utils.data import DataLoader

        batches = MappedBatches(str(data.path("tf")))
        return loader_sum(DataLoader(batches, batch_size=None, num_workers=workers))

    def floor_copy() -> float:
        return copy_floor(str(data.path("tf")), workers)

    return {
        "tf": tf,
        "tf_dl": tf_dl,
        "litdata": litdata,
        "mds": mds,
        "wds": wds,
        "hf": hf,
        "parquet": parquet,
        "floor": floor,
        "floor_copy": floor_copy,
    }


def sums_agree(a: float, b: float) -> bool:
    """Whether two loaders' sums agree (float32 batch sums added in different orders)."""
    return abs(a - b) <= 1e-3 * (abs(a) + 1) + 1.0


def same_sum(a: float, b: float, what: str) -> None:
    check(sums_agree(a, b), f"{what}: sums differ ({a} vs {b})")


# --------------------------------------------------------------------------- children


def json_child(
    module: str, args: list[str], env: dict[str, str] | None = None, *, may_fail: bool = False
) -> dict[str, Any]:
    """Run ``python -m module child ARGS`` in a fresh interpreter; its last stdout line is
    JSON. Adds ``wall_s`` (spawn to exit, taken here). A child that fails ends the row,
    unless ``may_fail``: then the result is ``{"error": its last line of stderr}``."""
    argv = [sys.executable, "-m", module, "child", *args]
    full_env = {**os.environ, **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, cwd=REPO, env=full_env, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        if may_fail:
            return {"error": (err.splitlines() or [f"exit status {proc.returncode}"])[-1]}
        sys.stderr.write(err[-4000:] + "\n")
    check(proc.returncode == 0, f"{module} child {args[:1]} exited {proc.returncode}")
    out: dict[str, Any] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    out["wall_s"] = wall
    return out


# --------------------------------------------------------------------------- results


@dataclass
class FeedResult:
    """One feed row: every loader's timings; ratio = best peer's median ÷ tensorfile's."""

    name: str
    description: str
    samples: int
    nbytes: int
    loaders: dict[str, str]
    """short name -> what it is, tensorfile ("tf") first; other "tf*" names are tensorfile
    too, and "floor*" names bounds (neither is a peer)"""
    target: float | None = None
    times: dict[str, list[float]] = field(default_factory=dict)
    rates: bool = True
    """whether samples/s and GB/s mean anything (not for a time to the first batch)"""
    notes: list[str] = field(default_factory=list)
    """what went wrong in runs left out of the times (a loader's wrong values)"""

    def median(self, loader: str) -> float:
        return float(statistics.median(self.times[loader]))

    @property
    def best_peer(self) -> str:
        peers = [name for name in self.loaders if not name.startswith(("tf", "floor"))]
        return min(peers, key=self.median)

    @property
    def ratio(self) -> float:
        return self.median(self.best_peer) / self.median("tf")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "samples": self.samples,
            "bytes": self.nbytes,
            "loaders": {
                name: {
                    "what": what,
                    "times_s": self.times[name],
                    "median_s": self.median(name),
                    "samples_per_s": self.samples / self.median(name),
                    "gbps": self.nbytes / self.median(name) / 1e9,
                }
                for name, what in self.loaders.items()
            },
            "rates": self.rates,
            "best_peer": self.best_peer,
            "ratio_best_peer_over_tf": self.ratio,
            "target": self.target,
            "met": None if self.target is None else self.ratio >= self.target,
            "notes": self.notes,
        }


def alternate_loaders(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, list[float]]:
    """Time every loader ``repeat`` times, in turn (a, b, c, a, b, c, ...)."""
    from benchmarks.common import timed

    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            times[name].append(timed(fn))
    return times


def markdown(results: list[FeedResult]) -> str:
    """One line per loader of each row; the tensorfile line carries the row's ratio."""
    lines = [
        "| benchmark | loader | median (s) | samples/s | GB/s | ratio (best peer / tf) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        for name, what in r.loaders.items():
            t = r.median(name)
            ratio = ""
            if name == "tf":
                target = ""
                if r.target is not None:
                    met = "met" if r.ratio >= r.target else "NOT met"
                    target = f" (target ≥ {r.target}: {met})"
                ratio = f"**{r.ratio:.2f}** vs {r.best_peer}{target}"
            rates = f"{r.samples / t:,.0f} | {r.nbytes / t / 1e9:.2f}" if r.rates else "n/a | n/a"
            lines.append(f"| {r.name}: {r.description} | {what} | {t:.3f} | {rates} | {ratio} |")
    notes = [f"- {r.name}: {note}" for r in results for note in r.notes]
    return "\n".join(lines + (["", *notes] if notes else []))
