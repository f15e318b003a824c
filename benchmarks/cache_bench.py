"""The chunk cache for remote files: fresh-process loads of the 1 GiB file served by nginx.

Every row loads all 16 tensors as owned torch tensors (``tensorfile.safetensors.torch.
load_file(..., backend="pread")``) in a fresh interpreter (``benchmarks/_load_child.py``,
with ``$TENSORFILE_CACHE_DIR`` naming the cache for the cached side), the peer and the cache
alternated, ``--settle`` seconds before each child, medians. Rows (``--only cache`` selects
all four):

* ``cache_cold``: the first load, into an empty cache (fetch + write the chunks), against
  the same load without a cache: what filling the cache costs.
* ``cache_hit``: a full hit (one 64-byte request for the ETag, every chunk from the cache
  folder, page-cached) against a load of the same file from local disk (page-cached): the
  floor, a full hit can at best match it.
* ``cache_hit_cold``: the same with the chunk files and the local file evicted from the
  page cache (``posix_fadvise(DONTNEED)``) before each child.
* ``cache_half``: a load after every second chunk was deleted (only those are fetched and
  written) against the load without a cache: a cache that needs every file present (the
  Run:ai streamer's, which pulls whole objects from object stores only) downloads all of it
  again.

Peak RSS is the child's ``VmHWM``. Time ratios: peer ÷ cache (> 1: the cache is faster);
RSS ratio: cache ÷ peer.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import N_BIG, Config, check, page_in
from benchmarks.process import ProcessResult, Run, child, run_of
from benchmarks.process import markdown as process_markdown
from tests.helpers.pagecache import evict as _evict

CACHE_BENCHMARKS = ("cache_cold", "cache_hit", "cache_hit_cold", "cache_half")
CACHE_GROUP = "cache"
"""``--only`` name that selects every row above."""


def _chunks(cache: Path) -> list[Path]:
    return sorted(cache.glob("chunks-v1/*/*.chunk"), key=lambda p: int(p.name.split(".")[0]))


def _child(target: str, cache: Path | None, *extra: str) -> tuple[dict[str, Any], Run]:
    """One load in a fresh interpreter (``cache``: the cache folder, None: no cache)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORFILE_CACHE")}
    if cache is not None:
        env["TENSORFILE_CACHE_DIR"] = str(cache)
    data, wall, usage = child("tf", "torch", "pread", target, *extra, env=env)
    return data, run_of(data, wall, usage)


class _Bench:
    """nginx serving the big file, and one cache folder (both made once)."""

    def __init__(self, cfg: Config, repeat: int, settle: float) -> None:
        from tests.helpers.servers import start_nginx

        self.cfg, self.repeat, self.settle = cfg, repeat, settle
        self.tmp = Path(tempfile.mkdtemp(prefix="tf-bench-cache-"))
        atexit.register(shutil.rmtree, self.tmp, True)
        server, proc = start_nginx(self.tmp)
        atexit.register(proc.terminate)
        os.symlink(cfg.big_path, server.root / "big.safetensors")
        self.url = f"{server.url}/big.safetensors"
        self.local = str(cfg.big_path)
        self.cache = self.tmp / "cache"
        self.crc: dict[str, int] | None = None

    def checked(self, target: str, cache: Path | None) -> None:
        """An untimed load that must give the file's bytes (CRC-32 of every tensor)."""
        data, _ = _child(target, cache, "--check")
        if self.crc is None:
            self.crc = _child(self.local, None, "--check")[0]["crc32"]
        check(data["crc32"] == self.crc, f"{target} via {cache}: other bytes than the file")

    def row(
        self,
        name: str,
        what: str,
        peer: tuple[str, Path | None, Callable[[], None]],
        mine: Callable[[], None],
    ) -> ProcessResult:
        page_in(self.cfg.big_path)
        self.checked(self.url, self.cache)
        result = ProcessResult(
            name, f"{what}, {N_BIG} x {self.cfg.big_numel * 4 >> 20} MiB F32", self.cfg.big_bytes
        )
        target, cache, prepare = peer
        for _ in range(self.repeat):
            for lib in ("ref", "tf"):
                (prepare if lib == "ref" else mine)()
                time.sleep(self.settle)
                if lib == "ref":
                    result.runs[lib].append(_child(target, cache)[1])
                else:
                    result.runs[lib].append(_child(self.url, self.cache)[1])
        return result

    def fill(self) -> None:
        if len(_chunks(self.cache)) < -(-os.path.getsize(self.local) // (16 << 20)):
            shutil.rmtree(self.cache, ignore_errors=True)
            _child(self.url, self.cache)

    def empty(self) -> None:
        shutil.rmtree(self.cache, ignore_errors=True)

    def cold_hit(self) -> None:
        self.fill()
        for p in _chunks(self.cache):
            _evict(p)

    def half(self) -> None:
        self.fill()
        for p in _chunks(self.cache)[::2]:
            p.unlink()


def runners(cfg: Config, repeat: int, settle: float) -> dict[str, Callable[[], ProcessResult]]:
    """The cache rows by name (one nginx and one cache folder shared by all)."""
    state: dict[str, _Bench] = {}

    def bench() -> _Bench:
        if "b" not in state:
            state["b"] = _Bench(cfg, repeat, settle)
        return state["b"]

    def nothing() -> None:
        pass

    def evict_local() -> None:
        _evict(Path(bench().local))

    def cold() -> ProcessResult:
        b = bench()
        return b.row("cache_cold", "first load into an empty cache vs HTTP without a cache",
                     (b.url, None, nothing), b.empty)  # fmt: skip

    def hit() -> ProcessResult:
        b = bench()
        return b.row("cache_hit", "full hit vs the local file (the floor), page-cached",
                     (b.local, None, page_in_local), b.fill)  # fmt: skip

    def page_in_local() -> None:
        page_in(Path(bench().local))

    def hit_cold() -> ProcessResult:
        b = bench()
        return b.row("cache_hit_cold", "full hit vs the local file, both evicted from the "
                     "page cache", (b.local, None, evict_local), b.cold_hit)  # fmt: skip

    def half() -> ProcessResult:
        b = bench()
        return b.row("cache_half", "half the chunks evicted vs HTTP without a cache",
                     (b.url, None, nothing), b.half)  # fmt: skip

    return {"cache_cold": cold, "cache_hit": hit, "cache_hit_cold": hit_cold, "cache_half": half}


def markdown(results: list[ProcessResult]) -> str:
    """The rows as a table: the peer (described in each row) against the cache."""
    return process_markdown(
        results,
        "| benchmark | peer wall (s) | cache wall (s) | wall ratio (peer/cache) "
        "| peer load (s) | cache load (s) | load ratio | peer peak RSS (MiB) "
        "| cache peak RSS (MiB) | RSS (cache/peer) |",
    )
