"""Rank-aware loads (issue 38): one checkpoint loaded by 4 ranks with a tensor-parallel plan,
real processes on gloo (``benchmarks/_rankload_child.py``, one per rank, started as torchrun
would), from HTTP, from S3 and from a cold local disk.

The checkpoint (generated once into the data folder by the reference's ``save_file``): a
small Llama-like layout in BF16, hidden 2048, intermediate 5632, vocabulary 32000, 8 layers,
1.01 GiB of tensors. Each rank's plan (:func:`benchmarks._rankload_child.entries`): the
fused QKV and gate-up weights as interleaved intervals of dimension 0 (its share of each
part: ``Intervals``), ``o_proj`` and ``down_proj`` split by columns, ``lm_head`` by rows, the
embeddings and norms whole (replicated). ``--quick``: hidden 512, intermediate 1408,
vocabulary 8000, 2 layers (about 17 MiB).

Sides (see the child): ``coop`` ``tensorfile.distributed.load(src, plan, group=WORLD)``;
``alone`` ``load(src, plan)`` in every rank on its own (the naive plan: each rank reads its
own slices); ``ref`` the reference's ``safe_open(path, "pt").get_slice(name)[...]`` per
tensor, which cannot read HTTP: from the server each ``ref`` rank first downloads the whole
file with one plain GET (``urllib.request``, streamed into a file of its own on a tmpfs)
inside its timing, then slices it.

Sources: ``http``: nginx on 127.0.0.1 (``tests/helpers/servers.py``), whose access log counts
the body bytes it sent: the bytes fetched from storage by all ranks together; the served file
stays in the page cache. ``s3``: SeaweedFS on 127.0.0.1 (``tests/helpers/seaweed.py``), the
file uploaded as one object; the untimed run of each side goes through a byte-counting TCP
relay in the runner (``benchmarks/_dcp_child.py``'s ``Relay``): the bytes the server sent all
ranks; the timed runs reach the server directly. ``cold``: the local file, its pages dropped
from the page cache (``posix_fadvise(DONTNEED)``, file data only: the libraries' code stays
cached, and a virtual disk's host cache is beyond reach) before every run; each rank's
``/proc/self/io`` ``read_bytes`` counts what it faulted or read in from the disk (the 4 ranks
share the page cache: a page one rank brought in is not read again for another).

How it runs: an untimed round per source and side first, in which every rank also takes a
CRC-32 of every result tensor: each rank's results must be bit-identical to the reference's
(``get_slice`` on the local file). Then ``--repeat`` rounds (3; quick 2), each running every
source and side once, the sides' order rotated each round, ``settle`` seconds before each
group. A run spawns 4 fresh processes; per run: the load time (each rank's time from a
barrier after ``init_process_group`` to its last slice, download included; the maximum over
the ranks, i.e. the time until every rank holds its slices) and the wall time (spawn to the
last rank's exit: interpreter, imports, process group, load, teardown). Ratios: peer's
median over ``coop``'s (> 1: cooperative faster), with the range of the per-round ratios.
Floors: one client fetching the file from nginx (``curl``, to ``/dev/null``) and from
SeaweedFS (boto3's ``download_file``, to a tmpfs); the disk alone
(``O_DIRECT``, ``benchmarks/cold_bench.py``) and ``cat``.
"""

from __future__ import annotations

import atexit
import compileall
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, Config, check

RANKLOAD_BENCHMARKS = ("rankload_1g",)
RANKLOAD_GROUP = "rankload"
"""``--only`` name that selects the rows above."""

CHILD = REPO / "benchmarks" / "_rankload_child.py"
WORLD = 4
SIDES = ("coop", "alone", "ref")
SOURCES = ("http", "s3", "cold")
BUCKET = "tf-bench"
BYTES_TARGET = 1.05
"""Cooperative: all ranks together fetch at most this many times the checkpoint."""
TIME_TARGET = 2.0
"""Cooperative: at least this many times faster than the reference's ``get_slice``."""
FULL = {"hidden": 2048, "intermediate": 5632, "vocab": 32000, "layers": 8}
QUICK = {"hidden": 512, "intermediate": 1408, "vocab": 8000, "layers": 2}
DESCRIBED = {
    "http": "plan, over HTTP (nginx on 127.0.0.1)",
    "s3": "plan, from S3 (SeaweedFS on 127.0.0.1)",
    "cold": "plan, cold disk",
}
WHAT = {
    "coop": "tensorfile load(plan, group=WORLD): cooperative",
    "alone": "tensorfile load(plan): each rank alone",
    "ref": "safetensors 0.8 safe_open + get_slice per tensor",
}
REF_REMOTE = {
    "http": "safetensors 0.8: whole-file GET per rank (urllib, to tmpfs), then get_slice",
    "s3": "safetensors 0.8: boto3 download_file per rank (to tmpfs), then get_slice",
}


@dataclass
class RankloadResult:
    """One source's runs: per side, each run's wall time, per-rank load times and bytes."""

    name: str
    description: str
    nbytes: int
    source: str
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    checked: dict[str, Any] = field(default_factory=dict)
    floors: dict[str, list[float]] = field(default_factory=dict)

    def loads(self, side: str) -> list[float]:
        """Each run's time to a loaded rank (the slowest rank's load)."""
        return [max(r["load_s"] for r in run["ranks"]) for run in self.runs[side]]

    def walls(self, side: str) -> list[float]:
        return [run["wall_s"] for run in self.runs[side]]

    def fetched(self, side: str) -> list[int]:
        """Each run's bytes fetched from storage by all ranks (server-sent bytes over HTTP,
        ``read_bytes`` from the disk)."""
        got = [run["fetched"] for run in self.runs[side] if run["fetched"] is not None]
        return got or [self.checked[side]["fetched"]]  # (S3: counted in the untimed run)

    def ratios(self, peer: str, what: str) -> dict[str, Any]:
        get = self.loads if what == "load" else self.walls
        p, c = get(peer), get("coop")
        return {
            "ratio": statistics.median(p) / statistics.median(c),
            "run_ratios": [a / b for a, b in zip(p, c, strict=True)],
        }

    def to_json(self) -> dict[str, Any]:
        sides = {}
        for side, runs in self.runs.items():
            fetched = statistics.median(self.fetched(side))
            sides[side] = {
                "what": REF_REMOTE.get(self.source, WHAT[side]) if side == "ref" else WHAT[side],
                "runs": runs,
                "median_load_s": statistics.median(self.loads(side)),
                "median_wall_s": statistics.median(self.walls(side)),
                "median_fetched_bytes": fetched,
                "fetched_over_checkpoint": fetched / self.nbytes,
            }
            if side != "coop":
                sides[side]["load_ratio_over_coop"] = self.ratios(side, "load")
                sides[side]["wall_ratio_over_coop"] = self.ratios(side, "wall")
        ref = self.ratios("ref", "load")["ratio"]
        coop_fetched = sides["coop"]["fetched_over_checkpoint"]
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "bytes": self.nbytes,
            "world": WORLD,
            "sides": sides,
            "checked": self.checked,
            "time_target": TIME_TARGET,
            "time_met": ref >= TIME_TARGET,
            "bytes_target": BYTES_TARGET,
            "bytes_met": coop_fetched <= BYTES_TARGET,
            "floors_s": {
                k: {"runs": v, "median": statistics.median(v)} for k, v in self.floors.items()
            },
        }


def markdown(results: list[RankloadResult]) -> str:
    """The console table: per source and side, the medians, bytes and ratios."""
    lines = [
        "| source | side | load (s) | wall (s) | fetched ÷ checkpoint | ref ÷ this (load) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        for side in r.runs:
            load = statistics.median(r.loads(side))
            fetched = statistics.median(r.fetched(side)) / r.nbytes
            ratio = r.ratios("ref", "load")
            shown = ""
            if side == "coop":
                lo, hi = min(ratio["run_ratios"]), max(ratio["run_ratios"])
                shown = f"**{ratio['ratio']:.2f}** ({lo:.2f}–{hi:.2f})"
            lines.append(
                f"| {r.source} | {side} | {load:.2f} | {statistics.median(r.walls(side)):.2f} "
                f"| {fetched:.2f} | {shown} |"
            )
        for key, values in r.floors.items():
            lines.append(f"| {r.source} | floor: {key} | {statistics.median(values):.2f} | | | |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- data


def make_checkpoint(cfg: Config, shape: dict[str, int]) -> tuple[Path, int]:
    """The checkpoint of :func:`benchmarks._rankload_child.layout` (made once, reused when
    its tensors are as expected); its path and tensor bytes."""
    import safetensors
    import safetensors.torch
    import torch

    from benchmarks._rankload_child import layout

    tensors = layout(shape)
    nbytes = sum(2 * _numel(s) for _, s, _ in tensors)
    path = cfg.data / f"rankload-tp-h{shape['hidden']}-l{shape['layers']}.safetensors"
    if path.exists():
        try:
            with safetensors.safe_open(str(path), "pt") as f:
                have = {n: tuple(f.get_slice(n).get_shape()) for n in f.keys()}
            if have == {n: s for n, s, _ in tensors}:
                return path, nbytes
        except Exception:  # (a partial file from an interrupted run: made again)
            pass
    print(f"generating {path} ({nbytes >> 20} MiB)...", file=sys.stderr, flush=True)
    g = torch.Generator().manual_seed(38)
    data = {n: torch.randn(s, generator=g).to(torch.bfloat16) for n, s, _ in tensors}
    tmp = path.with_suffix(".tmp")
    safetensors.torch.save_file(data, str(tmp), metadata={"format": "pt"})
    tmp.rename(path)
    return path, nbytes


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# --------------------------------------------------------------------------- runs


def runners(
    cfg: Config, quick: bool, settle: float, repeat: int | None
) -> dict[str, Callable[[], list[RankloadResult]]]:
    """The rank-aware load rows by name."""
    return {"rankload_1g": lambda: bench(cfg, quick, settle, repeat)}


def bench(cfg: Config, quick: bool, settle: float, repeat: int | None) -> list[RankloadResult]:
    from benchmarks._dcp_child import Relay
    from benchmarks.cold_bench import evict, floors
    from benchmarks.dcp_bench import cat, spawn
    from tests.helpers import seaweed
    from tests.helpers.servers import start_nginx

    shape = QUICK if quick else FULL
    rounds = repeat if repeat is not None else 2 if quick else 3
    path, nbytes = make_checkpoint(cfg, shape)
    compileall.compile_dir(REPO / "src", quiet=1)  # as users' installs: no compiling in ranks
    root = Path(tempfile.mkdtemp(prefix="tf-bench-rankload-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    srv, proc = start_nginx(root)
    atexit.register(proc.terminate)
    (srv.root / path.name).symlink_to(path)
    url = f"{srv.url}/{path.name}"
    shm = Path(tempfile.mkdtemp(prefix="tf-bench-rankload-", dir="/dev/shm"))
    atexit.register(shutil.rmtree, shm, ignore_errors=True)
    weed = seaweed.start()
    atexit.register(weed.stop)
    weed.client.create_bucket(Bucket=BUCKET)
    weed.client.upload_file(str(path), BUCKET, f"rankload/{path.name}")
    host, _, port = weed.endpoint.removeprefix("http://").partition(":")
    relay = Relay((host, int(port)))
    sources = {"http": url, "s3": f"s3://{BUCKET}/rankload/{path.name}", "cold": str(path)}

    def run(side: str, source: str, checking: bool) -> dict[str, Any]:
        if source == "cold":
            evict(path)
        time.sleep(settle)
        srv.reset()
        env = {"GLOO_SOCKET_IFNAME": "lo"}
        counted = source == "s3" and checking  # through the relay: untimed runs only
        if source == "s3":
            endpoint = f"http://127.0.0.1:{relay.port}" if counted else weed.endpoint
            env |= {**weed.env, "AWS_ENDPOINT_URL": endpoint}
        before = relay.received
        config = {"source": sources[source], "layout": shape, "tmp": str(shm), "check": checking}
        t0 = time.perf_counter()
        ranks = spawn(side, WORLD, config, root, env, CHILD)
        wall = time.perf_counter() - t0
        fetched: int | None = None
        if source == "http":
            fetched = sum(r.body_bytes for r in srv.requests())
        elif source == "cold":
            fetched = sum(r["disk_read_bytes"] for r in ranks)
        elif counted:
            fetched = relay.received - before
        got = {"wall_s": wall, "fetched": fetched, "ranks": ranks}
        loaded = max(r["load_s"] for r in ranks)
        shown = "" if fetched is None else f", fetched {fetched / nbytes:.2f}x"
        print(f"  rankload {source} {side}: load {loaded:.2f} s, wall {wall:.2f} s{shown}",
              file=sys.stderr, flush=True)  # fmt: skip
        return got

    results = {
        s: RankloadResult(
            f"rankload_{s}",
            f"{nbytes / 2**30:.2f} GiB BF16 checkpoint, {WORLD} gloo ranks, tensor-parallel "
            + DESCRIBED[s],
            nbytes,
            s,
        )
        for s in SOURCES
    }
    # untimed: each side's results checked against the reference's get_slice
    for source in SOURCES:
        crcs = {}
        for side in SIDES:
            got = run(side, source, True)
            crcs[side] = [r["crc32"] for r in got["ranks"]]
            results[source].checked[side] = {
                "wall_s": got["wall_s"],
                "fetched": got["fetched"],
                "ranks": [{k: v for k, v in r.items() if k != "crc32"} for r in got["ranks"]],
            }
        for side in SIDES:
            check(crcs[side] == crcs["ref"], f"rankload {source}: {side} differs from get_slice")
    for i in range(rounds):
        for source in SOURCES:
            for side in SIDES[i % len(SIDES) :] + SIDES[: i % len(SIDES)]:
                results[source].runs.setdefault(side, []).append(run(side, source, False))
    for source in SOURCES:  # table order
        results[source].runs = {s: results[source].runs[s] for s in SIDES}
    n = min(rounds, 3)
    boto = [_boto3(weed, path, shm) for _ in range(n)]
    results["s3"].floors = {"one client downloads the file (boto3)": boto}
    weed.stop()
    results["http"].floors = {"one client fetches the file (curl)": [_curl(url) for _ in range(n)]}
    disk = floors(path, n, settle, ("disk O_DIRECT",))
    disk["disk buffered (cat)"] = [cat(path) for _ in range(n)]
    results["cold"].floors = disk
    return [results[s] for s in SOURCES]


def _boto3(weed: Any, path: Path, folder: Path) -> float:
    """Seconds for boto3's ``download_file`` of the checkpoint from SeaweedFS to a tmpfs."""
    dest = folder / "floor.safetensors"
    t0 = time.perf_counter()
    weed.client.download_file(BUCKET, f"rankload/{path.name}", str(dest))
    seconds = time.perf_counter() - t0
    dest.unlink()
    return seconds


def _curl(url: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", url], check=True)
    return time.perf_counter() - t0
