"""Loads from a real S3 server on 127.0.0.1 (SeaweedFS), tensorfile against its peers.

Rows (fresh process per load, loaders alternated, medians; see ``benchmarks/remote_load.py``):

* ``s3_load_1g``: the 1 GiB file (16 x 64 MiB F32), every tensor a torch CPU tensor:
  ``tensorfile.safetensors.torch.load_file("s3://...", backend="pread")`` against the Run:ai
  streamer's S3 backend (``SafetensorsStreamer().stream_file("s3://...")``), boto3
  ``get_object(...)["Body"].read()`` + ``safetensors.torch.load``, and s3fs ``cat_file`` +
  ``safetensors.torch.load``;
* ``s3_load_4g_sharded``: a 4-shard 4 GiB checkpoint: ``load_sharded`` of its index (one
  plan for all shards) against the streamer's ``stream_files`` of the four shards and the
  same boto3 and s3fs loops (two repetitions by default: ~80 s each).

The server is ``weed server -s3`` (tests/helpers/seaweed.py) keeping its data in
``bench-data/seaweed/``, so the objects are uploaded once. Clients reach it through the
usual environment: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION=us-east-1``, ``AWS_EC2_METADATA_DISABLED=true``, and for the streamer
``RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0`` and ``RUNAI_STREAMER_LOG_LEVEL=WARNING``.

Caveats: client and server share the machine's cores (2 here), so the server's work is part
of every loader's time; loopback has no network latency. tensorfile's bytes are checked
against the file (CRC-32 of every tensor) before timing, and so are the peers' on the 1 GiB
row.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import N_BIG, Config
from benchmarks.remote_load import LoadResult, crcs, make_shards, run_row

S3_BENCHMARKS = ("s3_load_1g", "s3_load_4g_sharded")
BUCKET = "tf-bench"
SETTLE = 2.0


def _upload(server: Any, path: Path, key: str) -> str:
    """``s3://`` URL of ``path`` on the server, uploaded unless an object of its size is
    there already."""
    client = server.client
    try:
        size = client.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
    except client.exceptions.ClientError:
        size = None
    if size != path.stat().st_size:
        print(f"uploading {path.name} to SeaweedFS...", flush=True)
        client.upload_file(str(path), BUCKET, key)
    return f"s3://{BUCKET}/{key}"


def runners(cfg: Config, settle: float = SETTLE) -> dict[str, Callable[[], LoadResult]]:
    """The S3 rows by name (one server, started on first use)."""
    state: dict[str, Any] = {}

    def server() -> Any:
        if "server" not in state:
            from tests.helpers import seaweed

            srv = seaweed.start(data=cfg.data / "seaweed")
            atexit.register(srv.stop)
            try:
                srv.client.create_bucket(Bucket=BUCKET)
            except srv.client.exceptions.ClientError:
                pass  # there from an earlier run
            state["server"] = srv
            state["env"] = {
                **srv.env,
                "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
                "RUNAI_STREAMER_LOG_LEVEL": "WARNING",
            }
        return state["server"]

    def one_file() -> LoadResult:
        srv = server()
        url = _upload(srv, cfg.big_path, cfg.big_path.name)
        row = LoadResult(
            "s3_load_1g",
            f"S3 (SeaweedFS), {N_BIG} x {cfg.big_numel * 4 >> 20} MiB F32, torch CPU tensors",
            cfg.big_bytes,
            ["tf", "runai", "boto3", "s3fs"],
        )
        argv: dict[str, tuple[list[str], str | None]] = {n: ([url], None) for n in row.loaders}
        loaders = list(row.loaders)
        return run_row(
            row, argv, state["env"], crcs([cfg.big_path]), loaders, cfg.repeat_big, settle
        )

    def sharded() -> LoadResult:
        srv = server()
        index, paths = make_shards(cfg.data, cfg.big_numel, N_BIG)
        prefix = index.parent.name
        urls = [_upload(srv, p, f"{prefix}/{p.name}") for p in paths]
        index_url = _upload(srv, index, f"{prefix}/{index.name}")
        row = LoadResult(
            "s3_load_4g_sharded",
            f"S3 (SeaweedFS), 4 shards x {N_BIG} x {cfg.big_numel * 4 >> 20} MiB F32",
            4 * cfg.big_bytes,
            ["tf", "runai", "boto3", "s3fs"],
        )
        argv: dict[str, tuple[list[str], str | None]] = {n: (urls, None) for n in row.loaders}
        argv["tf"] = (urls, index_url)
        repeat = max(1, cfg.repeat_big - 3)  # ~80 s a repetition
        return run_row(row, argv, state["env"], crcs(paths), ["tf"], repeat, settle)

    return {"s3_load_1g": one_file, "s3_load_4g_sharded": sharded}
