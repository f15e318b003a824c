"""How well an epoch's order is shuffled: tensorfile's against a true permutation and against
MosaicML Streaming's ``py1e``, ``py1br`` (0.13's name of ``py1b``) and ``py1s`` (not a
speed row: a table of figures).

The dataset: 100,000 samples in shards of 1,000 (100 shards). Each algorithm gives the
epoch's order as global sample ids (a sample's position in the unshuffled dataset); seed 0,
epoch 0 (every figure is the mean over seeds 0..4). Figures:

* **neighbour distance**: mean |orig(i+1) − orig(i)| ÷ N over the order; a true permutation
  gives ~1/3, an unshuffled dataset 1/N;
* **same-shard neighbours**: the fraction of consecutive pairs from the same shard; a true
  permutation gives ~(shard − 1) ÷ (N − 1) ≈ 0.01;
* **shards per batch**: the mean number of distinct shards among each 1,024 consecutive
  samples (what one batch draws from; a true permutation ~100 of 100);
* **displacement**: mean |position − orig| ÷ N (how far samples travel; true ~1/3);
* **ms**: the time to compute the whole order once (median of 5).

tensorfile: ``tensorfile.dataset.order.epoch_order(counts, seed=, epoch=, shuffle=True,
partitions=, shuffle_block=, unit=)`` (see its docstring for the algorithm: shards
permuted, 64 canonical partitions, blocks shuffled in place, partitions interleaved).
MosaicML: ``streaming.base.shuffle.get_shuffle(algo, shard_sizes, num_canonical_nodes,
seed, epoch, block_size)`` with 64 canonical nodes (tensorfile's 64 partitions): its
output, and the order one worker iterates (``get_partitions`` of one node, rank and worker
with batches of 1,024, mapped through the shuffle, as its default ``random`` batching does).
tensorfile's order is what one worker iterates too (ranks and workers take contiguous
pieces of it).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.common import check
from benchmarks.feed_common import import_streaming

SHUFFLE_BENCHMARKS = ("shuffle_quality",)
N, SHARD, BATCH = 100_000, 1_000, 1024
SEEDS = range(5)
FIGURES = ("neighbour distance", "same-shard neighbours", "shards per batch", "displacement")

NDArray = np.ndarray[Any, Any]


def figures(order: NDArray, shard: int = SHARD, batch: int = BATCH) -> dict[str, float]:
    """The four figures of one order (a permutation of 0..n-1)."""
    n = len(order)
    shards = order // shard
    nb = n // batch
    per_batch = np.sort(shards[: nb * batch].reshape(nb, batch), axis=1)
    distinct = 1 + (np.diff(per_batch, axis=1) != 0).sum(axis=1)
    return {
        "neighbour distance": float(np.abs(np.diff(order)).mean() / n),
        "same-shard neighbours": float((np.diff(shards) == 0).mean()),
        "shards per batch": float(distinct.mean()),
        "displacement": float(np.abs(np.arange(n) - order).mean() / n),
    }


@dataclass
class ShuffleQuality:
    """The table: one line per algorithm and setting."""

    rows: dict[str, dict[str, float]] = field(default_factory=dict)
    title: str = (
        f"shuffle quality: {N:,} samples in shards of {SHARD:,}; means over seeds "
        f"{SEEDS.start}..{SEEDS.stop - 1}, epoch 0; batches of {BATCH}"
    )

    def to_json(self) -> dict[str, Any]:
        return {"name": "shuffle_quality", "samples": N, "shard": SHARD, "rows": self.rows}

    def markdown(self) -> str:
        lines = [
            "| order | neighbour distance (÷ N) | same-shard neighbours | shards per batch "
            "| displacement (÷ N) | ms |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, r in self.rows.items():
            lines.append(
                f"| {name} | {r['neighbour distance']:.4f} | {r['same-shard neighbours']:.4f} "
                f"| {r['shards per batch']:.1f} | {r['displacement']:.4f} | {r['ms']:.1f} |"
            )
        return "\n".join(lines)


def algorithms() -> dict[str, Callable[[int], NDArray]]:
    """Every order of the table, as a function of the seed."""
    from tensorfile.dataset.order import epoch_order

    streaming = import_streaming()
    get_shuffle = streaming.base.shuffle.get_shuffle
    get_partitions = streaming.base.partition.get_partitions
    counts = [SHARD] * (N // SHARD)
    sizes = np.array(counts, dtype=np.int64)

    def tf(**kw: int) -> Callable[[int], NDArray]:
        return lambda seed: epoch_order(counts, seed=seed, shuffle=True, **kw)

    def mosaic(algo: str, block: int, iterated: bool = True) -> Callable[[int], NDArray]:
        def order(seed: int) -> NDArray:
            ids = get_shuffle(algo, sizes, 64, seed, 0, block)
            if not iterated:
                return np.asarray(ids)
            # what one worker iterates: StreamingDataset's random batching takes the
            # partition's positions (1 node, 1 rank, 1 worker, batches of 1,024) in the
            # shuffled ids, as streaming.base.batching.random does
            # (it pads the epoch to whole batches with repeats: the first visits are kept)
            part = get_partitions("relaxed", N, 64, 1, 1, 1, BATCH, 0).reshape(-1)
            part = part[part >= 0]
            _, first = np.unique(part, return_index=True)
            return np.asarray(ids)[part[np.sort(first)]]

        return order

    return {
        "unshuffled": lambda seed: np.arange(N),
        "true permutation (numpy)": lambda seed: np.random.default_rng(seed).permutation(N),
        "tensorfile, defaults (64 partitions, block 262,144)": tf(),
        "tensorfile, block 4,096": tf(shuffle_block=4096),
        "tensorfile, block 512": tf(shuffle_block=512),
        "tensorfile, defaults, unit 1,024 (a rank's batch)": tf(unit=1024),
        "MosaicML py1e, block 262,144, get_shuffle's output": mosaic("py1e", 1 << 18, False),
        "MosaicML py1e, block 262,144, as iterated": mosaic("py1e", 1 << 18),
        "MosaicML py1e, block 4,096, as iterated": mosaic("py1e", 4096),
        "MosaicML py1br, block 262,144, as iterated": mosaic("py1br", 1 << 18),
        "MosaicML py1s (shard-local), as iterated": mosaic("py1s", 1 << 18),
    }


def run() -> ShuffleQuality:
    table = ShuffleQuality()
    for name, fn in algorithms().items():
        per_seed: list[dict[str, float]] = []
        for seed in SEEDS:
            order = np.asarray(fn(seed), dtype=np.int64)
            check(
                len(order) == N and np.array_equal(np.sort(order), np.arange(N)),
                f"shuffle_quality: {name} is not a permutation of the samples",
            )
            per_seed.append(figures(order))
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn(0)
            times.append(time.perf_counter() - t0)
        row = {f: statistics.mean(s[f] for s in per_seed) for f in FIGURES}
        row["ms"] = statistics.median(times) * 1e3
        table.rows[name] = row
    return table


def runners() -> dict[str, Callable[[], ShuffleQuality]]:
    return {"shuffle_quality": run}
