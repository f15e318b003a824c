"""One rank of the rank-aware load benchmarks (``benchmarks/rankload_bench.py``), a real
process per rank on gloo.

Usage: ``python benchmarks/_rankload_child.py SIDE CONFIG.json`` with ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` set (as torchrun starts them). The configuration names
the checkpoint (a local path, an ``http://`` or an ``s3://`` URL; S3 reached through the
``AWS_*`` environment), the layout and where rank 0 writes every
rank's measurements (a JSON list).

Sides (every rank loads its tensor-parallel slices, :func:`plan_for`, as torch CPU tensors):

* ``coop``: ``tensorfile.distributed.load(source, plan, group=WORLD)``;
* ``alone``: ``tensorfile.distributed.load(source, plan)`` (each rank reads its own slices);
* ``ref``: the reference, ``safetensors.safe_open(path, "pt")`` and per tensor
  ``get_slice(name)[...]`` (an interleaved entry: one ``get_slice`` per interval, then
  ``torch.cat``; a replicated one: ``get_slice(name)[:]``). It cannot read HTTP: from a URL
  the rank first downloads the whole file (one plain GET, ``urllib.request``, streamed in
  8 MiB pieces into a file of its own under ``config["tmp"]``, a tmpfs), inside the timing;
  from ``s3://`` the same with boto3's ``download_file`` (its transfer manager: concurrent
  ranged GETs), the client made before the timing.

Timing: every rank imports its library (the modules tensorfile imports lazily on a first load
included: :data:`PRELOAD`) and initialises the process group, outside the load time; waits at
a barrier, then times its load from there (download included for ``ref``). The parent takes
the maximum over the ranks (the time until the last rank holds its slices) and the wall time
from spawn to the last exit. With ``check`` a CRC-32 of every result tensor's bytes is written too
(after the timing).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import urllib.request  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import safetensors  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

PRELOAD = ("tensorfile.formats.safetensors._format",)
HTTP_PRELOAD = ("tensorfile.sources.http.remote",)
S3_PRELOAD = ("tensorfile.sources.s3.s3_source",)
"""The modules tensorfile's first load of a safetensors file (from HTTP) imports lazily:
imported before the timing, as the reference's ``safetensors`` is (0.2-0.8 s on this machine,
msgspec's import most of it); the wall time counts them."""

# --------------------------------------------------------------------------- the layout


def layout(cfg: dict[str, int]) -> list[tuple[str, tuple[int, ...], str]]:
    """The checkpoint's tensors, in file order: (name, shape, how ranks split it): ``rows``
    (dimension 0: column-parallel output rows, lm_head), ``cols`` (dimension 1:
    row-parallel o_proj and down_proj), ``qkv`` / ``gate_up`` (fused: each rank takes its
    share of every part of dimension 0, as interleaved intervals), ``all`` (replicated:
    norms, embeddings)."""
    h, inter, vocab = cfg["hidden"], cfg["intermediate"], cfg["vocab"]
    out: list[tuple[str, tuple[int, ...], str]] = [("model.embed_tokens.weight", (vocab, h), "all")]
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (h,), "all"),
            (p + "self_attn.qkv_proj.weight", (3 * h, h), "qkv"),
            (p + "self_attn.o_proj.weight", (h, h), "cols"),
            (p + "post_attention_layernorm.weight", (h,), "all"),
            (p + "mlp.gate_up_proj.weight", (2 * inter, h), "gate_up"),
            (p + "mlp.down_proj.weight", (h, inter), "cols"),
        ]
    out += [("model.norm.weight", (h,), "all"), ("lm_head.weight", (vocab, h), "rows")]
    return out


def share(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rank ``rank``'s rows of a dimension of ``n`` split evenly (``n`` divides)."""
    per = n // world
    return rank * per, (rank + 1) * per


def entries(cfg: dict[str, int], rank: int, world: int) -> dict[str, tuple[str, Any]]:
    """Rank ``rank``'s plan, library-neutral: name -> (kind, intervals of its dimension)."""
    out: dict[str, tuple[str, Any]] = {}
    for name, shape, how in layout(cfg):
        if how == "all":
            out[name] = ("all", None)
        elif how in ("rows", "cols"):
            out[name] = (how, share(shape[0 if how == "rows" else 1], rank, world))
        else:
            parts = 3 if how == "qkv" else 2
            part = shape[0] // parts
            a, b = share(part, rank, world)
            out[name] = ("intervals", [(k * part + a, k * part + b) for k in range(parts)])
    return out


def plan_for(cfg: dict[str, int], rank: int, world: int) -> dict[str, Any]:
    """Rank ``rank``'s plan for ``tensorfile.distributed.load``."""
    from tensorfile.distributed import Intervals

    plan: dict[str, Any] = {}
    for name, (kind, iv) in entries(cfg, rank, world).items():
        if kind == "all":
            plan[name] = None
        elif kind == "rows":
            plan[name] = (slice(*iv),)
        elif kind == "cols":
            plan[name] = (slice(None), slice(*iv))
        else:
            plan[name] = Intervals(0, list(iv))
    return plan


# --------------------------------------------------------------------------- the sides


def download(url: str, dest: Path) -> None:
    """One plain GET of the whole file into ``dest``."""
    with urllib.request.urlopen(url) as r, dest.open("wb") as f:
        shutil.copyfileobj(r, f, 8 << 20)


def s3_client() -> Any:
    """boto3's S3 client on the server the environment names (``AWS_ENDPOINT_URL``)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", config=Config(s3={"addressing_style": "path"}))


def load_ref(path: str, cfg: dict[str, int], rank: int, world: int) -> dict[str, torch.Tensor]:
    """The reference: ``get_slice`` per tensor of this rank's plan."""
    out: dict[str, torch.Tensor] = {}
    with safetensors.safe_open(path, framework="pt") as f:
        for name, (kind, iv) in entries(cfg, rank, world).items():
            sl = f.get_slice(name)
            if kind == "all":
                out[name] = sl[:]
            elif kind == "rows":
                out[name] = sl[iv[0] : iv[1]]
            elif kind == "cols":
                out[name] = sl[:, iv[0] : iv[1]]
            else:
                out[name] = torch.cat([sl[a:b] for a, b in iv])
    return out


def crc(t: torch.Tensor) -> int:
    return zlib.crc32(t.contiguous().reshape(-1).view(torch.uint8).numpy())


def io_counters() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, _, v in (line.partition(":") for line in f)}


def peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def main(argv: list[str]) -> int:
    side, config = argv
    cfg = json.loads(Path(config).read_text())
    import_s = time.perf_counter() - T0
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    source, shape = cfg["source"], cfg["layout"]
    counters = None
    s3: Any = None
    local = None
    if side != "ref":
        import tensorfile.distributed as td

        counters = td.LoadCounters()
        plan = plan_for(shape, rank, world)
        remote = HTTP_PRELOAD if source.startswith("http") else ()
        remote = S3_PRELOAD if source.startswith("s3://") else remote
        for module in PRELOAD + remote:
            importlib.import_module(module)
    elif source.startswith("s3://"):
        s3 = s3_client()
    dist.barrier()
    io0 = io_counters()
    t0 = time.perf_counter()
    if side == "ref":
        path = source
        if source.startswith(("http", "s3://")):
            local = Path(cfg["tmp"]) / f"rank{rank}-{os.getpid()}.safetensors"
            if source.startswith("http"):
                download(source, local)
            else:
                bucket, _, key = source.removeprefix("s3://").partition("/")
                s3.download_file(bucket, key, str(local))
            path = str(local)
        got = load_ref(path, shape, rank, world)
    else:
        group = dist.group.WORLD if side == "coop" else None
        got = td.load(source, plan, group=group, counters=counters)
    load_s = time.perf_counter() - t0
    io1 = io_counters()
    if local is not None:
        local.unlink()
    out: dict[str, Any] = {
        "rank": rank,
        "import_s": import_s,
        "load_s": load_s,
        "peak_rss_kib": peak_rss_kib(),
        "disk_read_bytes": io1["read_bytes"] - io0["read_bytes"],
        "result_bytes": sum(t.numel() * t.element_size() for t in got.values()),
    }
    if counters is not None:
        out["counters"] = dict(counters.__dict__)
    if cfg.get("check"):
        out["crc32"] = {name: crc(t) for name, t in got.items()}
        out["shapes"] = {name: list(t.shape) for name, t in got.items()}
    del got
    every: list[Any] = [None] * world
    dist.all_gather_object(every, out)
    if rank == 0:
        Path(cfg["out"]).write_text(json.dumps(every))
    dist.barrier()  # before tearing down: gloo aborts a process whose peer is gone
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
