"""Feeding trainers from page-cached local data, in one process, loaders alternated.

* ``feed_iter_arrow``: a 1 GiB dataset (65,536 samples × 4,096 float32, 64 shards)
  iterated with ``ds.iter_arrow(1024)`` against pyarrow reading the same data from one
  uncompressed parquet file (``ParquetFile.iter_batches(1024)``, row groups of 1,024).
* ``feed_torch``: an epoch of the same samples, 2 workers or threads: tensorfile's own
  loader (``ds.to_torch(batch_size=1024).loader(threads=2)``: threads gathering into reused
  buffers) and, for comparison, its feed through ``DataLoader(..., num_workers=2,
  batch_size=None)``, against LitData (``litdata.optimize`` chunks, ``StreamingDataset``
  read through its own ``StreamingDataLoader(batch_size=1024, num_workers=2)``), MosaicML
  Streaming (MDS, ``StreamingDataset(local=...)``, DataLoader ``batch_size=1024``), WebDataset (tar
  shards, ``.batched(1024)``), Hugging Face ``datasets`` (Arrow, slices of 1,024) and
  pyarrow parquet batches (row groups split over the workers, ``torch.from_numpy``); see
  benchmarks/feed_common.py for each peer's data. Two last lines, no peers, give floors on
  this machine: of any DataLoader feed (the shards' rows memory-mapped and handed to
  DataLoader as they lie, ``MappedBatches``: DataLoader's transport alone), and of any feed
  that hands over batches in its own memory (the mapped rows copied into one reused buffer
  per thread, ``copy_floor``).
* ``feed_small``: the same loaders over small samples, where the cost per sample
  dominates: 1,000,000 samples × 64 float32 (256 B each, 256 MB), shards of 16,384
  samples (4 MiB: 62 shards, about as many as the 1 GiB row's 64), batches of 1,024;
  reported in samples/s. At most 3 timed epochs per loader (the per-sample peers take
  seconds per epoch here), against 5 in the other rows.

Every batch's values are summed (a sum of the first value of each row would not read the
pages) and the sums must agree. Samples/s = samples ÷ the median time. ``--quick`` uses
1/16 of the samples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.common import Config, Result, alternate, check
from benchmarks.feed_common import FeedData, FeedResult, alternate_loaders, local_loaders, same_sum

FEED_BENCHMARKS = ("feed_iter_arrow", "feed_torch", "feed_small")
WIDTH = 4096
BATCH = 1024
SMALL_SAMPLES, SMALL_WIDTH, SMALL_SHARD = 1_000_000, 64, 16_384
"""``feed_small``: 256-byte samples, shards of 4 MiB"""


def runners(cfg: Config, quick: bool) -> dict[str, Callable[[], Result | FeedResult]]:
    samples = 65_536 // (16 if quick else 1)
    data = FeedData(cfg.data, samples, WIDTH)
    ds_path, pq_path = str(data.path("tf")), str(data.path("parquet"))
    nbytes = data.nbytes
    small_samples = SMALL_SAMPLES // (16 if quick else 1)
    small = FeedData(cfg.data, small_samples, SMALL_WIDTH, shard=SMALL_SHARD)

    def make() -> None:
        data.make(("tf", "parquet"))

    def pq_batches() -> Any:
        import pyarrow.parquet as pq

        return pq.ParquetFile(pq_path).iter_batches(batch_size=BATCH)

    def values(batch: Any) -> np.ndarray[Any, Any]:
        col = batch.column(0)
        return col.values.to_numpy(zero_copy_only=False).reshape(len(col), WIDTH)

    def arrow_tf() -> float:
        from tensorfile import dataset

        return float(sum(values(b).sum() for b in dataset.open(ds_path).iter_arrow(BATCH)))

    def arrow_pq() -> float:
        return float(sum(values(b).sum() for b in pq_batches()))

    def row(name: str, what: str, tf: Callable[[], float], ref: Callable[[], float]) -> Result:
        make()
        a, b = tf(), ref()
        check(abs(a - b) <= 1e-3 * (abs(a) + 1) + 1.0, f"{name}: sums differ ({a} vs {b})")
        ref_t, tf_t = alternate(ref, tf, max(1, min(cfg.repeat_big, 5)))
        return Result(name, f"{what}, {samples:,} samples x {WIDTH} F32", nbytes, tf_t, ref_t)

    return {
        "feed_iter_arrow": lambda: row(
            "feed_iter_arrow",
            "iterate Arrow batches of 1024: tensorfile iter_arrow vs pyarrow parquet",
            arrow_tf,
            arrow_pq,
        ),
        "feed_torch": lambda: feed_torch(cfg, FeedData(cfg.data, samples, WIDTH)),
        "feed_small": lambda: feed_torch(cfg, small, "feed_small", most=3),
    }


FEED_TORCH_LOADERS = {
    "tf": "tensorfile to_torch(batch_size=1024).loader(threads=2)",
    "tf_dl": "tensorfile to_torch(batch_size=1024) in DataLoader(num_workers=2)",
    "litdata": "LitData StreamingDataset + StreamingDataLoader",
    "mds": "MosaicML Streaming (MDS)",
    "wds": "WebDataset (tar)",
    "hf": "HF datasets (Arrow slices)",
    "parquet": "pyarrow parquet batches",
    "floor": "floor of DataLoader: mapped shard rows as they lie, 2 workers (no peer)",
    "floor_copy": "floor of a copy: mapped rows copied into a reused buffer, 2 threads",
}


def feed_torch(cfg: Config, data: FeedData, name: str = "feed_torch", most: int = 5) -> FeedResult:
    """An epoch through DataLoader(num_workers=2) (LitData: its StreamingDataLoader),
    tensorfile against the five peers, and the floor; at most ``most`` timed runs each."""
    data.make(("tf", "litdata", "mds", "wds", "hf", "parquet"))
    fns = local_loaders(data)
    sums = {loader: fn() for loader, fn in fns.items()}  # warm-up, page-in and check
    for loader, total in sums.items():
        same_sum(sums["tf"], total, f"{name} ({loader})")
    result = FeedResult(
        name,
        f"an epoch, 2 workers or threads, batches of 1024, {data.samples:,} samples x "
        f"{data.width} F32 ({data.width * 4:,} B), shards of {data.shard:,}, page-cached",
        data.samples,
        data.nbytes,
        FEED_TORCH_LOADERS,
        target=1.5,
    )
    result.times = alternate_loaders(fns, max(1, min(cfg.repeat_big, most)))
    return result
