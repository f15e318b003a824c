"""Feeding trainers from page-cached local data, in one process, loaders alternated.

* ``feed_iter_arrow``: a 1 GiB dataset (65,536 samples × 4,096 float32, 64 shards)
  iterated with ``ds.iter_arrow(1024)`` against pyarrow reading the same data from one
  uncompressed parquet file (``ParquetFile.iter_batches(1024)``, row groups of 1,024).
* ``feed_torch``: an epoch of the same samples through ``DataLoader(..., num_workers=2)``:
  tensorfile's batch mode (``DataLoader(ds.to_torch(batch_size=1024), batch_size=None)``)
  against MosaicML Streaming (MDS, ``StreamingDataset(local=...)``, DataLoader
  ``batch_size=1024``), WebDataset (tar shards, ``.batched(1024)``), Hugging Face
  ``datasets`` (Arrow, slices of 1,024) and pyarrow parquet batches (row groups split over
  the workers, ``torch.from_numpy``); see benchmarks/feed_common.py for each peer's data.
  A last line, no peer, gives the floor of any such feed on this machine: the shards' rows
  memory-mapped and handed to DataLoader as they lie (``MappedBatches``).

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

FEED_BENCHMARKS = ("feed_iter_arrow", "feed_torch")
WIDTH = 4096
BATCH = 1024


def runners(cfg: Config, quick: bool) -> dict[str, Callable[[], Result | FeedResult]]:
    samples = 65_536 // (16 if quick else 1)
    data = FeedData(cfg.data, samples, WIDTH)
    ds_path, pq_path = str(data.path("tf")), str(data.path("parquet"))
    nbytes = data.nbytes

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
        "feed_torch": lambda: feed_torch(cfg, samples),
    }


FEED_TORCH_LOADERS = {
    "tf": "tensorfile to_torch(batch_size=1024)",
    "mds": "MosaicML Streaming (MDS)",
    "wds": "WebDataset (tar)",
    "hf": "HF datasets (Arrow slices)",
    "parquet": "pyarrow parquet batches",
    "floor": "floor: mapped shard rows as they lie (no peer)",
}


def feed_torch(cfg: Config, samples: int) -> FeedResult:
    """An epoch through DataLoader(num_workers=2), tensorfile against the four peers."""
    data = FeedData(cfg.data, samples, WIDTH)
    data.make(("tf", "mds", "wds", "hf", "parquet"))
    fns = local_loaders(data)
    sums = {name: fn() for name, fn in fns.items()}  # warm-up, page-in and check
    for name, total in sums.items():
        same_sum(sums["tf"], total, f"feed_torch ({name})")
    result = FeedResult(
        "feed_torch",
        f"an epoch, DataLoader(num_workers=2), batches of 1024, {samples:,} samples x "
        f"{WIDTH} F32, page-cached",
        samples,
        data.nbytes,
        FEED_TORCH_LOADERS,
        target=1.5,
    )
    result.times = alternate_loaders(fns, max(1, min(cfg.repeat_big, 5)))
    return result
