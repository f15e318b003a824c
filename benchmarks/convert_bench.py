"""The conversion rows: the feed's data (``samples`` × 4,096 float32, benchmarks/feed_common.py)
in parquet and in Hugging Face's ``save_to_disk`` folder, written as a tensorfile dataset of
shards of 1,024 samples by ``dataset.from_parquet`` / ``dataset.from_hf``, against the size of
the data.

* ``convert_parquet``: ``from_parquet`` vs Hugging Face's own converter of the same file,
  ``datasets.Dataset.from_parquet`` (into a fresh cache folder: the Arrow file it then
  memory-maps); the floor is ``cp`` of the parquet file (the same bytes read and written, no
  decoding); the notes give pyarrow reading the file alone (``iter_batches``, nothing
  written: what decoding parquet costs).
* ``convert_hf``: ``from_hf`` of the ``save_to_disk`` folder vs ``datasets``' own rewrite of
  it (``load_from_disk(...).save_to_disk(...)``); the floor is ``cp`` of its Arrow files.

Each converter runs once untimed, then the runs alternate, each output removed before each run
(not timed); every output is
checked to hold the input's values (the sum of every value) before the timings count.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import Config, check, timed
from benchmarks.feed_common import SHARD, FeedData, FeedResult

CONVERT_BENCHMARKS = ("convert_parquet", "convert_hf")
WIDTH = 4096


def _tf_sum(path: Path) -> float:
    from tensorfile import dataset

    with dataset.open(str(path)) as ds:
        return float(sum(np.float64(b["x"].sum(dtype=np.float64)) for b in ds.batches(SHARD)))


def _hf_sum(path: Path) -> float:
    import datasets

    ds = datasets.load_from_disk(str(path)).with_format("numpy")
    return float(sum(np.float64(b["x"].sum(dtype=np.float64)) for b in ds.iter(SHARD)))


def _remove(path: Path) -> Callable[[], None]:
    def setup() -> None:
        shutil.rmtree(path, ignore_errors=True)
        if path.is_file():
            path.unlink()

    return setup


Fns = dict[str, tuple[Callable[[], object], Path]]
"""Each converter of a row: (the call, the output it writes)."""


def _alternate(fns: Fns, repeat: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn, out in fns.values():  # a first run each, not timed (imports, first page faults)
        timed(fn, _remove(out))
    for _ in range(repeat):
        for name, (fn, out) in fns.items():
            times[name].append(timed(fn, _remove(out)))
    return times


def _pq_read_seconds(path: Path, repeat: int) -> float:
    import pyarrow.parquet as pq

    def read() -> int:
        batches = pq.ParquetFile(str(path), pre_buffer=False).iter_batches(batch_size=SHARD)
        return sum(b.num_rows for b in batches)

    return float(statistics.median(timed(read) for _ in range(repeat)))


def runners(cfg: Config, quick: bool) -> dict[str, Callable[[], FeedResult]]:
    samples = 65_536 // (16 if quick else 1)
    data = FeedData(cfg.data, samples, WIDTH)
    repeat = 3 if quick else 5
    expected: list[float] = []

    def total() -> float:
        if not expected:
            expected.append(float(data.values().sum(dtype=np.float64)))
        return expected[0]

    def timings(fmt: str, make: Callable[[Path, Path], Fns]) -> dict[str, list[float]]:
        """Each converter's times over the ``fmt`` input, its outputs' values checked."""
        import datasets

        datasets.disable_progress_bars()
        data.make((fmt,))
        with tempfile.TemporaryDirectory(dir=cfg.data, prefix="convert-") as tmp:
            out = Path(tmp)
            times = _alternate(make(data.path(fmt), out), repeat)
            check(abs(_tf_sum(out / "tf") - total()) <= 1e-6 * abs(total()) + 1, "tf values")
            if fmt == "hf":
                check(abs(_hf_sum(out / "hf") - total()) <= 1e-6 * abs(total()) + 1, "hf values")
        return times

    def from_parquet(src: Path, out: Path) -> Fns:
        import datasets

        from tensorfile import dataset

        return {
            "tf": (lambda: dataset.from_parquet(src, out / "tf", batch_size=SHARD), out / "tf"),
            "hf": (
                lambda: datasets.Dataset.from_parquet(str(src), cache_dir=str(out / "hf")),
                out / "hf",
            ),
            "floor": (lambda: shutil.copyfile(src, out / "cp"), out / "cp"),
        }

    def from_hf(src: Path, out: Path) -> Fns:
        import datasets

        from tensorfile import dataset

        def rewrite() -> Any:
            datasets.load_from_disk(str(src)).save_to_disk(str(out / "hf"))

        return {
            "tf": (lambda: dataset.from_hf(src, out / "tf", batch_size=SHARD), out / "tf"),
            "hf": (rewrite, out / "hf"),
            "floor": (lambda: shutil.copytree(src, out / "cp"), out / "cp"),
        }

    def convert_parquet() -> FeedResult:
        times = timings("parquet", from_parquet)
        read = _pq_read_seconds(data.path("parquet"), repeat)
        return FeedResult(
            "convert_parquet",
            "parquet file -> dataset (from_parquet)",
            samples,
            data.nbytes,
            {
                "tf": "tensorfile dataset.from_parquet (batch_size 1,024)",
                "hf": "datasets.Dataset.from_parquet (its Arrow cache)",
                "floor": "cp of the parquet file",
            },
            times=times,
            notes=[f"pyarrow reading the file alone (iter_batches, no write): {read:.3f} s"],
        )

    def convert_hf() -> FeedResult:
        return FeedResult(
            "convert_hf",
            "save_to_disk folder -> dataset (from_hf)",
            samples,
            data.nbytes,
            {
                "tf": "tensorfile dataset.from_hf (batch_size 1,024)",
                "hf": "datasets load_from_disk + save_to_disk",
                "floor": "cp -r of the Arrow files",
            },
            times=timings("hf", from_hf),
        )

    return {"convert_parquet": convert_parquet, "convert_hf": convert_hf}
