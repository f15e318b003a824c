"""Issue 37's "save to object stores": ``dcp.save`` from 2 real gloo ranks to an ``s3://``
folder (the moto S3 server) writes the same hub checkpoint as to a local folder, one
multipart upload per file: parts one rank holds whole are uploaded by that rank (a 12 MiB
``Shard(0)`` tensor: 6 MiB each, over S3's 5 MiB minimum), parts mixing ranks' bytes (the
header, small tensors, a ``Shard(1)`` tensor's rows) by the coordinator, the index last.
A second save over the first (one file; shards with the same names) leaves only the second,
whole; a save that another job published over since it planned publishes nothing and
leaves no upload behind.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch

import tensorfile
from tensorfile.errors import ConcurrentWriteError
from tests.distributed._plugins import writer
from tests.distributed._ranks import DCP, Group, Rank, Scenario, dtensor, run_groups

WORLD = 2
CASES = {"one": "5GB", "sharded": "8MB"}


def full_tensors(value: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(value)
    return {
        "big": torch.randn(1536, 2048, generator=g),  # 12 MiB, Shard(0): 6 MiB per rank
        "wide": torch.randn(64, 4096, generator=g).to(torch.bfloat16),  # Shard(1): mixed parts
        "small": torch.arange(10) * value,
        "flag": torch.tensor(value % 2 == 1),
        "scalar": torch.tensor(float(value)),
    }


def _state_dict(mesh: Any, rank: int, value: int) -> dict[str, Any]:
    from torch.distributed.tensor import Replicate, Shard

    places = {"big": Shard(0), "wide": Shard(1), "small": Replicate(), "flag": Replicate(),
              "scalar": Replicate()}  # fmt: skip
    sd: dict[str, Any] = {
        n: dtensor(t, mesh, places[n], rank, WORLD) for n, t in full_tensors(value).items()
    }
    sd["step"] = value
    return sd


def _saves(ctx: Rank) -> None:
    """Each case saved twice (values 1, then 2) to its own prefix."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import DeviceMesh

    mesh = DeviceMesh("cpu", list(range(WORLD)))
    for case, size in CASES.items():
        for value in (1, 2):
            sd = _state_dict(mesh, ctx.rank, value)
            url = f"s3://{ctx.args['bucket']}/{case}"
            w = writer(url, max_shard_size=size, storage_options=ctx.args["s3"])
            ctx.attempt(f"{case}{value}", lambda sd=sd, w=w: dcp.save(sd, storage_writer=w))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, s3: Any) -> tuple[Group, Any, str]:
    bucket = s3.bucket()
    folder = tmp_path_factory.mktemp("dcp_s3_save")
    scenario = Scenario(_saves, WORLD, {"bucket": bucket, "s3": s3.options}, timeout=120, grace=15)
    group = run_groups({"group": scenario}, folder, DCP)["group"]
    return group, s3, bucket


def _files(s3: Any, prefix: str) -> dict[str, bytes]:
    fs = s3.fs
    fs.invalidate_cache()
    return {p.rsplit("/", 1)[1]: fs.cat_file(p) for p in fs.ls(prefix)}


@pytest.mark.parametrize("case", list(CASES))
def test_a_save_to_s3_is_the_hub_checkpoint_of_the_last_save(
    saved: tuple[Group, Any, str], case: str
) -> None:
    group, s3, bucket = saved
    group.ok(f"{case}1")
    group.ok(f"{case}2")
    files = _files(s3, f"{bucket}/{case}")
    shards = sorted(n for n in files if n.endswith(".safetensors"))
    sidecars = [n for n in files if n.startswith("model.dcp-objects-")]
    if case == "one":
        assert shards == ["model.safetensors"] and "model.safetensors.index.json" not in files
    else:
        assert len(shards) > 1 and "model.safetensors.index.json" in files
    assert len(sidecars) == 1  # the first save's objects file went with it
    got: dict[str, torch.Tensor] = {}
    for name in shards:  # the reference reads every file as it is
        got.update(safetensors.torch.load(files[name]))
    want = full_tensors(2)
    assert sorted(got) == sorted(want)
    for name, t in want.items():
        assert got[name].dtype == t.dtype and torch.equal(got[name], t), name
    uploads = s3.fs.call_s3("list_multipart_uploads", Bucket=bucket)
    assert not uploads.get("Uploads"), uploads  # every upload completed


def test_a_save_published_over_since_it_planned_publishes_nothing(s3: Any, tmp_path: Path) -> None:
    """Another job's save lands between this one's plan and its publication: this one
    fails with ConcurrentWriteError, the other's checkpoint stays, no upload is left."""
    import torch.distributed.checkpoint as dcp

    from tensorfile.distributed import StorageWriter

    bucket = s3.bucket()
    url = f"s3://{bucket}/ck"

    class Overtaken(StorageWriter):
        def finish(self, metadata: Any, results: Any) -> None:
            other = StorageWriter(url, storage_options=s3.options)
            dcp.save({"w": torch.ones(3)}, storage_writer=other, no_dist=True)
            super().finish(metadata, results)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        with pytest.raises(BaseException) as caught:
            mine = Overtaken(url, storage_options=s3.options)
            dcp.save({"w": torch.zeros(3)}, storage_writer=mine, no_dist=True)
    assert isinstance(caught.value, ConcurrentWriteError) or "ConcurrentWriteError" in repr(
        caught.value
    )
    files = _files(s3, f"{bucket}/ck")
    assert safetensors.torch.load(files["model.safetensors"])["w"].tolist() == [1.0] * 3
    assert not s3.fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")
    with tensorfile.open(io.BytesIO(files["model.safetensors"]).getvalue()) as f:
        assert f.keys() == ["w"]


def test_a_held_publication_lock_fails_a_save_and_a_stale_one_is_taken_over(s3: Any) -> None:
    """Another save's publication lock (made a moment ago) makes this save fail with
    ConcurrentWriteError before it publishes: the checkpoint stays, no upload is left, the
    lock stays the other's. A lock older than 15 minutes (a killed save's) is taken over,
    and removed once the save is published."""
    import json
    import time

    import torch.distributed.checkpoint as dcp

    from tensorfile.distributed import StorageWriter

    bucket = s3.bucket()
    url = f"s3://{bucket}/ck"

    def save(v: float) -> None:
        w = StorageWriter(url, max_shard_size=300, storage_options=s3.options)
        dcp.save({"a": torch.full((64,), v), "b": torch.full((64,), v)}, storage_writer=w,
                 no_dist=True)  # fmt: skip

    def loaded() -> list[float]:
        files = _files(s3, f"{bucket}/ck")
        got: dict[str, torch.Tensor] = {}
        for name in sorted(n for n in files if n.endswith(".safetensors")):
            got.update(safetensors.torch.load(files[name]))
        return [got["a"][0].item(), got["b"][0].item()]

    lock = f"{bucket}/ck/.tensorfile-dcp-publishing"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        save(1.0)
        held = json.dumps({"save": "other", "since": time.time()}).encode()
        s3.fs.pipe_file(lock, held)
        with pytest.raises(BaseException) as caught:
            save(2.0)
        assert isinstance(caught.value, ConcurrentWriteError) or "ConcurrentWriteError" in repr(
            caught.value
        )
        assert "is publishing" in str(caught.value)
        assert loaded() == [1.0, 1.0]
        assert not s3.fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")
        s3.fs.invalidate_cache()
        assert s3.fs.cat_file(lock) == held
        stale = json.dumps({"save": "killed", "since": time.time() - 16 * 60}).encode()
        s3.fs.pipe_file(lock, stale)
        save(3.0)
    assert loaded() == [3.0, 3.0]
    s3.fs.invalidate_cache()
    assert not s3.fs.exists(lock)
