"""One rank of the distributed-checkpoint benchmarks (``benchmarks/dcp_bench.py``), run as a
real process per rank on the gloo backend.

Usage: ``python benchmarks/_dcp_child.py save|load CONFIG.json`` with ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set (one process per rank, as torchrun
starts them). The configuration (written by the runner) names the folders, the writers or
readers, the rounds and the S3 server; rank 0 writes the measurements to ``config["out"]``.

* ``save``: every rank builds its local shards of :data:`SPECS` (DTensors on a 1-D mesh,
  Shard(0) and Shard(1), F32 and BF16), then saves them once per writer untimed (the first
  ``dcp.save`` of a process pays for imports and set-up), then ``rounds`` times per writer,
  the writers' order rotated each round. Before each save the writer's folder is removed and
  ``os.sync()`` runs (both outside the timing), so one save's write-back does not land in the
  next one's time. A save is timed on rank 0 from a barrier to a barrier: the slowest rank's
  time, the coordinator's commit included.
* ``load``: every rank allocates its destination DTensors once (the other placement:
  Shard(1) where the checkpoint was saved Shard(0) and the reverse, so every rank reads a
  slice of every saved shard), loads once per reader untimed into zeroed tensors and checks
  every element, then ``rounds`` times per reader and cache state. Cold loads evict the
  checkpoint's files from the page cache first (``posix_fadvise(DONTNEED)``), warm loads read
  them once first. Each rank counts what it read during the load from ``/proc/self/io``:
  ``read_bytes`` (fetched from the disk) and ``rchar`` (bytes through ``read``-type calls;
  a memory-mapped reader's page faults are not in it). For S3 readers the untimed load goes
  through a byte-counting TCP relay in each rank (the bytes the server sent that rank);
  the timed loads reach the server directly.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Placement, Shard

SPECS: tuple[tuple[str, torch.dtype, int, int], ...] = (
    # name, dtype, saved Shard dim, columns per row (x rows): 256 MiB each at full size
    ("model.layers.0.attn.weight", torch.float32, 0, 8192),
    ("model.layers.0.mlp.weight", torch.float32, 1, 8192),
    ("model.layers.1.attn.weight", torch.bfloat16, 0, 16384),
    ("model.layers.1.mlp.weight", torch.bfloat16, 1, 16384),
)


# --------------------------------------------------------------------------- data


def bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """The slice of a dimension of ``n`` that ``rank`` holds (``torch.chunk``'s split)."""
    step = -(-n // world)
    start = min(rank * step, n)
    return start, min(start + step, n)


def block(k: int, dtype: torch.dtype, cols: int, r: tuple[int, int], c: tuple[int, int]) -> Any:
    """Rows ``r`` x columns ``c`` of tensor ``k``: finite values from a hash of each element's
    position, so any rank can make any box of any tensor without the whole tensor."""
    idx = torch.arange(r[0], r[1], dtype=torch.int64)[:, None] * cols
    h = (idx + torch.arange(c[0], c[1], dtype=torch.int64)[None, :] + (k << 40)) * 2654435761
    h ^= h >> 17
    if dtype == torch.float32:  # sign, exponent of [0.5, 2), 23 random mantissa bits
        return ((h & 0x807FFFFF) | 0x3F000000).to(torch.int32).view(torch.float32)
    return ((h & 0x807F) | 0x3F00).to(torch.int16).view(torch.bfloat16)


def box(dim: int, shape: tuple[int, int], rank: int, world: int) -> tuple[Any, Any]:
    r, c = (0, shape[0]), (0, shape[1])
    if dim == 0:
        r = bounds(shape[0], rank, world)
    else:
        c = bounds(shape[1], rank, world)
    return r, c


def state_dict(mesh: DeviceMesh, rows: int, load: bool) -> dict[str, Any]:
    """The rank's DTensors: the saved placement, or (``load``) the other one, zeroed."""
    rank, world = dist.get_rank(), dist.get_world_size()
    out: dict[str, Any] = {}
    for k, (name, dtype, dim, cols) in enumerate(SPECS):
        dim = 1 - dim if load else dim
        shape = (rows, cols)
        r, c = box(dim, shape, rank, world)
        local = (
            torch.zeros(r[1] - r[0], c[1] - c[0], dtype=dtype)
            if load
            else block(k, dtype, cols, r, c)
        )
        placements: list[Placement] = [Shard(dim)]
        out[name] = DTensor.from_local(
            local, mesh, placements, run_check=False, shape=torch.Size(shape),
            stride=(cols, 1),
        )  # fmt: skip
    return out


def mismatches(sd: dict[str, Any], rows: int) -> list[str]:
    """The tensors whose local shard differs from what was saved (bit for bit)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    bad = []
    for k, (name, dtype, dim, cols) in enumerate(SPECS):
        r, c = box(1 - dim, (rows, cols), rank, world)
        want = block(k, dtype, cols, r, c)
        got = sd[name].to_local()
        itype = torch.int32 if dtype == torch.float32 else torch.int16
        if got.shape != want.shape or not torch.equal(got.view(itype), want.view(itype)):
            bad.append(f"{name} on rank {rank}")
    return bad


# --------------------------------------------------------------------------- measuring


def io_counters(reads: Reads | None = None) -> dict[str, int]:
    """``/proc/self/io``'s counters, and tensorfile's own when ``reads`` is given."""
    out = reads.total() if reads is not None else {}
    with open("/proc/self/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = int(value)
    return out


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def evict(folder: Path) -> None:
    """Drop the folder's files from the page cache (written back first)."""
    for p in files_under(folder):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def page_in(folder: Path) -> None:
    buf = bytearray(16 << 20)
    for p in files_under(folder):
        with p.open("rb", buffering=0) as f:
            while f.readinto(buf):
                pass


class Reads:
    """tensorfile's own counters: every ``ReadStats`` its sources make from now on (the
    requests and bytes each source served), summed on demand."""

    def __init__(self) -> None:
        from tensorfile.core import source

        self.made: list[Any] = []
        init = source.ReadStats.__init__

        def counted(stats: Any, *args: Any, **kwargs: Any) -> None:
            init(stats, *args, **kwargs)
            self.made.append(stats)

        source.ReadStats.__init__ = counted  # type: ignore[method-assign]

    def total(self) -> dict[str, int]:
        return {
            "tf_requests": sum(s.requests for s in self.made),
            "tf_bytes": sum(s.bytes_read for s in self.made),
        }


class Relay:
    """A TCP relay on 127.0.0.1 to ``upstream`` (host, port) that counts the bytes the
    upstream sends back: what a client reading through it fetched from the server."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.received = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._server.accept()
            up = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        buf = bytearray(1 << 20)
        try:
            while n := src.recv_into(buf):
                dst.sendall(memoryview(buf)[:n])
                if count:
                    with self._lock:
                        self.received += n
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


# --------------------------------------------------------------------------- writers, readers


def writer(key: str, folder: str) -> Any:
    """The storage writer named ``key`` (see ``dcp_bench.WRITERS``)."""
    if key in ("tf", "tf_nosync"):
        from tensorfile.distributed import StorageWriter

        return StorageWriter(folder, fsync=key == "tf")
    if key == "hf":
        from torch.distributed.checkpoint import HuggingFaceStorageWriter

        return HuggingFaceStorageWriter(folder, save_distributed=True, enable_consolidation=True)
    if key in ("fs", "fs_nosync"):
        return dcp.FileSystemWriter(folder, sync_files=key == "fs")
    raise SystemExit(f"unknown writer {key!r}")


def reader(key: str, cfg: dict[str, Any], endpoint: str) -> Any:
    """The storage reader named ``key`` (see ``dcp_bench.READERS``); S3 readers reach the
    server at ``endpoint``."""
    if key == "tf":
        from tensorfile.distributed import StorageReader

        return StorageReader(cfg["folders"]["tf"])
    if key == "hf":
        from torch.distributed.checkpoint import HuggingFaceStorageReader

        return HuggingFaceStorageReader(cfg["folders"]["hf"])
    if key == "fs":
        return dcp.FileSystemReader(cfg["folders"]["fs"])
    s3 = cfg["s3"]
    if key == "tf_s3":
        from tensorfile.distributed import StorageReader

        options = {**s3["options"], "endpoint_url": endpoint}
        return StorageReader(s3["urls"]["tf"], storage_options=options)
    if key == "s3tc":
        from s3torchconnector import S3ClientConfig
        from s3torchconnector.dcp import S3StorageReader

        os.environ["AWS_ENDPOINT_URL"] = endpoint  # read when the reader's client is built
        config = S3ClientConfig(force_path_style=True)
        return S3StorageReader(s3["region"], s3["urls"]["fs"], s3client_config=config)
    raise SystemExit(f"unknown reader {key!r}")


def timed(call: Callable[[], object]) -> float:
    """Seconds from a barrier before ``call`` to a barrier after it (the slowest rank)."""
    gc.collect()
    dist.barrier()
    t0 = time.perf_counter()
    call()
    dist.barrier()
    return time.perf_counter() - t0


def rotated(keys: list[str], i: int) -> list[str]:
    return keys[i % len(keys) :] + keys[: i % len(keys)]


# --------------------------------------------------------------------------- phases


def save_phase(cfg: dict[str, Any], mesh: DeviceMesh) -> dict[str, Any]:
    rank = dist.get_rank()
    sd = state_dict(mesh, cfg["rows"], load=False)
    root = Path(cfg["root"])
    keys: list[str] = cfg["writers"]
    times: dict[str, list[float]] = {k: [] for k in keys}

    def once(key: str) -> float:
        folder = root / key
        if rank == 0:
            shutil.rmtree(folder, ignore_errors=True)
            os.sync()
        return timed(lambda: dcp.save(sd, storage_writer=writer(key, str(folder))))

    warmup = {k: once(k) for k in keys}
    for i in range(cfg["rounds"]):
        for key in rotated(keys, i):
            times[key].append(once(key))
            if rank == 0:
                print(f"  dcp save #{i + 1} {key}: {times[key][-1]:.2f} s", file=sys.stderr,
                      flush=True)  # fmt: skip
    dist.barrier()
    return {"warmup_s": warmup, "times_s": times}


def load_phase(cfg: dict[str, Any], mesh: DeviceMesh) -> dict[str, Any]:
    rank = dist.get_rank()
    rows = cfg["rows"]
    sd = state_dict(mesh, rows, load=True)
    s3 = cfg.get("s3")
    relay = None
    if s3 is not None:
        host, _, port = s3["endpoint"].removeprefix("http://").partition(":")
        relay = Relay((host, int(port)))
    folders = {k: Path(v) for k, v in cfg["folders"].items()}
    reads = Reads()
    counted = ("rchar", "read_bytes", "tf_requests", "tf_bytes")

    def load(key: str, endpoint: str) -> Callable[[], object]:
        return lambda: dcp.load(sd, storage_reader=reader(key, cfg, endpoint))

    # untimed: a first load per reader into zeroed tensors, every element checked; S3
    # readers through the counting relay
    checked: dict[str, Any] = {}
    for key in cfg["readers"]:
        for t in sd.values():
            t.to_local().zero_()
        direct = s3["endpoint"] if s3 is not None else ""
        via = f"http://127.0.0.1:{relay.port}" if relay is not None else direct
        before = relay.received if relay is not None else 0
        io0 = io_counters(reads)
        seconds = timed(load(key, via if key in cfg["s3_readers"] else direct))
        io1 = io_counters(reads)
        got = {k: io1[k] - io0[k] for k in counted}
        if relay is not None:
            got["s3_received"] = relay.received - before
        bad = mismatches(sd, rows)
        every: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, {"bytes": got, "bad": bad})
        checked[key] = {
            "first_load_s": seconds,
            "bytes_per_rank": [e["bytes"] for e in every],
            "mismatches": [b for e in every for b in e["bad"]],
        }
    runs: dict[str, list[dict[str, Any]]] = {}
    plan = [(k, c) for k in cfg["readers"] for c in cfg["cache"].get(k, [])]
    for i in range(cfg["rounds"]):
        for key, cache in plan[i % len(plan) :] + plan[: i % len(plan)]:
            if i >= cfg["rounds_of"].get(key, cfg["rounds"]):
                continue
            if rank == 0 and cache in ("cold", "warm"):
                (evict if cache == "cold" else page_in)(folders[key])
            direct = s3["endpoint"] if s3 is not None else ""
            io0 = io_counters(reads)
            seconds = timed(load(key, direct))
            io1 = io_counters(reads)
            got = {k: io1[k] - io0[k] for k in counted}
            every = [None] * dist.get_world_size()
            dist.all_gather_object(every, got)
            runs.setdefault(f"{key}:{cache}", []).append({"s": seconds, "bytes_per_rank": every})
            if rank == 0:
                print(f"  dcp load #{i + 1} {key} {cache}: {seconds:.2f} s", file=sys.stderr,
                      flush=True)  # fmt: skip
    dist.barrier()
    return {"checked": checked, "runs": runs}


def main(argv: list[str]) -> int:
    mode, path = argv
    cfg = json.loads(Path(path).read_text())
    torch.set_num_threads(cfg.get("threads", 1))
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    out = (save_phase if mode == "save" else load_phase)(cfg, mesh)
    if dist.get_rank() == 0:
        Path(cfg["out"]).write_text(json.dumps(out))
    dist.barrier()  # before tearing down: gloo aborts a process whose peer is gone
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
