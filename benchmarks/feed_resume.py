"""Resuming mid-epoch: the time from ``load_state_dict`` to the first batch, tensorfile
against MosaicML Streaming, each run in a fresh interpreter (libraries alternated).

The data: 100,000 samples × 256 float32 (column 0 holds the sample's id), page-cached, as
a tensorfile dataset and as MDS, shards of 1,024 samples. Both shuffle (seed 0) and feed
batches of 1,024 through ``DataLoader(num_workers=2)``:

* tensorfile: ``it = ds.to_torch(batch_size=1024, shuffle=True)``; the state of 50,000
  samples consumed (``it.state_dict(samples=50_000)``, through JSON); timed:
  ``it.load_state_dict(state)``, ``DataLoader(it, batch_size=None, num_workers=2)``, first
  batch;
* MosaicML: ``sd = StreamingDataset(local=..., batch_size=1024, shuffle=True)``; the state
  ``sd.state_dict(50_000, from_beginning=True)`` (epoch 0) through JSON; timed:
  ``sd.load_state_dict(state)``, ``DataLoader(sd, batch_size=1024, num_workers=2)``, first
  batch.

``feed_resume`` is that time; ``feed_resume_open`` the time from opening the dataset
(``dataset.open`` / ``StreamingDataset(...)``) to the first batch, what a restarted job
waits for. Each child also checks its first batch: 1,024 distinct samples, not the batch
an unresumed epoch starts with. ``--quick``: 1/8 of the samples.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import Config
from benchmarks.feed_common import BATCH, FeedData, FeedResult, import_streaming, json_child

RESUME_BENCHMARKS = ("feed_resume",)
WIDTH = 256
MODULE = "benchmarks.feed_resume"
LOADERS = {"tf": "tensorfile to_torch(batch_size=1024)", "mds": "MosaicML StreamingDataset"}


def _first(loader: Any) -> Any:
    return next(iter(loader))["x"]


def _child_tf(path: str, consumed: int, workers: int) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    from tensorfile import dataset

    t_open = time.perf_counter()
    it = dataset.open(path).to_torch(batch_size=BATCH, shuffle=True, seed=0)
    state = json.loads(json.dumps(it.state_dict(samples=consumed)))
    t0 = time.perf_counter()
    it.load_state_dict(state)
    batch = _first(DataLoader(it, batch_size=None, num_workers=workers))
    t1 = time.perf_counter()
    return {"batch": batch, "resume_s": t1 - t0, "open_s": t1 - t_open}


def _child_mds(path: str, consumed: int, workers: int) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    streaming = import_streaming()
    streaming.base.util.clean_stale_shared_memory()
    t_open = time.perf_counter()
    sd = streaming.StreamingDataset(local=path, batch_size=BATCH, shuffle=True, shuffle_seed=0)
    state = sd.state_dict(consumed, True)
    # before any iteration StreamingDataset's state names epoch -1; a job that consumed
    # 50,000 samples of its first epoch saves epoch 0
    state["epoch"] = 0
    state = json.loads(json.dumps(state))
    t0 = time.perf_counter()
    sd.load_state_dict(state)
    batch = _first(DataLoader(sd, batch_size=BATCH, num_workers=workers))
    t1 = time.perf_counter()
    return {"batch": batch, "resume_s": t1 - t0, "open_s": t1 - t_open}


def child(argv: list[str]) -> None:
    """``python -m benchmarks.feed_resume child LIB PATH CONSUMED``: one resume, its times
    and a summary of its first batch as a JSON line."""
    lib, path, consumed = argv[0], argv[1], int(argv[2])
    out = (_child_tf if lib == "tf" else _child_mds)(path, consumed, 2)
    batch = out.pop("batch")
    ids = batch[:, 0].long()
    print(
        json.dumps(
            {
                **{k: v for k, v in out.items() if k.endswith("_s")},
                "rows": int(batch.shape[0]),
                "width": int(batch.shape[1]),
                "distinct": int(ids.unique().numel()),
                "ids_head": ids[:8].tolist(),
            }
        )
    )


def _fresh_head(data: FeedData) -> list[int]:
    """The first ids an unresumed tensorfile epoch yields (the resumed batch must differ)."""
    from torch.utils.data import DataLoader

    from tensorfile import dataset

    it = dataset.open(str(data.path("tf"))).to_torch(batch_size=BATCH, shuffle=True, seed=0)
    batch = _first(DataLoader(it, batch_size=None, num_workers=0))
    return [int(v) for v in batch[:8, 0].tolist()]


def run(cfg: Config, quick: bool) -> list[FeedResult]:
    samples = 100_000 // (8 if quick else 1)
    consumed = samples // 2
    data = FeedData(cfg.data, samples, WIDTH, ids=True)
    data.make(("tf", "mds"))
    head = _fresh_head(data)
    desc = f"mid-epoch ({consumed:,} of {samples:,} samples x {WIDTH} F32), shuffled, 2 workers"
    rows = [
        FeedResult(
            "feed_resume",
            f"load_state_dict → first batch, {desc}",
            BATCH,
            BATCH * WIDTH * 4,
            LOADERS,
            target=1.0,
            rates=False,
        ),
        FeedResult(
            "feed_resume_open",
            f"open + load_state_dict → first batch, {desc}",
            BATCH,
            BATCH * WIDTH * 4,
            LOADERS,
            rates=False,
        ),
    ]
    for r in rows:
        r.times = {name: [] for name in LOADERS}
    repeat = 1 if quick else max(1, min(cfg.repeat_big, 5))
    for i in range(repeat + 1):  # the first pair is a warm-up
        for lib in LOADERS:
            out = json_child(MODULE, [lib, str(data.path(lib)), str(consumed)])
            ok = out["rows"] == BATCH and out["width"] == WIDTH and out["distinct"] == BATCH
            if not ok or (lib == "tf" and out["ids_head"] == head):
                raise SystemExit(f"feed_resume: {lib}'s first batch after resuming is wrong: {out}")
            if i:
                rows[0].times[lib].append(out["resume_s"])
                rows[1].times[lib].append(out["open_s"])
    return rows


def runners(cfg: Config, quick: bool) -> dict[str, Callable[[], list[FeedResult]]]:
    return {"feed_resume": lambda: run(cfg, quick)}


if __name__ == "__main__" and sys.argv[1:2] == ["child"]:
    child(sys.argv[2:])
