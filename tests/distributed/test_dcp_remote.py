"""Issue 37's "loading over HTTP and S3 works, and the bytes fetched are within the target":
``dcp.load`` into 3 real gloo ranks with ``tensorfile.distributed.StorageReader`` from an
``http://`` folder (the Range-honouring test server on 127.0.0.1), an ``s3://`` prefix (the
moto S3 server, tensorfile's native S3 client) and through the chunk cache
(``$TENSORFILE_CACHE_DIR``), bit for bit, with all ranks together fetching at most 1.15x the
checkpoint; and what a broken or hostile remote checkpoint gives: a clear tensorfile error,
naming the file, in DCP's ``CheckpointException`` on every rank, never garbage, never a hang.

The checkpoint (8 MiB: three shard files, an index, the objects sidecar) is saved once in
the test process by ``dcp.save`` with ``StorageWriter``; its files hold whole tensors, the
same bytes whatever placement the savers held, and the 3 ranks load them into other
placements: ``Shard(1)`` of a matrix saved row-major, ``Shard(0)`` split unevenly,
``Replicate``, empty shards. The big tensors are much bigger than the read planner's
coalescing gap for remote files (1 MiB): a ``Shard(1)`` load reads one run per row, and the
rows are wide enough here (1.8 MiB) that the gaps between one rank's runs (1.2 MiB) are not
read over, so the byte target measures the reader, not the gap rule. Each rank loads from a
URL of its own (a symlink per rank on the HTTP server, a copy per rank on S3), so the
servers' logs count each rank's bytes. One group of 3 processes runs every load; each
outcome is recorded and checked by its own test below.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.distributed._plugins import reader, writer
from tests.distributed._ranks import (
    DCP,
    Group,
    Rank,
    Scenario,
    dtensor,
    local_chunk,
    mismatches,
    run_groups,
)
from tests.helpers.servers import Logged, start_plain_server, start_range_server

TARGET = 1.15  # all ranks together fetch at most this times the checkpoint
WORLD = 3
SHARD_SIZE = "3MB"  # three shard files and an index
STEP = 7  # the state dict's entry that is not a tensor (it goes to the objects sidecar)
BROKEN = ("truncated", "missing_shard", "missing_objects")


def full_tensors() -> dict[str, torch.Tensor]:
    """FQN -> the whole tensor the checkpoint holds."""
    g = torch.Generator().manual_seed(3737)
    return {
        # rows of 1.8 MiB; 480,001 columns: an uneven split (160,001 / 160,001 / 159,999)
        "big.wide_f32": torch.randn(2, 480_001, generator=g),
        "big.tall_bf16": torch.randn(1000, 1024, generator=g).to(torch.bfloat16),  # 334/334/332
        "big.rows_i64": torch.randint(-(2**40), 2**40, (5, 65_536), generator=g),  # 2/2/1 rows
        "small.rep_f8": torch.randn(3, 5, generator=g).to(torch.float8_e4m3fn),
        "small.mask": torch.arange(5) % 2 == 1,
        "small.tiny": torch.randn(1, 4, generator=g),  # ranks 1 and 2 hold empty shards
        "small.scalar": torch.tensor(2.5),
    }


def load_placements() -> dict[str, Any]:
    """How the 3 ranks hold each tensor when they load it."""
    from torch.distributed.tensor import Replicate, Shard

    return {
        "big.wide_f32": Shard(1),
        "big.tall_bf16": Shard(0),
        "big.rows_i64": Shard(0),
        "small.rep_f8": Replicate(),
        "small.mask": Shard(0),
        "small.tiny": Shard(0),
        "small.scalar": Replicate(),
    }


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fqn, value in flat.items():
        head, leaf = fqn.split(".")
        out.setdefault(head, {})[leaf] = value
    return out


# -- the ranks ------------------------------------------------------------------------------


def _loads(ctx: Rank) -> None:
    """Every load of this module, on every rank: ``<case>`` records "ok" or what
    ``dcp.load`` raised, ``<case>.bad`` what a load that returned got wrong."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import DeviceMesh

    rank, a = ctx.rank, ctx.args
    mesh = DeviceMesh("cpu", list(range(WORLD)))
    full, places = full_tensors(), load_placements()
    want = {n: local_chunk(t, places[n], rank, WORLD) for n, t in full.items()}

    def load(case: str, url: str, **options: Any) -> None:
        zeros = {n: torch.zeros_like(t) for n, t in full.items()}
        sd = _nest({n: dtensor(z, mesh, places[n], rank, WORLD) for n, z in zeros.items()})
        sd["step"] = -1
        if ctx.attempt(case, lambda: dcp.load(sd, storage_reader=reader(url, **options))):
            bad = mismatches({n: sd[n.split(".")[0]][n.split(".")[1]] for n in full}, want)
            if sd["step"] != STEP:
                bad["step"] = repr(sd["step"])
            ctx.record(f"{case}.bad", bad)
        dist.barrier()

    load("http", f"{a['http']}/r{rank}")
    load("s3", f"s3://{a['bucket']}/r{rank}", storage_options=a["s3"])
    # the chunk cache: one folder and one URL for the ranks (one machine); the second
    # load's tensor bytes come from the folder
    os.environ["TENSORFILE_CACHE_DIR"] = a["cache"]
    load("cache_cold", f"{a['http']}/cached")
    ctx.record("cache_mark", len(Path(a["log"]).read_text().splitlines()))
    dist.barrier()
    load("cache_warm", f"{a['http']}/cached")
    del os.environ["TENSORFILE_CACHE_DIR"]
    for case in BROKEN:
        load(case, f"{a['http']}/{case}")
    load("s3_missing_shard", f"s3://{a['bucket']}/missing_shard", storage_options=a["s3"])
    load("no_range", f"{a['plain']}/ckpt")


# -- the test process -----------------------------------------------------------------------


@dataclass
class Setup:
    group: Group
    size: int  # bytes of the checkpoint: every file of it
    shards: list[str]
    sidecar: str
    http_url: str
    http: list[Logged]  # the HTTP server's log, in order
    plain_sent: int  # bytes the server that ignores Range sent
    s3_read: dict[str, int]  # bytes fetched from S3, per object path
    bucket: str

    def http_bytes(self, prefix: str, lines: slice = slice(None)) -> int:
        return sum(x.body_bytes for x in self.http[lines] if x.uri.startswith(prefix))

    def s3_bytes(self, prefix: str) -> int:
        return sum(n for path, n in self.s3_read.items() if path.startswith(prefix))


def _save(folder: Path) -> None:
    """The checkpoint, saved by ``dcp.save`` in this one process."""
    import torch.distributed.checkpoint as dcp

    sd = {**_nest(full_tensors()), "step": STEP}
    dcp.save(sd, storage_writer=writer(folder, max_shard_size=SHARD_SIZE), no_dist=True)


def _broken(ckpt: Path, root: Path, shards: list[str], sidecar: str) -> None:
    """The broken copies of ``ckpt`` under ``root``."""
    for case in BROKEN:
        shutil.copytree(ckpt, root / case)
    # a shard whose header's data_offsets run past the end of the file
    with open(root / "truncated" / shards[1], "r+b") as f:
        f.truncate(os.path.getsize(root / "truncated" / shards[1]) - 4096)
    (root / "missing_shard" / shards[2]).unlink()  # the index names it: a 404
    (root / "missing_objects" / sidecar).unlink()  # every header names it: a 404


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, s3: Any) -> Setup:
    tmp = tmp_path_factory.mktemp("dcp_remote")
    root = tmp / "www"
    ckpt = root / "ckpt"
    root.mkdir()
    with warnings.catch_warnings():  # (DCP's note that it saves from one process)
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        _save(ckpt)
    files = sorted(os.listdir(ckpt))
    size = sum(os.path.getsize(ckpt / n) for n in files)
    shards = [n for n in files if n.endswith(".safetensors")]
    sidecar = next(n for n in files if n.startswith("model.dcp-objects-"))
    assert len(shards) == 3 and "model.safetensors.index.json" in files, files
    for name in [f"r{r}" for r in range(WORLD)] + ["cached"]:
        os.symlink(ckpt, root / name)
    _broken(ckpt, root, shards, sidecar)
    bucket = s3.bucket()
    uploads = [(f"r{r}", ckpt) for r in range(WORLD)] + [("missing_shard", root / "missing_shard")]
    for prefix, folder in uploads:
        for n in os.listdir(folder):
            s3.fs.put_file(str(folder / n), f"{bucket}/{prefix}/{n}")
    shutil.copytree(ckpt, tmp / "plain" / "ckpt")
    http, stop_http = start_range_server(root, tmp / "access.log", etag=True)  # (ETag: cached)
    plain, stop_plain = start_plain_server(tmp / "plain")
    args = {
        "http": http.url,
        "plain": plain.url,
        "bucket": bucket,
        "s3": s3.options,
        "cache": str(tmp / "cache"),
        "log": str(tmp / "access.log"),
    }
    try:
        with s3.recording() as recorded:
            scenario = Scenario(_loads, WORLD, args, timeout=120, grace=15, folder=tmp / "group")
            group = run_groups({"group": scenario}, tmp / "driver", DCP)["group"]
        log = http.requests()
        sent = sum(plain.sent or [])
    finally:
        stop_http.terminate()
        stop_plain.terminate()
    read = s3.bytes_read(recorded)
    return Setup(group, size, shards, sidecar, http.url, log, sent, read, bucket)


def _loaded_bit_for_bit(s: Setup, case: str) -> None:
    s.group.ok(case)
    assert s.group.get(f"{case}.bad") == [{}] * WORLD  # every tensor and the step


def _within_target(s: Setup, per_rank: list[int], where: str) -> None:
    total = sum(per_rank)
    assert total <= TARGET * s.size, (
        f"{where}: the ranks fetched {per_rank} bytes, {total / s.size:.3f}x the "
        f"checkpoint's {s.size}"
    )


def test_http_load_is_bit_for_bit_within_the_byte_target(setup: Setup) -> None:
    _loaded_bit_for_bit(setup, "http")
    per_rank = [setup.http_bytes(f"/r{r}/") for r in range(WORLD)]
    # every rank fetched its own part (a third of the big tensors' bytes, about)
    assert all(n > setup.size / 4 for n in per_rank), per_rank
    _within_target(setup, per_rank, "HTTP")


def test_s3_load_is_bit_for_bit_within_the_byte_target(setup: Setup) -> None:
    _loaded_bit_for_bit(setup, "s3")
    per_rank = [setup.s3_bytes(f"/{setup.bucket}/r{r}/") for r in range(WORLD)]
    assert all(n > setup.size / 4 for n in per_rank), per_rank
    _within_target(setup, per_rank, "S3")


def test_chunk_cache_serves_the_second_load(setup: Setup) -> None:
    """With ``$TENSORFILE_CACHE_DIR`` set in the ranks, remote files go through the chunk
    cache: the second load of the same URL gets the tensors' bytes from the cache folder
    (the server sends only the small first requests and the index and sidecar)."""
    _loaded_bit_for_bit(setup, "cache_cold")
    _loaded_bit_for_bit(setup, "cache_warm")
    mark = setup.group.get("cache_mark")[0]
    cold = setup.http_bytes("/cached/", slice(None, mark))
    warm = setup.http_bytes("/cached/", slice(mark, None))
    assert cold >= setup.size, cold
    assert warm < setup.size / 100, f"the second load fetched {warm} bytes again"
    assert any((setup.group.folder.parent / "cache").rglob("*")), "nothing in the cache folder"


@pytest.mark.parametrize(
    ("case", "where", "what"),
    [
        (
            "truncated",
            "{http}/truncated/{shard1}",
            r"tensor data ends at byte \d+ of the file, but the file is \d+ bytes long",
        ),
        ("missing_shard", "{http}/missing_shard/{shard2}", "HTTP 404"),
        (
            "missing_objects",
            "{http}/missing_objects/{sidecar}",
            "the checkpoint names it.* missing",
        ),
        ("s3_missing_shard", "s3://{bucket}/missing_shard/{shard2}", "HTTP 404.*NoSuchKey"),
    ],
)
def test_a_broken_remote_checkpoint_is_a_clear_error_on_every_rank(
    setup: Setup, case: str, where: str, what: str
) -> None:
    """DCP raises its ``CheckpointException`` on every rank; each holds tensorfile's error,
    which names the file (its URL) and says what is wrong; no rank loaded anything."""
    s = setup
    url = where.format(
        http=s.http_url, bucket=s.bucket, shard1=s.shards[1], shard2=s.shards[2], sidecar=s.sidecar
    )
    for r, text in enumerate(s.group.get(case)):
        assert text.startswith("torch.distributed.checkpoint.api.CheckpointException"), text
        assert re.search(re.escape(url) + ": " + what, text), f"rank {r}: {text[-2000:]}"
        assert f"{case}.bad" not in s.group.records[r]


def test_a_server_that_ignores_range_still_loads_bit_for_bit(setup: Setup) -> None:
    """Python's ``http.server`` sends the whole file for every request: the HTTP transport
    reads each reply only as far as it needs (under its 64 MiB limit), so the load is
    right, at a cost of bytes, never garbage."""
    _loaded_bit_for_bit(setup, "no_range")
    assert setup.plain_sent >= setup.size
