"""Whole-process loads from a server (S3 or HTTP), tensorfile against its peers: the data
files, the fresh-process runner and the table the remote load rows share.

Each repetition spawns ``python benchmarks/_remote_child.py LOADER URL...`` per loader, the
loaders alternated (tf, peer 1, peer 2, ..., tf, ...), with ``settle`` seconds before each
child so the memory the previous one freed goes back to the host (as between two runs of a
user's script). Measured per child: the wall time from spawn to exit (taken here), the
import and load times and the RSS once imported (the interpreter with torch: the baseline)
and at its peak (``VmHWM``), taken by the child. An untimed warm-up child per checked loader
compares a CRC-32 of every tensor with the local file's.

The ratio is the best peer's median load time over tensorfile's (> 1: tensorfile faster);
"added RSS / tensors" is (peak - baseline) / tensor bytes, the issue's memory target being
<= 1.1.
"""

from __future__ import annotations

import json
import os
import statistics
import struct
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, check

CHILD = REPO / "benchmarks" / "_remote_child.py"
SHARDS = 4
TARGET = 1.2
"""The issue's target: at least 1.2x the best peer on every remote row."""


@dataclass
class Run:
    """One child's numbers."""

    wall_s: float
    import_s: float
    load_s: float
    base_rss_kib: int
    peak_rss_kib: int


@dataclass
class LoadResult:
    """A remote load row: every loader's runs."""

    name: str
    description: str
    nbytes: int
    loaders: list[str]
    runs: dict[str, list[Run]] = field(default_factory=dict)

    def median(self, loader: str, what: str) -> float:
        return float(statistics.median(getattr(r, what) for r in self.runs[loader]))

    def added(self, loader: str) -> float:
        """Median of (peak - baseline RSS) / tensor bytes."""
        return statistics.median(
            (r.peak_rss_kib - r.base_rss_kib) * 1024 / self.nbytes for r in self.runs[loader]
        )

    @property
    def best_peer(self) -> str:
        peers = [name for name in self.loaders if name != "tf"]
        return min(peers, key=lambda name: self.median(name, "load_s"))

    @property
    def ratio(self) -> float:
        return self.median(self.best_peer, "load_s") / self.median("tf", "load_s")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "bytes": self.nbytes,
            "loaders": {
                name: {
                    "runs": [r.__dict__ for r in self.runs[name]],
                    "median_wall_s": self.median(name, "wall_s"),
                    "median_load_s": self.median(name, "load_s"),
                    "median_peak_rss_mib": self.median(name, "peak_rss_kib") / 1024,
                    "added_rss_over_tensors": self.added(name),
                }
                for name in self.loaders
            },
            "best_peer": self.best_peer,
            "load_ratio_best_peer_over_tf": self.ratio,
            "target": TARGET,
            "met": self.ratio >= TARGET,
        }


def markdown(results: list[LoadResult]) -> str:
    """One line per loader of each row, then the row's ratio against its best peer."""
    lines = [
        "| benchmark | loader | wall (s) | load (s) | GB/s | peak RSS (MiB) "
        "| added RSS / tensors | load ratio (best peer / tf) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for name in r.loaders:
            load = r.median(name, "load_s")
            ratio = ""
            if name == "tf":
                met = "met" if r.ratio >= TARGET else "NOT met"
                ratio = f"**{r.ratio:.2f}** vs {r.best_peer} (target >= {TARGET}: {met})"
            lines.append(
                f"| {r.name}: {r.description} | {name} | {r.median(name, 'wall_s'):.2f} "
                f"| {load:.2f} | {r.nbytes / load / 1e9:.2f} "
                f"| {r.median(name, 'peak_rss_kib') / 1024:,.0f} | {r.added(name):.2f} | {ratio} |"
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- data


def _crcs_of(path: Path) -> dict[str, int]:
    """CRC-32 of every tensor's bytes in a local safetensors file."""
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, stop = info["data_offsets"]
            f.seek(base + start)
            out[name] = zlib.crc32(f.read(stop - start))
    return out


def crcs(paths: list[Path]) -> dict[str, int]:
    """CRC-32 of every tensor of the files."""
    out: dict[str, int] = {}
    for p in paths:
        out |= _crcs_of(p)
    return out


def make_shards(data: Path, numel: int, n_tensors: int) -> tuple[Path, list[Path]]:
    """A checkpoint of :data:`SHARDS` shards of ``n_tensors`` float32 tensors of ``numel``
    elements each, with its ``model.safetensors.index.json`` (made once, reused)."""
    import numpy as np
    import safetensors.numpy

    from benchmarks.common import file_is_valid

    folder = data / f"sharded-{SHARDS}x{n_tensors * numel * 4 >> 20}MiB"
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    weight_map: dict[str, str] = {}
    for k in range(SHARDS):
        path = folder / f"model-{k + 1:05d}-of-{SHARDS:05d}.safetensors"
        names = [f"model.layers.{k * n_tensors + i:03d}.weight" for i in range(n_tensors)]
        if not file_is_valid(path, n_tensors, n_tensors * numel * 4):
            print(f"generating {path}...", file=sys.stderr, flush=True)
            rng = np.random.default_rng(100 + k)
            arrays = {n: rng.standard_normal(numel, dtype=np.float32) for n in names}
            safetensors.numpy.save_file(arrays, str(path))
            del arrays
        paths.append(path)
        weight_map |= dict.fromkeys(names, path.name)
    index = folder / "model.safetensors.index.json"
    total = SHARDS * n_tensors * numel * 4
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return index, paths


# --------------------------------------------------------------------------- children


def child(loader: str, urls: list[str], index: str | None, env: dict[str, str],
          want_crc: bool = False) -> tuple[dict[str, Any], float]:  # fmt: skip
    """Run one child: its JSON line and its wall time (spawn to exit)."""
    argv = [sys.executable, str(CHILD), loader, *urls]
    if index is not None:
        argv += ["--index", index]
    if want_crc:
        argv.append("--check")
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, cwd=REPO, env={**os.environ, **env})
    wall = time.perf_counter() - t0
    check(
        proc.returncode == 0,
        f"{loader} child exited {proc.returncode}: {proc.stderr.decode()[-2000:]}",
    )
    return json.loads(proc.stdout.decode().strip().splitlines()[-1]), wall


def run_row(
    row: LoadResult,
    argv: dict[str, tuple[list[str], str | None]],
    env: dict[str, str],
    expected: dict[str, int],
    checked: list[str],
    repeat: int,
    settle: float,
) -> LoadResult:
    """Check ``checked`` loaders' bytes against ``expected``, then time every loader
    ``repeat`` times, alternated. ``argv``: each loader's URLs and index."""
    for name in checked:
        urls, index = argv[name]
        got, _ = child(name, urls, index, env, want_crc=True)
        check(got["crc32"] == expected, f"{row.name}: {name} loaded other bytes than the file's")
    for name in row.loaders:
        row.runs[name] = []
    for i in range(repeat):
        for name in row.loaders:
            time.sleep(settle)
            urls, index = argv[name]
            got, wall = child(name, urls, index, env)
            check(got["nbytes"] == row.nbytes, f"{row.name}: {name} loaded {got['nbytes']} bytes")
            row.runs[name].append(
                Run(wall, got["import_s"], got["load_s"], got["base_rss_kib"], got["peak_rss_kib"])
            )
            print(f"  {row.name} #{i + 1} {name}: load {got['load_s']:.2f} s, wall {wall:.2f} s, "
                  f"peak {got['peak_rss_kib'] >> 10} MiB", file=sys.stderr, flush=True)  # fmt: skip
    return row
