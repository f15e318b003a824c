"""Loading from a cold and a warm page cache: tensorfile against the reference, fastsafetensors
and the Run:ai streamer, each load in a fresh process.

Rows (``--only load_cold`` selects all four):

* ``cold_load_1g`` / ``warm_load_1g``: the 1 GiB file (16 x 64 MiB F32);
* ``cold_load_4shard`` / ``warm_load_4shard``: a 4 GiB checkpoint of 4 shards of 1 GiB and a
  ``model.safetensors.index.json`` (generated once into the data folder); these rows also time
  ``tfs``, tensorfile's ``load_sharded`` (every shard in one read plan, owned tensors).

Each load is ``python benchmarks/_load_child.py LIB torch BACKEND PATH --touch`` (see there):
import, load every tensor as a torch CPU tensor, read one byte of every 4 KiB page of every
tensor (the same for every library, so a lazy tensor is read from the file inside the timing),
exit. The libraries: ``tf`` (``tensorfile.safetensors.torch.load_file``, ``backend="auto"``,
shard after shard), ``ref`` (``safetensors.torch.load_file`` 0.8, shard after shard; it has no
sharded loader), ``fss`` (fastsafetensors, CPU, no GDS, every shard in one ``fastsafe_open``)
and ``runai`` (the Run:ai streamer, every shard in one ``stream_files``). They alternate,
the order rotated each repetition (tf ref fss runai, ref fss runai tf, ...) so that no library
always follows the same one. Before each child: cold rows evict the files' pages
(``posix_fadvise(POSIX_FADV_DONTNEED)``, file data only), warm rows read the files once; then
the runner sleeps ``settle`` seconds so the memory the previous child freed goes back to the
host. An untimed warm-up child per library checks that all four load the same bytes (CRC-32
of every tensor, taken after each library's loader closed).

Reported per library: medians of the wall time (spawn to exit: interpreter, import, load,
teardown), of the load time (measured inside the child: load + touch) and of the peak RSS;
ratios: the best peer's median over tensorfile's (> 1: tensorfile faster). The floor lines
time the disk (``O_DIRECT`` reads into one reused buffer) and the first touch of 1 GiB of fresh
memory, each on its own, in a fresh process.
"""

from __future__ import annotations

import compileall
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import N_BIG, REPO, Config, check, make_big, page_in
from tests.helpers.pagecache import evict as evict_file

COLD_BENCHMARKS = ("cold_load_1g", "warm_load_1g", "cold_load_4shard", "warm_load_4shard")
COLD_GROUP = "load_cold"
"""``--only`` name that selects every row above."""

CHILD = REPO / "benchmarks" / "_load_child.py"
LIBS = ("tf", "ref", "fss", "runai")
SHARDED_LIBS = ("tf", "tfs", "ref", "fss", "runai")
PEERS = ("ref", "fss", "runai")
NAMES = {
    "tf": "tensorfile",
    "tfs": "tensorfile load_sharded",
    "ref": "safetensors 0.8",
    "fss": "fastsafetensors",
    "runai": "Run:ai",
}
SHARDS = 4


@dataclass
class Run:
    wall_s: float
    import_s: float
    load_s: float
    peak_rss_kib: int
    cpu_s: float
    backend: str | None = None


@dataclass
class ColdResult:
    name: str
    description: str
    nbytes: int
    libs: tuple[str, ...] = LIBS
    runs: dict[str, list[Run]] = field(default_factory=dict)
    floors: dict[str, list[float]] = field(default_factory=dict)

    def median(self, lib: str, what: str) -> float:
        return float(statistics.median(getattr(r, what) for r in self.runs[lib]))

    def best_peer(self, what: str) -> str:
        return min(PEERS, key=lambda lib: self.median(lib, what))

    def ratio(self, what: str) -> float:
        """The best peer's median of ``what`` over tensorfile's (> 1: tensorfile faster)."""
        return self.median(self.best_peer(what), what) / self.median("tf", what)

    def to_json(self) -> dict[str, Any]:
        fields = ("wall_s", "import_s", "load_s", "peak_rss_kib", "cpu_s")
        return {
            "name": self.name,
            "description": self.description,
            "bytes": self.nbytes,
            **{
                NAMES[lib]: {
                    "runs": [r.__dict__ for r in self.runs[lib]],
                    "medians": {f: self.median(lib, f) for f in fields},
                }
                for lib in self.libs
            },
            "best_peer_wall": NAMES[self.best_peer("wall_s")],
            "wall_ratio_best_peer_over_tf": self.ratio("wall_s"),
            "best_peer_load": NAMES[self.best_peer("load_s")],
            "load_ratio_best_peer_over_tf": self.ratio("load_s"),
            "floors_s": {
                k: {"runs": v, "median": statistics.median(v)} for k, v in self.floors.items()
            },
        }


def make_sharded(cfg: Config) -> Path:
    """A checkpoint of :data:`SHARDS` shards the size of the big file, with its index."""
    import safetensors.numpy

    folder = cfg.data / f"ckpt-{SHARDS}x{cfg.big_bytes >> 20}MiB"
    index = folder / "model.safetensors.index.json"
    if index.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    for shard in range(SHARDS):
        name = f"model-{shard + 1:05d}-of-{SHARDS:05d}.safetensors"
        print(f"generating {folder / name}...", file=sys.stderr, flush=True)
        rng = np.random.default_rng(shard)
        arrays = {
            f"model.layers.{shard * N_BIG + i:03d}.weight": rng.random(
                cfg.big_numel, dtype=np.float32
            )
            for i in range(N_BIG)
        }
        safetensors.numpy.save_file(arrays, str(folder / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(arrays, name))
        del arrays
    meta = {"metadata": {"total_size": SHARDS * cfg.big_bytes}, "weight_map": weight_map}
    tmp = index.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, indent=2))
    tmp.rename(index)
    return folder


def files_of(path: Path) -> list[Path]:
    return sorted(path.glob("*.safetensors")) if path.is_dir() else [path]


def evict(path: Path) -> None:
    """Drop the files' pages from the page cache (their data only)."""
    for f in files_of(path):
        evict_file(f)


# The floors, each in a fresh process: the disk alone (O_DIRECT, 8 threads, 8 MiB reads into
# reused buffers, no page cache, no destination) and fresh memory alone (the first touch of
# new pages the size of the data, as owned tensors need).
_FLOOR = """
import mmap, os, sys, threading, time
paths, what = sys.argv[1:-1], sys.argv[-1]
t0 = time.perf_counter()
if what == "disk":
    jobs = [(p, off) for p in paths for off in range(0, os.path.getsize(p), 8 << 20)]
    lock = threading.Lock()
    def work():
        buf = mmap.mmap(-1, 8 << 20)
        fds = {p: os.open(p, os.O_RDONLY | os.O_DIRECT) for p in paths}
        while True:
            with lock:
                if not jobs:
                    return
                p, off = jobs.pop(0)
            os.preadv(fds[p], [buf], off)
    threads = [threading.Thread(target=work) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
else:
    total = sum(os.path.getsize(p) for p in paths)
    import ctypes
    mem = mmap.mmap(-1, total)
    ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(mem)), 1, total)
print(time.perf_counter() - t0)
"""


FLOORS = {"disk O_DIRECT": "disk", "fresh memory first touch": "memory"}


def floors(
    path: Path, repeat: int, settle: float, keys: tuple[str, ...] = tuple(FLOORS)
) -> dict[str, list[float]]:
    """Seconds for the disk alone and for fresh memory alone (see ``_FLOOR``), those of
    :data:`FLOORS` named by ``keys``."""
    out: dict[str, list[float]] = {key: [] for key in keys}
    for _ in range(repeat):
        for key in keys:
            what = FLOORS[key]
            evict(path)
            time.sleep(settle)
            argv = [sys.executable, "-c", _FLOOR, *map(str, files_of(path)), what]
            done = subprocess.run(argv, capture_output=True, text=True, check=True)
            out[key].append(float(done.stdout))
    return out


def child(lib: str, path: Path, *extra: str) -> tuple[dict[str, Any], float, Any]:
    backend = "auto" if lib == "tf" else "mmap"
    argv = [sys.executable, str(CHILD), lib, "torch", backend, str(path), "--touch", *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.stdout.close()
    code = os.waitstatus_to_exitcode(status)
    check(code == 0, f"{lib} child on {path.name} exited {code}")
    return json.loads(out), wall, usage


def bench(name: str, path: Path, cold: bool, nbytes: int, repeat: int, settle: float) -> ColdResult:
    # users' installs hold compiled bytecode; a sandbox with PYTHONDONTWRITEBYTECODE would
    # otherwise compile tensorfile's modules in every child (~0.1-0.3 s of "import")
    compileall.compile_dir(REPO / "src", quiet=1)
    for f in files_of(path):
        page_in(f)
    libs = SHARDED_LIBS if path.is_dir() else LIBS
    crcs = {lib: child(lib, path, "--check")[0]["crc32"] for lib in libs}
    check(
        all(c == crcs["ref"] for c in crcs.values()),
        f"{name}: the libraries loaded different bytes",
    )
    what = f"{len(files_of(path))} shards" if path.is_dir() else "1 file"
    result = ColdResult(
        name,
        f"{'cold' if cold else 'warm'} page cache, {nbytes >> 20} MiB in {what}, fresh process, "
        "every page touched",
        nbytes,
        libs,
    )
    for rep in range(repeat):
        for lib in libs[rep % len(libs) :] + libs[: rep % len(libs)]:  # rotated: no fixed slot
            if cold:
                evict(path)
            else:
                for f in files_of(path):
                    page_in(f)
            time.sleep(settle)
            data, wall, usage = child(lib, path)
            result.runs.setdefault(lib, []).append(
                Run(
                    wall,
                    data["import_s"],
                    data["load_s"],
                    data["peak_rss_kib"],
                    usage.ru_utime + usage.ru_stime,
                    data.get("backend"),
                )
            )
    if cold:
        result.floors = floors(path, min(repeat, 3), settle)
    return result


def runners(
    cfg: Config, quick: bool, settle: float, repeat: int | None = None
) -> dict[str, Callable[[], ColdResult]]:
    """The cold/warm rows by name (1 GiB rows: 5 repetitions, 4 GiB rows: 3; quick: 2;
    ``repeat``: that many for all)."""
    one, four = (2, 2) if quick else (5, 3)
    if repeat is not None:
        one = four = repeat

    def single(cold: bool) -> ColdResult:
        make_big(cfg)
        name = "cold_load_1g" if cold else "warm_load_1g"
        return bench(name, cfg.big_path, cold, cfg.big_bytes, one, settle)

    def sharded(cold: bool) -> ColdResult:
        folder = make_sharded(cfg)
        name = "cold_load_4shard" if cold else "warm_load_4shard"
        return bench(name, folder, cold, SHARDS * cfg.big_bytes, four, settle)

    return {
        "cold_load_1g": lambda: single(True),
        "warm_load_1g": lambda: single(False),
        "cold_load_4shard": lambda: sharded(True),
        "warm_load_4shard": lambda: sharded(False),
    }


def markdown(results: list[ColdResult]) -> str:
    lines = [
        "| row | library | wall (s) | load (s) | peak RSS (MiB) | tensorfile backend |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in results:
        for lib in r.libs:
            backends = sorted({run.backend for run in r.runs[lib] if run.backend})
            lines.append(
                f"| {r.name} | {NAMES[lib]} | {r.median(lib, 'wall_s'):.2f} "
                f"| {r.median(lib, 'load_s'):.2f} | {r.median(lib, 'peak_rss_kib') / 1024:,.0f} "
                f"| {', '.join(backends)} |"
            )
        for key, values in r.floors.items():
            lines.append(
                f"| {r.name} | floor: {key} alone | | {statistics.median(values):.2f} | | |"
            )
        lines.append(
            f"| {r.name} | **best peer / tensorfile** | **{r.ratio('wall_s'):.2f}** "
            f"({NAMES[r.best_peer('wall_s')]}) | **{r.ratio('load_s'):.2f}** "
            f"({NAMES[r.best_peer('load_s')]}) | | |"
        )
    return "\n".join(lines)
