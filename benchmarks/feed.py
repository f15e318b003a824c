"""Feeding trainers: a 1 GiB dataset iterated through ``iter_arrow`` and through
``to_torch`` with two DataLoader workers, against reading the same data from parquet with
pyarrow (``ParquetFile.iter_batches``), in one process, alternately.

The data: 65,536 samples × 4,096 float32 (16 KiB a sample, 1 GiB), as a tensorfile dataset
of 64 shards (``batch_size`` 1,024) and as one parquet file (``fixed_size_list<float>[4096]``,
row groups of 1,024 rows, uncompressed, as the dataset is). Both files are page-cached.

* ``feed_iter_arrow``: ``ds.iter_arrow(1024)`` against ``iter_batches(1024)``; every batch's
  values are touched (a sum of the first value of each row would not read the pages).
* ``feed_torch``: ``DataLoader(ds.to_torch(), batch_size=1024, num_workers=2)``, every
  batch summed, against the parquet batches turned into torch tensors
  (``torch.from_numpy``) and summed.

Samples/s = 65,536 ÷ the median time (the README gives both). ``--quick`` uses 1/16 of it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.common import Config, Result, alternate, check

FEED_BENCHMARKS = ("feed_iter_arrow", "feed_torch")
WIDTH = 4096
BATCH = 1024


def runners(cfg: Config, quick: bool) -> dict[str, Callable[[], Result]]:
    samples = 65_536 // (16 if quick else 1)
    ds_path = str(cfg.data / f"feed-ds-{samples}")
    pq_path = str(cfg.data / f"feed-{samples}.parquet")
    nbytes = samples * WIDTH * 4

    def make() -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from tensorfile import dataset

        if os.path.exists(os.path.join(ds_path, "dataset_manifest.json")) and os.path.exists(
            pq_path
        ):
            return
        rng = np.random.default_rng(0)
        x = rng.standard_normal((samples, WIDTH), dtype=np.float32)
        dataset.write({"x": x}, ds_path, batch_size=BATCH, shapes={"x": [WIDTH]})
        arr = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), WIDTH)
        pq.write_table(pa.table({"x": arr}), pq_path, row_group_size=BATCH, compression="none")

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

    def torch_tf() -> float:
        from torch.utils.data import DataLoader

        from tensorfile import dataset

        loader = DataLoader(dataset.open(ds_path).to_torch(), batch_size=BATCH, num_workers=2)
        return float(sum(b["x"].sum().item() for b in loader))

    def torch_pq() -> float:
        import torch

        return float(sum(torch.from_numpy(values(b)).sum().item() for b in pq_batches()))

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
        "feed_torch": lambda: row(
            "feed_torch",
            "torch batches of 1024: to_torch + DataLoader(2 workers) vs pyarrow parquet "
            "+ torch.from_numpy",
            torch_tf,
            torch_pq,
        ),
    }
