"""Feeding training from a real S3 server on 127.0.0.1 (SeaweedFS), tensorfile against
LitData, MosaicML Streaming and pyarrow.

The data: the ``feed_torch`` samples (65,536 × 4,096 float32, 1 GiB; ``--quick`` 1/16), as a
tensorfile dataset, as LitData chunks, as MDS and as one parquet file
(benchmarks/feed_common.py), uploaded once to the server (``weed server -s3`` keeping its
objects in ``bench-data/seaweed-feed``).

* ``feed_s3`` / ``feed_s3_cached``: a fresh interpreter per run (libraries alternated), an
  empty cache folder each: epoch 1 streams from the server through the cache (timed from
  opening the dataset to the last batch: index/manifest, downloads, reads), epoch 2 reads
  the cache (a new DataLoader over the same dataset). tensorfile:
  ``dataset.open("s3://...", storage_options=..., cache_dir=...)`` (default
  ``predownload``) + ``DataLoader(ds.to_torch(batch_size=1024), batch_size=None,
  num_workers=2)``; LitData: ``StreamingDataset("s3://...", cache_dir=cache,
  storage_options=...)`` + ``StreamingDataLoader(sd, batch_size=1024, num_workers=2)``
  iterated twice (its epochs), ``storage_options`` being the keyword arguments of its boto3
  S3 client (``endpoint_url``, keys, region), which also gives its chunk downloads
  (obstore) their endpoint and keys; obstore refuses a plain-HTTP endpoint unless told, and
  LitData has no setting for it, so the child adds ``allow_http`` to LitData's obstore
  client options (nothing else changed: over HTTPS, as on a real object store, no such
  step is needed); MosaicML: ``StreamingDataset(remote="s3://...", local=cache,
  batch_size=1024)`` + ``DataLoader(sd, batch_size=1024, num_workers=2)``, its S3 client
  pointed at the server by ``S3_ENDPOINT_URL``.
* ``feed_s3_read``: reading every value back from the server without a cache, in one
  process, alternated: tensorfile ``dataset.open("s3://...", cache_dir=False).iter_arrow(1024)``
  against pyarrow on the parquet object through ``pyarrow.fs.S3FileSystem(endpoint_override=
  ...)``: ``ParquetFile.iter_batches(1024)`` and ``pq.read_table`` (its parallel reader).

Every value is summed and the sums must agree. Caveats: client and server share the
machine's two cores; loopback has no network latency (a real object store's latency is
what ``predownload`` hides).
"""

from __future__ import annotations

import atexit
import filecmp
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import Config, check
from benchmarks.feed_common import (
    BATCH,
    FeedData,
    FeedResult,
    alternate_loaders,
    import_streaming,
    json_child,
    loader_sum,
    parquet_values,
    same_sum,
    sums_agree,
)

FEED_S3_BENCHMARKS = ("feed_s3", "feed_s3_read")
BUCKET = "tf-feed"
WIDTH = 4096
MODULE = "benchmarks.feed_s3"
S3_LOADERS = {
    "tf": "tensorfile, cache_dir, its own loader (2 threads)",
    "tf_dl": "tensorfile, cache_dir, DataLoader(num_workers=2)",
    "litdata": "LitData StreamingDataset(s3://, cache_dir=) + StreamingDataLoader",
    "mds": "MosaicML StreamingDataset(remote=, local=)",
}
FORMAT = {lib: "tf" if lib.startswith("tf") else lib for lib in S3_LOADERS}
"""the data each loader reads (both tensorfile loaders read the tensorfile dataset)"""


# --------------------------------------------------------------------------- children


def _epochs_tf(url: str, cache: str, options: dict[str, Any]) -> Iterator[float]:
    from tensorfile import dataset

    it = dataset.open(url, storage_options=options, cache_dir=cache).to_torch(batch_size=BATCH)
    loader = it.loader(threads=2)
    for _ in range(2):
        yield loader_sum(loader)


def _epochs_tf_dl(url: str, cache: str, options: dict[str, Any]) -> Iterator[float]:
    from torch.utils.data import DataLoader

    from tensorfile import dataset

    it = dataset.open(url, storage_options=options, cache_dir=cache).to_torch(batch_size=BATCH)
    for _ in range(2):
        yield loader_sum(DataLoader(it, batch_size=None, num_workers=2))


def _epochs_mds(url: str, cache: str, options: dict[str, Any]) -> Iterator[float]:
    from torch.utils.data import DataLoader

    streaming = import_streaming()
    streaming.base.util.clean_stale_shared_memory()
    sd = streaming.StreamingDataset(remote=url, local=cache, batch_size=BATCH)
    for _ in range(2):
        yield loader_sum(DataLoader(sd, batch_size=BATCH, num_workers=2))


def _epochs_litdata(url: str, cache: str, options: dict[str, Any]) -> Iterator[float]:
    import litdata
    from litdata.streaming import downloader

    # the server speaks plain HTTP; obstore (LitData's chunk downloads) refuses it unless
    # its client options allow it, and LitData builds them from this constant alone
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True
    boto = {
        "endpoint_url": options["endpoint_url"],
        "aws_access_key_id": options["key"],
        "aws_secret_access_key": options["secret"],
        "region_name": options["client_kwargs"]["region_name"],
    }  # the s3fs names of Server.options, as boto3's client takes them
    sd = litdata.StreamingDataset(url, cache_dir=cache, storage_options=boto)
    loader = litdata.StreamingDataLoader(sd, batch_size=BATCH, num_workers=2)
    for _ in range(2):
        yield loader_sum(loader)


EPOCHS = {
    "tf": _epochs_tf,
    "tf_dl": _epochs_tf_dl,
    "litdata": _epochs_litdata,
    "mds": _epochs_mds,
}


def child(argv: list[str]) -> None:
    """``python -m benchmarks.feed_s3 child LIB URL CACHE OPTIONS_JSON``: two epochs; prints
    their times (the first from opening the dataset) and sums as JSON."""
    lib, url, cache, options = argv[0], argv[1], argv[2], json.loads(argv[3])
    epochs = EPOCHS[lib]
    times: list[float] = []
    sums: list[float] = []
    t0 = time.perf_counter()
    for total in epochs(url, cache, options):
        now = time.perf_counter()
        times.append(now - t0)
        sums.append(total)
        t0 = now
    print(json.dumps({"epoch1_s": times[0], "epoch2_s": times[1], "sums": sums}))


# --------------------------------------------------------------------------- server


class Server:
    """SeaweedFS with the feed data uploaded (started on first use, stopped at exit)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.srv: Any = None

    def start(self) -> Any:
        if self.srv is None:
            from tests.helpers import seaweed

            self.srv = seaweed.start(data=self.cfg.data / "seaweed-feed")
            atexit.register(self.srv.stop)
            try:
                self.srv.client.create_bucket(Bucket=BUCKET)
            except self.srv.client.exceptions.ClientError:
                pass  # there from an earlier run
        return self.srv

    def upload(self, local: Path) -> str:
        """``s3://`` URL of ``local`` (a file or a folder), uploading what is missing or of
        another size."""
        client = self.start().client
        files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
        for path in files:
            key = local.name if path == local else f"{local.name}/{path.relative_to(local)}"
            try:
                size = client.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
            except client.exceptions.ClientError:
                size = None
            if size != path.stat().st_size:
                client.upload_file(str(path), BUCKET, key)
        return f"s3://{BUCKET}/{local.name}"

    @property
    def env(self) -> dict[str, str]:
        env: dict[str, str] = self.start().env
        return {**env, "S3_ENDPOINT_URL": env["AWS_ENDPOINT_URL"]}


# --------------------------------------------------------------------------- rows


def feed_s3(cfg: Config, server: Server, data: FeedData, quick: bool) -> list[FeedResult]:
    data.make(tuple(sorted(set(FORMAT.values()))))
    print("uploading the feed data to SeaweedFS...", file=sys.stderr, flush=True)
    urls = {lib: server.upload(data.path(FORMAT[lib])) for lib in S3_LOADERS}
    options = json.dumps(server.start().options)
    desc = (
        f"{data.samples:,} samples x {WIDTH} F32 from SeaweedFS, 2 workers or threads, "
        "batches of 1024"
    )
    rows = [
        FeedResult("feed_s3", f"epoch 1, cold cache, {desc}", data.samples, data.nbytes, S3_LOADERS,
                   target=1.2),
        FeedResult("feed_s3_cached", f"epoch 2, cached, {desc}", data.samples, data.nbytes,
                   S3_LOADERS),
    ]  # fmt: skip
    for r in rows:
        r.times = {lib: [] for lib in S3_LOADERS}
    runs = {lib: 0 for lib in S3_LOADERS}  # correct runs so far
    want = float(data.values().sum(dtype=np.float64))
    repeat = max(1, min(cfg.repeat_big, 5)) + 1  # the first round is a warm-up
    if quick:
        repeat = 2
    attempts = 0
    while min(runs.values()) < repeat and attempts < 3 * repeat:
        attempts += 1
        for lib in S3_LOADERS:
            if runs[lib] >= repeat:
                continue
            cache = tempfile.mkdtemp(prefix=f"feed-s3-{lib}-", dir=cfg.data)
            try:
                out = json_child(MODULE, [lib, urls[lib], cache, options], server.env,
                                 may_fail=True)  # fmt: skip
                if "error" in out:
                    rows[0].notes.append(f"a {lib} run failed ({out['error']}); left out")
                    continue
                if not all(sums_agree(want, total) for total in out["sums"]):
                    rows[0].notes.append(_wrong(lib, out["sums"], want, Path(cache), data))
                    continue
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            if runs[lib]:
                rows[0].times[lib].append(out["epoch1_s"])
                rows[1].times[lib].append(out["epoch2_s"])
            runs[lib] += 1
    check(min(runs.values()) >= 2, f"feed_s3: too few correct runs ({runs}): {rows[0].notes}")
    return rows


def _wrong(lib: str, sums: list[float], want: float, cache: Path, data: FeedData) -> str:
    """A note on a run whose values were wrong: its sums and which cached files differ from
    the ones uploaded (the run is left out of the times)."""
    local = data.path(FORMAT[lib])

    def uploaded(p: Path) -> Path:
        # where the cache keeps a file under the same relative path, or (LitData: a
        # folder per dataset and version) under the same name
        same = local / p.relative_to(cache)
        return same if same.is_file() else local / p.name

    differ = sorted(
        str(p.relative_to(cache))
        for p in cache.rglob("*")
        if p.is_file() and uploaded(p).is_file() and not filecmp.cmp(p, uploaded(p), shallow=False)
    )
    return (
        f"a {lib} run returned wrong values (epoch sums {sums}, expected {want:.6g}); "
        f"cached files that differ from the uploaded ones: {differ or 'none'}; left out"
    )


def feed_s3_read(cfg: Config, server: Server, data: FeedData) -> list[FeedResult]:
    import pyarrow.fs
    import pyarrow.parquet as pq

    from tensorfile import dataset

    data.make(("tf", "parquet"))
    print("uploading the feed data to SeaweedFS...", file=sys.stderr, flush=True)
    tf_url = server.upload(data.path("tf"))
    pq_key = server.upload(data.path("parquet")).removeprefix("s3://")
    srv = server.start()
    host = srv.endpoint.removeprefix("http://")
    fs = pyarrow.fs.S3FileSystem(
        access_key=srv.key, secret_key=srv.secret, region="us-east-1", scheme="http",
        endpoint_override=host,
    )  # fmt: skip

    def tf() -> float:
        ds = dataset.open(tf_url, storage_options=srv.options, cache_dir=False)
        return sum(float(parquet_values(b, WIDTH).sum()) for b in ds.iter_arrow(BATCH))

    def pq_batches() -> float:
        f = pq.ParquetFile(pq_key, filesystem=fs)
        return sum(float(parquet_values(b, WIDTH).sum()) for b in f.iter_batches(BATCH))

    def pq_table() -> float:
        table = pq.read_table(pq_key, filesystem=fs)
        return sum(float(parquet_values(b, WIDTH).sum()) for b in table.to_batches())

    fns = {"tf": tf, "pq_batches": pq_batches, "pq_table": pq_table}
    sums = {name: fn() for name, fn in fns.items()}
    for name, total in sums.items():
        same_sum(sums["tf"], total, f"feed_s3_read ({name})")
    row = FeedResult(
        "feed_s3_read",
        f"read every value back from SeaweedFS, no cache, {data.samples:,} samples x {WIDTH} F32",
        data.samples,
        data.nbytes,
        {
            "tf": "tensorfile iter_arrow(1024)",
            "pq_batches": "pyarrow S3FileSystem, ParquetFile.iter_batches(1024)",
            "pq_table": "pyarrow S3FileSystem, pq.read_table",
        },
        target=1.0,
    )
    row.times = alternate_loaders(fns, max(1, min(cfg.repeat_big, 5)))
    return [row]


def runners(cfg: Config, quick: bool) -> dict[str, Callable[[], list[FeedResult]]]:
    server = Server(cfg)
    data = FeedData(cfg.data, 65_536 // (16 if quick else 1), WIDTH)
    return {
        "feed_s3": lambda: feed_s3(cfg, server, data, quick),
        "feed_s3_read": lambda: feed_s3_read(cfg, server, data),
    }


if __name__ == "__main__" and sys.argv[1:2] == ["child"]:
    child(sys.argv[2:])
