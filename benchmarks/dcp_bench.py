"""Distributed checkpoints (``torch.distributed.checkpoint``, DCP) on gloo: tensorfile's
``StorageWriter``/``StorageReader`` against torch's own storage plugins, with real processes
per rank (``benchmarks/_dcp_child.py``, started as torchrun would: ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``).

The state dict: 1 GiB of DTensors on a 1-D mesh, four 2-D tensors of 256 MiB (F32 8192 x
8192 and BF16 8192 x 16384, one of each saved Shard(0) and Shard(1)). ``--quick``: 1024 rows
(128 MiB in all).

Rows (``--only dcp`` selects both):

* ``dcp_save_1g``: ``dcp.save`` from 2 ranks. Writers: tensorfile ``StorageWriter(path,
  fsync=True)``; torch's ``HuggingFaceStorageWriter(path, save_distributed=True,
  enable_consolidation=True)`` (the same result: a hub checkpoint of whole tensors; it writes
  per-rank files under ``sharded/``, then the coordinator copies them into the consolidated
  file; it fsyncs, ``sync_files`` being forced on); DCP's ``FileSystemWriter(path)`` (its own
  ``.distcp`` format; ``sync_files=True``, its default). The same two without fsync
  (tensorfile's default ``fsync=False``, ``FileSystemWriter(sync_files=False)``) for
  information. All ``thread_count`` at their defaults.
* ``dcp_load_1g``: ``dcp.load`` into 3 ranks with the other placement (Shard(1) where saved
  Shard(0) and the reverse), from a cold page cache and from a warm one: tensorfile
  ``StorageReader`` on tensorfile's checkpoint, ``HuggingFaceStorageReader`` on torch's
  consolidated hub checkpoint, ``FileSystemReader`` on the ``.distcp`` checkpoint; and from
  S3 (SeaweedFS on 127.0.0.1, ``tests/helpers/seaweed.py``): tensorfile
  ``StorageReader("s3://...")`` against s3torchconnector's ``S3StorageReader`` (the DCP
  reader of AWS's connector, on the ``.distcp`` checkpoint uploaded beside). torch's own
  readers cannot read S3. Three table rows: ``dcp_load_cold``, ``dcp_load_warm``,
  ``dcp_load_s3``.

How it runs: one process group per phase (2 ranks save, then 3 ranks load), kept for every
run of the phase. Each writer saves once untimed (the first ``dcp.save`` of a process costs
0.5-0.9 s of set-up), each reader loads once untimed into zeroed tensors that are then
checked element by element; then ``--repeat`` rounds (4; quick 2; at most 2 for the S3
row, whose loads take the longest), the sides' order rotated each round. Times are from a
barrier before the call to a barrier after it, taken on rank 0. Ratios: peer's median ÷
tensorfile's (> 1: tensorfile faster), with the range of the per-round ratios.

Bytes fetched, per rank, from ``/proc/self/io`` around each load: ``read_bytes`` (from the
disk: cold rows; the page cache is shared, so a page one rank faulted in is not fetched
again for another) and ``rchar`` (through ``read``-like calls: what the rank asked the
kernel for; page faults of a memory map are not counted, so a mapping reader shows near
zero). S3: the bytes the server sent each rank, counted by a TCP relay in the rank during
the untimed load. tensorfile's sources also count their reads (requests, for S3) per
rank. The target: all ranks together at most 1.15x the checkpoint's tensor
bytes. The cold row's floors: tensorfile's checkpoint read alone with ``O_DIRECT`` on 8
threads, in a fresh process (``benchmarks/cold_bench.py``), and by ``cat`` (buffered, the
kernel's read-ahead). The S3 row's floor: tensorfile's requests at the rate SeaweedFS
answers small range GETs alone (4,000 of 11 KiB, 16 in flight, measured after the loads).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.cold_bench import evict, files_of, floors
from benchmarks.common import REPO, Config, check

DCP_BENCHMARKS = ("dcp_save_1g", "dcp_load_1g")
DCP_GROUP = "dcp"
"""``--only`` name that selects every row above."""

CHILD = REPO / "benchmarks" / "_dcp_child.py"
SAVE_WORLD, LOAD_WORLD = 2, 3
BUCKET, REGION = "tf-bench", "us-east-1"
BYTES_TARGET = 1.15
"""All ranks together fetch at most this many times the checkpoint's bytes."""

WRITERS = {
    "tf": "tensorfile StorageWriter(fsync=True)",
    "hf": "torch HuggingFaceStorageWriter(save_distributed=True, enable_consolidation=True); "
    "fsyncs (always)",
    "fs": "DCP FileSystemWriter (sync_files=True, its default)",
    "tf_nosync": "tensorfile StorageWriter(fsync=False), its default",
    "fs_nosync": "DCP FileSystemWriter(sync_files=False)",
}
READERS = {
    "tf": "tensorfile StorageReader (tensorfile's checkpoint)",
    "hf": "torch HuggingFaceStorageReader (its consolidated checkpoint)",
    "fs": "DCP FileSystemReader (.distcp)",
    "tf_s3": "tensorfile StorageReader('s3://...')",
    "s3tc": "s3torchconnector S3StorageReader (.distcp)",
}
# (row, peer, tensorfile, target, whether the issue states it)
PAIRS: dict[str, list[tuple[str, str, float, bool]]] = {
    "dcp_save_1g": [("hf", "tf", 3.0, True), ("fs", "tf", 0.9, True),
                    ("fs_nosync", "tf_nosync", 0.9, False)],
    "dcp_load_cold": [("hf", "tf", 1.0, True), ("fs", "tf", 1.0, True)],
    "dcp_load_warm": [("hf", "tf", 1.0, False), ("fs", "tf", 1.0, False)],
    "dcp_load_s3": [("s3tc", "tf_s3", 1.2, True)],
}  # fmt: skip
LOCAL_READERS = ["tf", "hf", "fs"]
S3_READERS = ["tf_s3", "s3tc"]


@dataclass
class DcpResult:
    """One table row: every side's timed runs (and bytes fetched), the pairs' ratios."""

    name: str
    description: str
    nbytes: int
    world: int
    rounds: int
    sides: dict[str, dict[str, Any]] = field(default_factory=dict)
    floors: dict[str, list[float]] = field(default_factory=dict)

    def median(self, key: str) -> float:
        return float(statistics.median(self.sides[key]["times_s"]))

    def pairs(self) -> list[dict[str, Any]]:
        out = []
        for peer, tf, target, stated in PAIRS[self.name]:
            ratio = self.median(peer) / self.median(tf)
            pairs = zip(self.sides[peer]["times_s"], self.sides[tf]["times_s"], strict=True)
            runs = [p / t for p, t in pairs]
            out.append(
                {"peer": peer, "tensorfile": tf, "ratio": ratio, "run_ratios": runs,
                 "target": target, "target_in_issue": stated, "met": ratio >= target}
            )  # fmt: skip
        return out

    def to_json(self) -> dict[str, Any]:
        sides = {}
        for key, side in self.sides.items():
            median = self.median(key)
            sides[key] = {**side, "median_s": median, "gbps": self.nbytes / median / 1e9}
        return {
            "name": self.name,
            "description": self.description,
            "bytes": self.nbytes,
            "world": self.world,
            "rounds": self.rounds,
            "sides": sides,
            "pairs": self.pairs(),
            "bytes_target": BYTES_TARGET,
            "floors_s": {
                k: {"runs": v, "median": statistics.median(v)} for k, v in self.floors.items()
            },
        }


def markdown(results: list[DcpResult]) -> str:
    """A compact console table (the docs page renders the JSON in full)."""
    lines = ["| row | side | median (s) | fetched ÷ checkpoint |", "|---|---|---:|---:|"]
    for r in results:
        for key, side in r.sides.items():
            fetched = side.get("fetched_over_checkpoint")
            shown = "" if fetched is None else f"{fetched:.2f}"
            lines.append(f"| {r.name} | {side['what']} | {r.median(key):.2f} | {shown} |")
        for p in r.pairs():
            met = "met" if p["met"] else "NOT met"
            lo, hi = min(p["run_ratios"]), max(p["run_ratios"])
            lines.append(
                f"| {r.name} | {p['peer']} ÷ {p['tensorfile']} | **{p['ratio']:.2f}** "
                f"({lo:.2f}–{hi:.2f}) | target ≥ {p['target']}: {met} |"
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(
    mode: str,
    world: int,
    config: dict[str, Any],
    root: Path,
    env: dict[str, str],
    child: Path = CHILD,
) -> Any:
    """Run the ranks of one phase (``child MODE CONFIG.json`` per rank); rank 0's
    measurements. One failing rank stops them all (the others would wait for it in a
    collective)."""
    cfg_path, out = root / f"{mode}-config.json", root / f"{mode}-result.json"
    out.unlink(missing_ok=True)
    cfg_path.write_text(json.dumps({**config, "out": str(out)}))
    port = _free_port()
    procs = []
    for rank in range(world):
        rank_env = {**os.environ, **env, "RANK": str(rank), "WORLD_SIZE": str(world),
                    "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port)}  # fmt: skip
        argv = [sys.executable, str(child), mode, str(cfg_path)]
        procs.append(subprocess.Popen(argv, cwd=REPO, env=rank_env))
    try:
        while any(p.poll() is None for p in procs):
            failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
            check(not failed, f"{child.stem} {mode}: a rank exited {failed[0] if failed else ''}")
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = [p.returncode for p in procs]
    check(codes == [0] * world, f"{child.stem} {mode}: ranks exited {codes}")
    return json.loads(out.read_text())


# --------------------------------------------------------------------------- rows


def upload(srv: Any, folder: Path, prefix: str) -> str:
    """Upload every file under ``folder`` to ``s3://BUCKET/prefix/``; the folder's URL."""
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            srv.client.upload_file(str(p), BUCKET, f"{prefix}/{p.relative_to(folder)}")
    return f"s3://{BUCKET}/{prefix}"


def cat(folder: Path) -> float:
    """Seconds for ``cat`` to read the folder's safetensors files from a cold page cache to
    ``/dev/null`` (one sequential reader, the kernel's read-ahead)."""
    files = files_of(folder)
    evict(folder)
    t0 = time.perf_counter()
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def small_get_rate(srv: Any, count: int = 4000, size: int = 11 << 10) -> float:
    """Range GETs per second the server answers alone: ``count`` reads of ``size`` bytes
    (a column slab's row here) at spread offsets of a 64 MiB object, 16 in flight, by
    tensorfile's S3 client."""
    from concurrent.futures import ThreadPoolExecutor

    from tensorfile.sources.s3.s3_source import S3Source

    blob, key = 64 << 20, "dcp/rate-probe"
    srv.client.put_object(Bucket=BUCKET, Key=key, Body=os.urandom(blob))
    offsets = [(i * (32 << 10)) % (blob - size) for i in range(count)]
    with S3Source(f"s3://{BUCKET}/{key}", **srv.options) as src:

        def read(at: int) -> None:
            src.readinto(at, [memoryview(bytearray(size))])

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(read, offsets[:100]))  # connections opened
            t0 = time.perf_counter()
            list(pool.map(read, offsets))
            return count / (time.perf_counter() - t0)


def _median_bytes(runs: list[list[dict[str, int]]], what: str) -> list[int]:
    """Each rank's median of ``what`` over runs (each run: one dict per rank)."""
    return [int(statistics.median(run[r][what] for run in runs)) for r in range(len(runs[0]))]


def runners(cfg: Config, quick: bool, repeat: int | None) -> dict[str, Callable[[], Any]]:
    """The DCP rows by name; the load row saves the checkpoints first when the save row did
    not run."""
    rows = 1024 if quick else 8192
    rounds = repeat if repeat is not None else 2 if quick else 4
    s3_rounds = min(rounds, 2)  # the slowest loads (10-40 s each at full size)
    nbytes = rows * (8192 * 4 * 2 + 16384 * 2 * 2)
    root = cfg.data / "dcp"
    saved = root / "save"
    state: dict[str, Any] = {}
    # the checkpoints are written anew by every run: gigabytes nothing reuses
    atexit.register(shutil.rmtree, root, ignore_errors=True)

    def save(rounds: int) -> dict[str, Any]:
        shutil.rmtree(root, ignore_errors=True)
        saved.mkdir(parents=True)
        config = {"root": str(saved), "rows": rows, "rounds": rounds, "writers": list(WRITERS)}
        out = spawn("save", SAVE_WORLD, config, root, {})
        for key in ("tf_nosync", "fs_nosync"):  # disk nothing reads
            shutil.rmtree(saved / key, ignore_errors=True)
        shutil.rmtree(saved / "hf" / "sharded", ignore_errors=True)  # torch's per-rank copy
        state["saved"] = True
        return dict(out)

    def save_row() -> DcpResult:
        out = save(rounds)
        row = DcpResult(
            "dcp_save_1g",
            f"dcp.save of {nbytes >> 20} MiB of DTensors (F32 and BF16, Shard(0) and Shard(1)) "
            f"from {SAVE_WORLD} ranks",
            nbytes,
            SAVE_WORLD,
            rounds,
        )
        for key, what in WRITERS.items():
            row.sides[key] = {"what": what, "times_s": out["times_s"][key],
                              "warmup_s": out["warmup_s"][key]}  # fmt: skip
        return row

    def load_rows() -> list[DcpResult]:
        if not state.get("saved"):
            save(0)
        from tests.helpers import seaweed

        srv = seaweed.start()
        try:
            srv.client.create_bucket(Bucket=BUCKET)
            print("uploading the checkpoints to SeaweedFS...", file=sys.stderr, flush=True)
            urls = {"tf": upload(srv, saved / "tf", "dcp/tf"),
                    "fs": upload(srv, saved / "fs", "dcp/fs")}  # fmt: skip
            cache = {k: ["cold", "warm"] for k in LOCAL_READERS} | {k: ["s3"] for k in S3_READERS}
            config = {
                "rows": rows,
                "rounds": rounds,
                "rounds_of": dict.fromkeys(S3_READERS, s3_rounds),
                "readers": list(READERS),
                "s3_readers": S3_READERS,
                "cache": cache,
                "folders": {k: str(saved / k) for k in ("tf", "hf", "fs")},
                "s3": {"endpoint": srv.endpoint, "options": srv.options, "urls": urls,
                       "region": REGION},
            }  # fmt: skip
            out = spawn("load", LOAD_WORLD, config, root, srv.env)
            rates = [small_get_rate(srv) for _ in range(3)]
        finally:
            srv.stop()
        disk = floors(saved / "tf", min(rounds, 3), 0.0, ("disk O_DIRECT",))
        disk["disk buffered (cat)"] = [cat(saved / "tf") for _ in range(min(rounds, 3))]
        checked = out["checked"]
        bad = [m for c in checked.values() for m in c["mismatches"]]
        check(not bad, f"dcp_load: loaded values differ: {bad[:5]}")
        what = f"dcp.load of {nbytes >> 20} MiB into {LOAD_WORLD} ranks, placements swapped"
        result = []
        for name, keys, cache, how in (
            ("dcp_load_cold", LOCAL_READERS, "cold", "cold page cache"),
            ("dcp_load_warm", LOCAL_READERS, "warm", "warm page cache"),
            ("dcp_load_s3", S3_READERS, "s3", "from S3 (SeaweedFS on 127.0.0.1)"),
        ):
            n = s3_rounds if cache == "s3" else rounds
            row = DcpResult(name, f"{what}, {how}", nbytes, LOAD_WORLD, n)
            for key in keys:
                runs = out["runs"][f"{key}:{cache}"]
                per_rank = [run["bytes_per_rank"] for run in runs]
                side: dict[str, Any] = {
                    "what": READERS[key],
                    "times_s": [run["s"] for run in runs],
                    "first_load_s": checked[key]["first_load_s"],
                    "rchar_per_rank": _median_bytes(per_rank, "rchar"),
                    "read_bytes_per_rank": _median_bytes(per_rank, "read_bytes"),
                }
                if key.startswith("tf"):  # tensorfile's sources count their reads
                    side["requests_per_rank"] = _median_bytes(per_rank, "tf_requests")
                fetched = None
                if cache == "cold":
                    fetched = side["read_bytes_per_rank"]
                elif cache == "s3":
                    fetched = [b["s3_received"] for b in checked[key]["bytes_per_rank"]]
                    side["s3_received_per_rank"] = fetched
                if fetched is not None:
                    side["fetched_over_checkpoint"] = sum(fetched) / nbytes
                row.sides[key] = side
            if cache == "cold":
                row.floors = disk
            if cache == "s3":
                n = sum(row.sides["tf_s3"]["requests_per_rank"])
                what = f"its {n:,} requests at the server's rate for small GETs"
                row.floors = {what: [n / rate for rate in rates]}
                row.sides["tf_s3"]["server_small_gets_per_s"] = rates
            result.append(row)
        return result

    return {"dcp_save_1g": save_row, "dcp_load_1g": load_rows}
